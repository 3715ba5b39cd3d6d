#!/usr/bin/env bash
# A sharded sweep on a real Slurm (Debian's slurm-wlm 22.05 and munge): starts
# munged, slurmctld and slurmd on localhost (scripts/slurm/local-cluster.sh,
# a slurm.conf of its own in a temporary folder), submits a 3-task array and
# its merge with scripts/slurm/spikehunt-slurm, and checks that the merged
# result equals a one-machine sweep of the same seed and space (`spikehunt
# compare`: samples, verdicts, fault signatures, distinct failures, minimal
# configs, replays). Then kills one array task mid-way (scancel), resubmits
# it, and checks that no run was lost or repeated. Every daemon it started is
# stopped by pid on exit, and by a watcher if this script is killed.
# Exit 77 (ctest: Skipped) with the reason when Slurm cannot start here.
# Usage: tests/slurm_cluster.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
bin=$(cd "$1" && pwd)/spikehunt
src=$(cd "$2" && pwd)
slurm=$src/scripts/slurm
work=$(mktemp -d /tmp/spikehunt-slurm.XXXXXX)
cluster=$work/cluster
fail() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "SKIPPED: $*" >&2; exit 77; }
cleanup() {
  "$slurm/local-cluster.sh" stop "$cluster" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

# Bad flags of the wrapper are exit 2 with the flag and its value, before anything is submitted.
bad() {  # bad PATTERN -- args...
  local pattern=$1 rc=0 said
  shift 2
  said=$("$slurm/spikehunt-slurm" "$@" 2>&1) || rc=$?
  [ $rc -eq 2 ] && grep -q -- "$pattern" <<<"$said" || fail "spikehunt-slurm $*: exit $rc, '$said'"
}
bad "--shards = 4 is more than --runs = 3" -- submit builtin --runs 3 --shards 4 --out "$work/bad"
bad "--seed = 'x' must be a whole number" -- submit builtin --runs 3 --shards 2 --seed x --out "$work/bad"
bad "SPACE = '$work/none.json' is not a file" -- submit "$work/none.json" --runs 3 --shards 2 --out "$work/bad" --spikehunt "$bin"
bad "$work/slurm/submission is missing" -- resubmit "$work" 1
[ ! -e "$work/bad" ] || fail "a refused submission wrote nothing"

rc=0
"$slurm/local-cluster.sh" start "$cluster" --owner $$ >"$work/start.log" 2>&1 || rc=$?
if [ $rc -eq 3 ]; then skip "$(cat "$work/start.log")"; fi
if [ $rc -ne 0 ]; then cat "$work/start.log" >&2; skip "Slurm did not start on this machine (its log is above)"; fi
cat "$work/start.log"
export SLURM_CONF=$cluster/slurm.conf

# Waits (bounded) until the jobs have left the queue; fails if one did not complete.
wait_jobs() {
  local limit=$1 state j
  shift
  for _ in $(seq $((limit * 2))); do
    [ -z "$(squeue -h -j "$(IFS=,; echo "$*")" 2>/dev/null)" ] && break
    sleep 0.5
  done
  for j in "$@"; do
    state=$(scontrol -o show job "$j" | grep -o 'JobState=[A-Z_]*' | sort -u | tr '\n' ' ')
    [ "$state" = "JobState=COMPLETED " ] || { tail -n 30 "$out"/slurm/*.out >&2 || true; fail "job $j: $state"; }
  done
}

cat >"$work/space.json" <<'JSON'
{
  "base": {"model": {"kind": "mlp", "mlp_width": 32}, "dataset": {"synthetic_train_per_class": 40},
           "batch_size": 16, "threads": 1},
  "dimensions": {
    "optimizer.lr": {"log_range": [0.01, 8]},
    "seed": {"range": [0, 3]},
    "max_batches_per_epoch": {"range": [2, 6]}
  }}
JSON

# ---- one machine against a 3-shard array and its merge ----
start=$(date +%s%N)
rc=0
"$bin" sweep --space "$work/space.json" --runs 9 --seed 1 -j 2 --shrink-bursts 12 --max-shrinks 2 --no-progress \
  --out "$work/one" >"$work/one.log" 2>&1 || rc=$?
[ $rc -eq 1 ] || { tail -n 30 "$work/one.log"; fail "the one-machine sweep exited $rc, expected 1 (failures found)"; }
one_ms=$((($(date +%s%N) - start) / 1000000))

out=$work/sharded
start=$(date +%s%N)
"$slurm/spikehunt-slurm" submit "$work/space.json" --runs 9 --shards 3 --seed 1 --cpus 1 --merge-cpus 2 \
  --shrink-bursts 12 --max-shrinks 2 --out "$out" --spikehunt "$bin" | tee "$work/submit.log"
# shellcheck disable=SC1091
source "$out/slurm/submission"
wait_jobs 300 "$ARRAY_JOB" "$MERGE_JOB"
sharded_ms=$((($(date +%s%N) - start) / 1000000))
for i in 0 1 2; do
  grep -q "shard $i/3 from the Slurm array" "$out/slurm/shard-$i-$ARRAY_JOB.out" || fail "task $i took its shard from the array"
  [ -f "$out/shard-$i-of-3/sweep.db" ] || fail "no database of shard $i"
done
grep -q "joined 9 run(s)" "$out"/slurm/merge-*.out || fail "the merge joined the 9 runs"
grep -q "replay: reproduced" "$out"/slurm/merge-*.out || fail "the merge replayed its repros"
"$bin" compare "$work/one" "$out" | tee "$work/compare.log" || fail "the merged result differs from one machine's"
grep -q "equal: the same 9 samples" "$work/compare.log" || fail "compare said equal"
[ -f "$out/report.html" ] || fail "the merge wrote the report"
echo "one machine (-j 2): $one_ms ms; 3-shard array (1 CPU each) + merge (2 CPUs), submission to merged: $sharded_ms ms"

# ---- a PyTorch scenario: the user's script is the program, two shards merged ----
# tests/python/tiny.py is executable (#!/usr/bin/python3) and calls spikehunt.main(): the array's
# tasks and the merge run it as they run the binary, with the build tree's package on PYTHONPATH.
if [ -d "$(dirname "$bin")/python/spikehunt" ]; then
  export PYTHONPATH=$(dirname "$bin")/python${PYTHONPATH:+:$PYTHONPATH}
  tiny=$src/tests/python/tiny.py
  rc=0
  (cd "$src" && "$tiny" sweep --space tests/python/tiny_space.json --runs 6 --seed 3 -j 2 --shrink-bursts 8 \
    --max-shrinks 1 --no-progress --out "$work/py-one") >"$work/py-one.log" 2>&1 || rc=$?
  [ $rc -le 1 ] || { tail -n 30 "$work/py-one.log"; fail "the one-machine Python sweep exited $rc"; }
  out=$work/py-sharded
  (cd "$src" && "$slurm/spikehunt-slurm" submit tests/python/tiny_space.json --runs 6 --shards 2 --seed 3 --cpus 1 \
    --merge-cpus 2 --shrink-bursts 8 --max-shrinks 1 --out "$out" --spikehunt "$tiny") | tee "$work/py-submit.log"
  # shellcheck disable=SC1091
  source "$out/slurm/submission"
  wait_jobs 300 "$ARRAY_JOB" "$MERGE_JOB"
  grep -q "joined 6 run(s)" "$out"/slurm/merge-*.out || { cat "$out"/slurm/*.out; fail "the Python merge joined the 6 runs"; }
  "$tiny" compare "$work/py-one" "$out" | tee "$work/py-compare.log" || fail "the merged Python sweep differs from one machine's"
  grep -q "equal: the same 6 samples" "$work/py-compare.log" || fail "compare said equal (Python)"
  echo "a Python scenario: 2-shard array + merge equal to one machine"
else
  echo "SKIPPED (part): no Python package in $(dirname "$bin")/python (SPIKEHUNT_PYTHON_PACKAGE=OFF)"
fi

# The search runs in a sweep folder (compare reads a folder against itself read-only, while its shard runs).
# The runs committed in a sweep folder ("" while it cannot be read yet: a database being created, or one
# read twice across a commit by compare, which then differs from itself). Never fails the script itself.
runs_in() { { "$bin" compare "$1" "$1" 2>/dev/null || true; } | sed -n "2s/.*: \([0-9]*\) runs,.*/\1/p"; }

# ---- one task killed mid-way and resubmitted: no run lost, none repeated ----
# Bursts of about a second (the default CNN), so a task is still running when
# its first run is seen committed: a worker runs a tiny-MLP burst in ~50 ms.
# Tens of thousands of distinct configs, so no two of a task's samples are
# the same config (a sweep trains a config once: the second would be no burst).
cat >"$work/slow.json" <<'JSON'
{
  "base": {"dataset": {"synthetic_train_per_class": 100}, "batch_size": 32, "threads": 1},
  "dimensions": {"optimizer.lr": {"log_range": [0.001, 0.05]}, "optimizer.momentum": {"range": [0, 0.99], "step": 0.01},
                 "seed": {"range": [0, 3]}, "max_batches_per_epoch": {"range": [10, 15]}}}
JSON
out=$work/killed
"$slurm/spikehunt-slurm" submit "$work/slow.json" --runs 18 --shards 3 --seed 2 --cpus 1 --max-shrinks 0 \
  --out "$out" --spikehunt "$bin" >"$work/submit2.log"
# shellcheck disable=SC1091
source "$out/slurm/submission"
db=$out/shard-1-of-3/sweep.db
before=0
for _ in $(seq 1200); do  # up to 120 s for the task to commit its first run
  if [ -f "$db" ]; then
    before=$(runs_in "$out/shard-1-of-3")
    [ "${before:-0}" -ge 1 ] && break
  fi
  sleep 0.1
done
scancel "${ARRAY_JOB}_1"
for _ in $(seq 100); do
  [ -z "$(squeue -h -j "${ARRAY_JOB}_1" 2>/dev/null)" ] && break
  sleep 0.2
done
committed=$(runs_in "$out/shard-1-of-3")
[ "$committed" -ge 1 ] || fail "task 1 was cancelled before it committed a run"
[ "$committed" -lt 6 ] || fail "task 1 finished its 6 runs before it could be cancelled (committed $committed)"
echo "task ${ARRAY_JOB}_1 cancelled after committing $committed of its 6 runs"
"$slurm/spikehunt-slurm" resubmit "$out" 1 | tee "$work/resubmit.log"
# shellcheck disable=SC1091
source "$out/slurm/submission"
resubmitted=$(sed -n 's/^shard 1\/3: job \([0-9]*\)$/\1/p' "$work/resubmit.log")
wait_jobs 300 "$resubmitted" "$MERGE_JOB"
log=$(ls "$out"/slurm/shard-1-resubmitted-*.out)
grep -q "resuming: $committed of 6 runs already in the database" "$log" || { cat "$log"; fail "the task resumed from its database"; }
ran=$(sed -n 's/.*bursts this invocation: \([0-9]*\);.*/\1/p' "$log")
[ "$ran" -eq $((6 - committed)) ] || fail "the resubmitted task ran $ran bursts, expected $((6 - committed))"
grep -q "joined 18 run(s)" "$out"/slurm/merge-*.out || fail "the merge after the resubmission joined all 18 runs"
merged=$(runs_in "$out")
[ "$merged" -eq 18 ] || fail "the merged sweep has $merged runs, not 18"
echo "kill and resubmit: runs lost 0 (18 of 18 merged), repeated 0 ($committed before the kill + $ran after = 6)"
echo "PASS"
