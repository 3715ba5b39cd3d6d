#!/usr/bin/env bash
# A project written against spikehunt 0.1 (tests/legacy_project: find_package
# 0.1, spikehunt::generators, train_step) builds against the installed 0.2,
# CMake and the compiler say what is deprecated, and it trains and runs verbs.
# Usage: tests/legacy_project.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
here=$(dirname "$0")
# shellcheck source=tests/example_build.sh
. "$here/example_build.sh" "$1" "$2" tests/legacy_project

grep -q "spikehunt::generators is deprecated since spikehunt 0.2.0" "$work/configure.log" ||
  { cat "$work/configure.log"; fail "linking spikehunt::generators does not warn that it is deprecated"; }
echo "ok: CMake warns that spikehunt::generators is deprecated"
grep -q "train_step.*is deprecated" "$work/build.log" ||
  { tail -n 40 "$work/build.log"; fail "calling train_step does not warn that it is deprecated"; }
grep -q "use spikehunt::Trainer::step" "$work/build.log" || fail "the deprecation does not say what to use instead"
echo "ok: the compiler warns that train_step is deprecated, and names Trainer::step"
app="$work/build/legacy"
expect 0 'trained 6 steps with train_step' -- "$app" steps
expect 0 'spikehunt 0\.2\.0' -- "$app" --version
cd "$work"
expect 0 'verdict: healthy after 6 of 6 steps' -- "$app" run --set scenario=tiny --no-checkpoints --out "$work/results"
echo "legacy project: a 0.1 project built against $work/prefix and ran"
