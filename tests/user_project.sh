#!/usr/bin/env bash
# The example user project against the installed package: install spikehunt
# to a temporary prefix, configure and build examples/user_project with
# find_package(spikehunt), then run its own CLI (run, doctor, sweep through
# child processes of itself, report, guard) and its GoogleTest suite.
# Usage: tests/user_project.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
here=$(dirname "$0")
# shellcheck source=tests/example_build.sh
. "$here/example_build.sh" "$1" "$2" user_project

cd "$src/examples/user_project"
app="$work/build/spirals"
expect 0 '"head_lr": 0.01' -- "$app" run --config spirals.json --print-config
expect 0 'scenario "spirals" \(4,547 parameters, 70 steps' -- "$app" run --config spirals.json --no-checkpoints --out "$work/results"
grep -q 'params   head_lr=0.01 label_smoothing=0.05 width=64' <<<"$out" || fail "run shows the declared params"
grep -q 'verdict: healthy after 70 of 70 steps' <<<"$out" || fail "two batches an optimizer step: 70 steps"
expect 2 'params.widht = 8 is not a parameter of scenario "spirals"' -- "$app" run --config spirals.json --set params.widht=8
expect 2 'scenario = "spiral" is not a registered scenario \(standard, spirals\)' -- "$app" run --config spirals.json --set scenario=spiral
expect 0 'no vital sign failed' -- "$app" doctor --config spirals.json
expect 1 'replay: reproduced' -- "$app" sweep --space spirals_hot_space.json --runs 4 -j 2 --shrink-bursts 10 --out "$work/sweep" --no-progress
grep -qE 'replay it: [^ ]*spirals replay ' <<<"$out" || fail "the sweep's replay command names the user's program"
grep -qE '^  params.head_lr +\[' <<<"$out" || fail "the per-factor table has the user's own knob"
# The draft regression test, pasted into a test file of the user's next to their include.
{
  echo '#include "spirals.h"'
  echo "$out" | awk '/draft regression test:/ {on = 1; next} on && /^     / {print substr($0, 6); next} on {exit}'
} > "$work/draft_test.cpp"
grep -q 'spikehunt::register_scenario' "$work/draft_test.cpp" || fail "the draft registers the user's scenario first"
cmake -S . -B "$work/build" -DSPIRALS_DRAFT="$work/draft_test.cpp" > "$work/configure-draft.log" &&
  cmake --build "$work/build" --target spirals_draft > "$work/build-draft.log" 2>&1 ||
  { tail -n 40 "$work/build-draft.log"; cat "$work/draft_test.cpp"; fail "the draft regression test does not build"; }
expect 1 'Failure' -- "$work/build/spirals_draft"
echo "ok: the draft builds, registers spirals and fails on the unstable config"
expect 0 '4 runs, 1 failed, 1 distinct failure\(s\), 1 chart\(s\)' -- "$app" report "$work/sweep"
grep -q 'spirals replay ' "$work/sweep/report.html" || fail "the report's replay command names the user's program"
grep -q 'params.head_lr' "$work/sweep/report.html" || fail "the report's factors include the user's own knob"
expect 0 'wrote ' -- "$app" guard record --suite guard.json --out "$work/baseline.json"
expect 0 'no regression: 2 of 2' -- "$app" guard check --suite guard.json --baseline "$work/baseline.json"
expect 1 'spirals: REGRESSION' -- "$app" guard check --suite guard.json --baseline "$work/baseline.json" --set optimizer.lr=4
(cd "$work" && "$work/build/spirals_tests") || fail "the example's GoogleTest suite"
echo "user project: built against $work/prefix and passed"
