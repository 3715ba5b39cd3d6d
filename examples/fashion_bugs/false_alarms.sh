#!/usr/bin/env bash
# false_alarms.sh — the doctor's false-alarm count on healthy runs of the
# fashion code: SGD with momentum 0.9 at five learning rates over 10 seeds,
# Adam at three over 5 seeds, plain SGD at three; prints each run whose
# doctor raised an alarm and the count.
# Usage: examples/fashion_bugs/false_alarms.sh PATH/TO/fashion_bugs
set -euo pipefail
app=$1
cd "$(dirname "$0")"
runs=0 alarms=0
check() {
  runs=$((runs + 1))
  local out rc=0
  out=$("$app" doctor --config fashion.json "$@" 2>&1) || rc=$?
  if [ "$rc" -ne 0 ]; then
    alarms=$((alarms + 1))
    echo "alarm (exit $rc): $* :: $(echo "$out" | grep -m1 -E 'most likely cause|error')"
  fi
}
for lr in 0.005 0.01 0.02 0.05 0.1; do
  for seed in 0 1 2 3 4 5 6 7 8 9; do check --set optimizer.lr=$lr --set seed=$seed; done
done
for lr in 0.0003 0.001 0.003; do
  for seed in 0 1 2 3 4; do check --set optimizer.kind=adam --set optimizer.lr=$lr --set seed=$seed; done
done
for lr in 0.05 0.1 0.2; do check --set optimizer.momentum=0 --set optimizer.lr=$lr; done
echo "healthy runs: $runs, false alarms: $alarms"
