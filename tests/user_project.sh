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
expect 0 'scenario "spirals" \(4,547 parameters' -- "$app" run --config spirals.json --no-checkpoints --out "$work/results"
expect 0 'verdict: healthy after 140 of 140 steps' -- "$app" run --config spirals.json --no-checkpoints --out "$work/results"
expect 2 'scenario = "spiral" is not a registered scenario \(standard, spirals\)' -- "$app" run --config spirals.json --set scenario=spiral
expect 0 'overfit_one_batch' -- "$app" doctor --config spirals.json
expect 1 'replay: reproduced' -- "$app" sweep --space spirals_hot_space.json --runs 4 -j 2 --shrink-budget 10 --out "$work/sweep" --no-progress
echo "$out" | grep -q 'replay it: spirals replay ' || fail "the sweep's replay command names the user's program"
expect 0 '4 runs, 1 failed, 1 distinct failure\(s\), 1 chart\(s\)' -- "$app" report "$work/sweep"
grep -q 'spirals replay ' "$work/sweep/report.html" || fail "the report's replay command names the user's program"
expect 0 'wrote ' -- "$app" guard record --suite guard.json --out "$work/baseline.json"
expect 0 'no regression: 2 of 2' -- "$app" guard check --suite guard.json --baseline "$work/baseline.json"
expect 1 'spirals: REGRESSION' -- "$app" guard check --suite guard.json --baseline "$work/baseline.json" --set optimizer.lr=4
(cd "$work" && "$work/build/spirals_tests") || fail "the example's GoogleTest suite"
echo "user project: built against $work/prefix and passed"
