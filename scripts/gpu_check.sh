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
#                                        beyond LibTorch's, the fortunes text, and what the Python
#                                        extension is linked from there (spikehunt's static
#                                        libraries, RapidCheck's, nlohmann/json's headers): ~25 MiB
#   scripts/gpu_check.sh dry-run [OUT]   here: every step as it would run there, without a GPU
#                                        (gpu_steps says SKIPPED; nothing else is run)
#   scripts/gpu_check.sh run OUT [python] there (device tool: carry ["gpu"], timeout_s 600; the
#                                        steps are bounded at 120 + 150 + 150 + 3 x 45 s; the
#                                        extension compiles beside the first):
#
#                                        "python": steps 1 and 2 alone (a rerun after a fix)
# What run measures, each figure into OUT (gpu_check.txt is the summary):
#   1. gpu_steps: the CNN and GPT steps plain against monitored on cuda:0, the
#      ratio, and the host-device syncs each makes a step (the monitor promises
#      one) -> gpu_steps.json
#   2. the Python extension built there, for that machine's Python (its torch is
#      the pinned one), from the static libraries built here; then
#      bench/python/gpu_watch.py: spikehunt.Watch and the Lightning callback on
#      cuda:0, their syncs a step against the plain loop's, ms a step, a NaN
#      named, two runs bit-identical -> gpu_watch.log
#   3. a 16-run sweep of configs/gpu_space.json with 2 workers sharing the GPU,
#      shrinks and replays included -> sweep.log
#   4. the default run recorded on the GPU (deterministic algorithms on, as
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
    # The Python extension is compiled there (its Python is not this one) and linked from
    # the same static libraries as here; the one header-only library it includes beside them.
    mkdir -p "$bundle/static" "$bundle/include"
    for a in "$root"/build/libspikehunt_*.a /usr/lib/x86_64-linux-gnu/librapidcheck.a; do
      strip --strip-debug -o "$bundle/static/$(basename "$a")" "$a"
    done
    cp -r /usr/include/nlohmann "$bundle/include/"
    # The GPT's text: the fortunes folder's regular files, as the text dataset reads it.
    mkdir -p "$bundle/text"
    find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.dat' -exec cp {} "$bundle/text/" \;
    cp "$root/configs/gpt.json" "$root/configs/gpu_space.json" "$bundle/"
    du -sh "$bundle"
    echo "packed $bundle: run it there with: bash scripts/gpu_check.sh run \"\$OUT\" (carry gpu)"
    exit 0
    ;;
  dry-run) dry=1; out=${out:-$(mktemp -d /tmp/spikehunt-gpu-dry.XXXXXX)} ;;
  run) dry=0; [ -n "$out" ] || { echo "usage: scripts/gpu_check.sh run OUT [python]" >&2; exit 2; } ;;
  *) echo "usage: scripts/gpu_check.sh pack | dry-run [OUT] | run OUT" >&2; exit 2 ;;
esac

mkdir -p "$out"
summary=$out/gpu_check.txt
: > "$summary"
say() { echo "$*" | tee -a "$summary"; }
step() {  # step NAME LOG SECONDS command...: runs it (or, dry, shows it), its exit code in the summary
  local name=$1 log=$2 limit=$3; shift 3
  if [ "$dry" = 1 ] && [ "$name" != gpu_steps ] && [ "$name" != gpu_watch ]; then
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

# The Python extension (step 2) compiles on the CPUs while gpu_steps runs on the GPU.
build_extension() {  # build_extension DIR: DIR/spikehunt, the package with its _core built for python3
  local dir=$1 py=python3 static=$bundle/static include=(-isystem "$bundle/include") rapidcheck=$bundle/static/librapidcheck.a
  [ "$dry" = 1 ] && { py=$root/.venv/bin/python; static=$root/build; include=(); rapidcheck=/usr/lib/x86_64-linux-gnu/librapidcheck.a; }
  local pyinc torch_dir suffix
  pyinc=$($py -c 'import sysconfig; print(sysconfig.get_paths()["include"])') &&
    torch_dir=$($py -c 'import os, torch; print(os.path.dirname(torch.__file__))') &&
    suffix=$($py -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))') || return 2
  rm -rf "$dir" && mkdir -p "$dir" && cp -r "$root/python/spikehunt" "$dir/" || return 2
  local flags=(-DTORCH_EXTENSION_NAME=_core -DUSE_C10D_GLOO -DUSE_C10D_NCCL -DUSE_DISTRIBUTED -DUSE_RPC
               -DUSE_TENSORPIPE -I"$root" -I"$root/include" "${include[@]}" -isystem "$pyinc"
               -isystem "$torch_dir/include" -isystem "$torch_dir/include/torch/csrc/api/include"
               -O2 -DNDEBUG -fPIC -fvisibility=hidden -std=c++17)
  local cxx
  cxx=$(command -v c++ || command -v g++) || { echo "error: no C++ compiler (c++, g++) on the PATH"; return 2; }
  [ -f "$pyinc/Python.h" ] || { echo "error: $pyinc/Python.h: no Python headers for $py"; return 2; }
  "$cxx" --version | head -n 1
  "$cxx" "${flags[@]}" -c "$root/python/binding.cpp" -o "$dir/binding.o" &
  "$cxx" "${flags[@]}" -c "$root/python/watch.cpp" -o "$dir/watch.o" || { wait; return 1; }
  wait $! || return 1
  local l=$torch_dir/lib sys=$lib v0=.0 v1=.1  # zlib and SQLite: the bundle's, or Debian's here
  [ "$dry" = 1 ] && { sys=/usr/lib/x86_64-linux-gnu; v0=""; v1=""; }
  "$cxx" -shared -o "$dir/spikehunt/_core$suffix" "$dir/binding.o" "$dir/watch.o" -Wl,--exclude-libs,ALL \
    "$static/libspikehunt_cli.a" "$l/libtorch_python.so" "$static/libspikehunt_generators.a" \
    "$static/libspikehunt_harness.a" "$static/libspikehunt_scenarios.a" "$static/libspikehunt_base.a" \
    "$l/libtorch.so" "$l/libtorch_cpu.so" "$l/libc10.so" "$l/libgomp.so.1" -ldl "$sys/libz.so$v1" "$sys/libsqlite3.so$v0" \
    "$rapidcheck" -Wl,-rpath,"$l" || return 1
  "$py" -c "import sys; sys.path.insert(0, '$dir'); import spikehunt; print('imports', spikehunt.__file__)"
}
pydir=${TMPDIR:-/tmp}/spikehunt-gpu-python
t_ext=$(date +%s)
build_extension "$pydir" > "$out/extension.log" 2>&1 &
ext_pid=$!

