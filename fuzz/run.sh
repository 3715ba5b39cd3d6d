#!/usr/bin/env bash
# run.sh TARGET CORPUS RUNS [DICT [LIBFUZZER FLAGS...]] — runs one libFuzzer target for RUNS inputs
# over its committed seed corpus (read only: new inputs go to a temporary
# folder) and fails on any crash, leak, timeout or sanitizer report (libFuzzer
# then exits non-zero and writes the input to $SPIKEHUNT_FUZZ_ARTIFACTS,
# default ./fuzz-artifacts/).
set -euo pipefail
bin=$(realpath "$1") corpus=$(realpath "$2") runs=$3 dict=${4:+$(realpath "$4")}
shift 4 2>/dev/null || shift $#
artifacts=$(realpath -m "${SPIKEHUNT_FUZZ_ARTIFACTS:-$PWD/fuzz-artifacts}")
mkdir -p "$artifacts"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/new"
args=(-runs="$runs" -max_total_time=600 -timeout=60 -rss_limit_mb=4096 -max_len=65536 -print_final_stats=1
      -artifact_prefix="$artifacts/$(basename "$bin")-")
if [ -n "$dict" ]; then args+=(-dict="$dict"); fi
export SPIKEHUNT_FUZZ_REPROS="$work/repros"
cd "$work"
"$bin" "${args[@]}" "$@" "$work/new" "$corpus"
