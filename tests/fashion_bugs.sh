#!/usr/bin/env bash
# The doctor against a user's code it has never seen: build examples/fashion_bugs
# against the installed package, run its doctor CLI on a healthy config and on
# one planted bug, then its GoogleTest suite (every planted bug's top-ranked
# cause, no alarm on healthy runs).
# Usage: tests/fashion_bugs.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
here=$(dirname "$0")
# shellcheck source=tests/example_build.sh
. "$here/example_build.sh" "$1" "$2" fashion_bugs

[ -r /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] ||
  fail "Debian's dataset-fashion-mnist is not installed (scripts/setup.sh installs it)"
cd "$src/examples/fashion_bugs"
app="$work/build/fashion_bugs"
expect 0 'no vital sign failed' -- "$app" doctor --config fashion.json
expect 1 'most likely cause: the inputs are not normalized' -- "$app" doctor --config fashion.json --set params.bug=raw_pixels
expect 2 'params.bug = "raw_pixel" is not one of' -- "$app" doctor --config fashion.json --set params.bug=raw_pixel
expect 1 'cause      the output has 5 classes but a label is' -- "$app" run --config fashion.json --set params.bug=five_outputs --out "$work/runs"
grep -q 'verdict: crashed' <<<"$out" || fail "run: a throw in the loss is a crashed verdict"
expect 0 '"passed": true' -- "$app" doctor --config fashion.json --json
(cd "$work" && "$work/build/fashion_bugs_tests") || fail "the planted-bug suite"
echo "fashion bugs: built against $work/prefix and passed"