# 1. plain against monitored, and the syncs of each
step gpu_steps gpu_steps.json 120 "$steps" 50 "$root/configs/gpt.json" "$text"
rc=$?
if [ -s "$out/gpu_steps.json" ]; then
  grep -E '"model"|_ms"|syncs_per_step|monitored/plain|SKIPPED' "$out/gpu_steps.json" | tee -a "$summary"
fi
[ "$dry" = 1 ] && [ $rc -eq 77 ] && say "gpu_steps: skipped here (no GPU), as expected in a dry run"

# 2. the Python extension for the Python there, and the Watch and the Lightning callback on the GPU
rc=0
wait $ext_pid || rc=$?
say "extension: exit $rc in $(( $(date +%s) - t_ext )) s (beside gpu_steps) -> extension.log"
if [ $rc -eq 0 ]; then
  python=python3; [ "$dry" = 1 ] && python=$root/.venv/bin/python
  if [ "$dry" = 1 ]; then  # no GPU here: the same steps on the CPU, briefly
    step gpu_watch gpu_watch.log 150 env PYTHONPATH="$pydir" PYTHONUNBUFFERED=1 "$python" \
      "$root/bench/python/gpu_watch.py" --device cpu --steps 3 --rounds 1
  else
    step gpu_watch gpu_watch.log 150 env PYTHONPATH="$pydir" PYTHONUNBUFFERED=1 "$python" \
      "$root/bench/python/gpu_watch.py"
  fi
  [ -f "$out/gpu_watch.log" ] && grep -E '^\{"|^FAILED|"failures"' "$out/gpu_watch.log" | tee -a "$summary"
fi

[ "${3:-}" = python ] && { say "figures in $out (steps 1 and 2 alone)"; exit 0; }

# 3. a 16-run sweep with two workers sharing the GPU
step sweep sweep.log 150 "$spikehunt" sweep --space "$root/configs/gpu_space.json" --runs 16 -j 2 \
  --shrink-bursts 16 --max-shrinks 2 --no-progress --out "$out/sweep"
[ -f "$out/sweep.log" ] && grep -E "runs, .* failed|^[0-9]+\. |replay: " "$out/sweep.log" | tee -a "$summary"

# 4. a repro recorded on the GPU, replayed bit for bit
step run run.log 45 "$spikehunt" run --set device=cuda --out "$out/run"
repro=$(ls "$out"/run/*/repro.json 2> /dev/null | head -n 1)
[ "$dry" = 1 ] && repro=$out/run/ID/repro.json
step replay replay.log 45 "$spikehunt" replay "$repro"
step replay_from_checkpoint replay_checkpoint.log 45 "$spikehunt" replay "$repro" --from-checkpoint
for f in run.log replay.log replay_checkpoint.log; do
  [ -f "$out/$f" ] && grep -E "^verdict:|reproduced|mismatch|LibTorch" "$out/$f" | tee -a "$summary"
done
rm -rf "$out/sweep/runs" 2> /dev/null  # keep what comes back small: summaries, logs, repros
say "figures in $out"
