#!/usr/bin/env bash
# compare.sh [BURSTS] [SEEDS] [BUILD] — for the same number of training
# bursts, how many distinct numerical buckets and distinct fault signatures
# each search reaches:
#   feedback   fuzz_training with its numerical extra counters
#   mutation   the same target with the counters left empty (random mutation only)
#   rapidcheck the RapidCheck generator over the same space (training_random)
# One row per arm and seed, then the means and the ratios of feedback to the others.
set -euo pipefail
bursts=${1:-2000}
seeds=${2:-3}
build=$(realpath "${3:-build}")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

field() { sed -n "s/.*\"$1\":\([0-9]*\).*/\1/p" "$2"; }

run_fuzzer() {  # feedback(0|1) seed -> stats file
  local out=$work/stats-$1-$2.json corpus=$work/corpus-$1-$2
  mkdir -p "$corpus"
  (cd "$work" && SPIKEHUNT_FUZZ_FEEDBACK=$1 SPIKEHUNT_FUZZ_MAX_BURSTS=$bursts SPIKEHUNT_FUZZ_STATS=$out \
     SPIKEHUNT_FUZZ_REPROS=$work/repros "$build/fuzz/fuzz_training" "$corpus" -seed="$2" -max_len=64 -len_control=0 \
     -runs=$((bursts * 20)) > "$work/log-$1-$2.txt" 2>&1) || true
  echo "$out"
}

printf "%-11s %5s %8s %8s %7s\n" arm seed bursts buckets faults
declare -A sum_b sum_f
for arm in feedback mutation rapidcheck; do sum_b[$arm]=0; sum_f[$arm]=0; done
for seed in $(seq 1 "$seeds"); do
  for arm in feedback mutation rapidcheck; do
    case $arm in
      feedback) stats=$(run_fuzzer 1 "$seed") ;;
      mutation) stats=$(run_fuzzer 0 "$seed") ;;
      rapidcheck) stats=$work/stats-rc-$seed.json; "$build/fuzz/training_random" "$bursts" "$seed" > "$stats" ;;
    esac
    b=$(field features "$stats"); f=$(field faults "$stats"); n=$(field bursts "$stats")
    printf "%-11s %5d %8d %8d %7d\n" "$arm" "$seed" "$n" "$b" "$f"
    sum_b[$arm]=$((sum_b[$arm] + b)); sum_f[$arm]=$((sum_f[$arm] + f))
  done
done
echo
for arm in feedback mutation rapidcheck; do
  awk -v a="$arm" -v b="${sum_b[$arm]}" -v f="${sum_f[$arm]}" -v s="$seeds" \
    'BEGIN { printf "mean %-10s buckets %6.1f  faults %5.2f\n", a, b / s, f / s }'
done
for other in mutation rapidcheck; do
  awk -v o="$other" -v b1="${sum_b[feedback]}" -v b2="${sum_b[$other]}" -v f1="${sum_f[feedback]}" -v f2="${sum_f[$other]}" \
    'BEGIN { printf "feedback / %-10s buckets %.2f  faults %s\n", o, b1 / b2, (f2 > 0 ? sprintf("%.2f", f1 / f2) : "n/a") }'
done
