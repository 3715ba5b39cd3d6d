#!/usr/bin/env bash
# slurm_sweep.sh — one sweep on one machine against the same sweep as a K-shard
# Slurm array + merge on a local one-node cluster (scripts/slurm/local-cluster.sh):
# wall time of each, and `spikehunt compare` of the two results.
# Usage: bench/slurm_sweep.sh [RUNS] [SHARDS] [SPACE]   (defaults: 24, 3, builtin; as root)
# Environment: BUILD (default build), JOBS (one machine's -j, default nproc).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-24} shards=${2:-3} space=${3:-builtin}
bin=$(realpath "${BUILD:-build}/spikehunt")
jobs=${JOBS:-$(nproc)}
work=$(mktemp -d /tmp/spikehunt-slurm-bench.XXXXXX)
trap 'scripts/slurm/local-cluster.sh stop "$work/cluster" >/dev/null 2>&1 || true' EXIT
scripts/slurm/local-cluster.sh start "$work/cluster" --owner $$
export SLURM_CONF=$work/cluster/slurm.conf
space_flag=()
[ "$space" = builtin ] || space_flag=(--space "$space")

start=$(date +%s%N)
"$bin" sweep "${space_flag[@]}" --runs "$runs" -j "$jobs" --no-progress --out "$work/one" >"$work/one.log" || [ $? -eq 1 ]
one_ms=$((($(date +%s%N) - start) / 1000000))

start=$(date +%s%N)
scripts/slurm/spikehunt-slurm submit "$space" --runs "$runs" --shards "$shards" --cpus 1 --merge-cpus "$jobs" \
  --out "$work/sharded" --spikehunt "$bin" >/dev/null
# shellcheck disable=SC1091
source "$work/sharded/slurm/submission"
while [ -n "$(squeue -h -j "$ARRAY_JOB,$MERGE_JOB")" ]; do sleep 1; done
sharded_ms=$((($(date +%s%N) - start) / 1000000))
merge_log=$(ls "$work"/sharded/slurm/merge-*.out)

echo "node: $(nproc) CPUs; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "one machine, -j $jobs: $((one_ms / 1000)).$((one_ms % 1000 / 100)) s ($(grep 'bursts this invocation' "$work/one.log"))"
echo "$shards-shard array (1 CPU a task) + merge (-j $jobs), submit to merged: $((sharded_ms / 1000)).$((sharded_ms % 1000 / 100)) s"
for f in "$work"/sharded/slurm/shard-*.out; do grep -h '^shard .*: .* runs, ' "$f" | sed 's/^/  /'; done
echo "  merge: $(grep 'bursts this invocation' "$merge_log")"
"$bin" compare "$work/one" "$work/sharded"
echo "results kept in $work"
