#!/usr/bin/env bash
# gpu_check.sh — spikehunt's GPU check, prepared on the CPU machine and run as
# one command on a lent GPU machine, which can fetch nothing, receives 64 MiB
# of the working tree, runs one command for at most 10 minutes and has about
# 15 minutes of device time in all. That machine holds the same torch as
# requirements.txt pins (2.11.0+cu130), so the binaries built here against the
# pinned torch run there on its LibTorch.
#
#   scripts/gpu_check.sh pack            here, after scripts/build.sh: gpu/ holds the stripped
#                                        spikehunt and gpu_steps, the Debian libraries they load
#                                        beyond LibTorch's, and the fortunes text (~15 MiB)
#   scripts/gpu_check.sh dry-run [OUT]   here: every step as it would run there, without a GPU
#                                        (gpu_steps says SKIPPED; nothing else is run)
#   scripts/gpu_check.sh run OUT         there (device tool: carry ["gpu"], timeout_s 600; the
#                                        steps are bounded at 120 + 240 + 3 x 60 s):
#
# What run measures, each figure into OUT (gpu_check.txt is the summary):
#   1. gpu_steps: the CNN and GPT steps plain against monitored on cuda:0, the
#      ratio, and the host-device syncs each makes a step (the monitor promises
#      one) -> gpu_steps.json
#   2. a 16-run sweep of configs/gpu_space.json with 2 workers sharing the GPU,
#      shrinks and replays included -> sweep.log
#   3. the default run recorded on the GPU (deterministic algorithms on, as
#      device cuda sets them), replayed from step 0 and from its checkpoint:
#      bit for bit, or the first mismatch -> run.log, replay.log
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
what=${1:-}
out=${2:-}
bundle=$root/gpu

case "$what" in
  pack)
    set -e
    [ -x "$root/build/spikehunt" ] && [ -x "$root/build/bench/gpu_steps" ] ||
      { echo "error: build/spikehunt or build/bench/gpu_steps is missing: run scripts/build.sh first" >&2; exit 2; }
    rm -rf "$bundle"
    mkdir -p "$bundle/bin" "$bundle/lib"
    strip -o "$bundle/bin/spikehunt" "$root/build/spikehunt"
    strip -o "$bundle/bin/gpu_steps" "$root/build/bench/gpu_steps"
    # The shared libraries they load from Debian, not from the torch wheel (which the GPU machine has).
    for lib in $(ldd "$root/build/spikehunt" "$root/build/bench/gpu_steps" | awk '/=> \// {print $3}' | sort -u); do
      case "$lib" in
        # the wheel's, glibc's and the compiler runtime's (the GPU machine's own are newer)
        */site-packages/*|*/libc.so*|*/libm.so*|*/ld-linux*|*/libpthread*|*/libdl*|*/librt*|*/libutil*) ;;
        */libstdc++*|*/libgcc_s*) ;;
        *) cp -L "$lib" "$bundle/lib/" ;;
      esac
    done
    # The GPT's text: the fortunes folder's regular files, as the text dataset reads it.
    mkdir -p "$bundle/text"
    find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' -exec cp {} "$bundle/text/" \;
    cp "$root/configs/gpt.json" "$root/configs/gpu_space.json" "$bundle/"
    du -sh "$bundle"
    echo "packed $bundle: run it there with: bash scripts/gpu_check.sh run \"\$OUT\" (carry gpu)"
    exit 0
    ;;
  dry-run) dry=1; out=${out:-$(mktemp -d /tmp/spikehunt-gpu-dry.XXXXXX)} ;;
  run) dry=0; [ -n "$out" ] || { echo "usage: scripts/gpu_check.sh run OUT" >&2; exit 2; } ;;
  *) echo "usage: scripts/gpu_check.sh pack | dry-run [OUT] | run OUT" >&2; exit 2 ;;
esac

mkdir -p "$out"
summary=$out/gpu_check.txt
: > "$summary"
say() { echo "$*" | tee -a "$summary"; }
step() {  # step NAME LOG SECONDS command...: runs it (or, dry, shows it), its exit code in the summary
  local name=$1 log=$2 limit=$3; shift 3
  if [ "$dry" = 1 ] && [ "$name" != gpu_steps ]; then
    say "would run ($name): $*"
    return 0
  fi
  local t0 rc=0
  t0=$(date +%s)
  timeout "$limit" "$@" > "$out/$log" 2>&1 || rc=$?
  say "$name: exit $rc in $(( $(date +%s) - t0 )) s -> $log"
  return $rc
}

if [ "$dry" = 1 ]; then
  bin=$root/build; steps=$root/build/bench/gpu_steps; text=/usr/share/games/fortunes; lib=""
else
  [ -d "$bundle/bin" ] || { echo "error: $bundle: no bundle (scripts/gpu_check.sh pack makes it)" >&2; exit 2; }
  bin=$bundle/bin; steps=$bundle/bin/gpu_steps; text=$bundle/text; lib=$bundle/lib
  torch_lib=$(python3 -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))') ||
    { echo "error: python3 has no torch here" >&2; exit 2; }
  export LD_LIBRARY_PATH=$torch_lib:$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  say "machine: $(nvidia-smi -L 2> /dev/null | head -n 1); torch $(python3 -c 'import torch; print(torch.__version__)')"
fi
spikehunt=$bin/spikehunt
[ "$dry" = 1 ] && say "dry run on $(hostname): the commands the GPU machine runs, gpu_steps run for real"

# 1. plain against monitored, and the syncs of each
step gpu_steps gpu_steps.json 120 "$steps" 50 "$root/configs/gpt.json" "$text"
rc=$?
if [ -s "$out/gpu_steps.json" ]; then
  grep -E '"model"|_ms"|syncs_per_step|monitored/plain|SKIPPED' "$out/gpu_steps.json" | tee -a "$summary"
fi
[ "$dry" = 1 ] && [ $rc -eq 77 ] && say "gpu_steps: skipped here (no GPU), as expected in a dry run"

# 2. a 16-run sweep with two workers sharing the GPU
step sweep sweep.log 240 "$spikehunt" sweep --space "$root/configs/gpu_space.json" --runs 16 -j 2 \
  --shrink-bursts 16 --max-shrinks 2 --no-progress --out "$out/sweep"
[ -f "$out/sweep.log" ] && grep -E "runs, .* failed|^[0-9]+\. |replay: " "$out/sweep.log" | tee -a "$summary"

# 3. a repro recorded on the GPU, replayed bit for bit
step run run.log 60 "$spikehunt" run --set device=cuda --out "$out/run"
repro=$(ls "$out"/run/*/repro.json 2> /dev/null | head -n 1)
[ "$dry" = 1 ] && repro=$out/run/ID/repro.json
step replay replay.log 60 "$spikehunt" replay "$repro"
step replay_from_checkpoint replay_checkpoint.log 60 "$spikehunt" replay "$repro" --from-checkpoint
for f in run.log replay.log replay_checkpoint.log; do
  [ -f "$out/$f" ] && grep -E "^verdict:|reproduced|mismatch|LibTorch" "$out/$f" | tee -a "$summary"
done
rm -rf "$out/sweep/runs" 2> /dev/null  # keep what comes back small: summaries, logs, repros
say "figures in $out"
