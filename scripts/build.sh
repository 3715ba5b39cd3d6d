#!/usr/bin/env bash
# build.sh — configures and builds spikehunt (Release, Ninja) into build/,
# against the LibTorch of the torch in the project's virtual environment
# (scripts/setup.sh makes it: .venv, or $SPIKEHUNT_VENV).
#   scripts/build.sh [--target T]... [CMake configure arguments...]
# --target builds only T (repeatable: `--target spikehunt --target
# spikehunt_python`, the binary and the Python package, is what the README's
# first command builds); without it, everything configured. Extra arguments go
# to the CMake configure step, e.g. -DSPIKEHUNT_BENCH=OFF.
# The build is a unity build (CMAKE_UNITY_BUILD, batches of 16 files): each
# batch pays LibTorch's precompiled header once instead of each file (~10 s of
# CPU a file); -DCMAKE_UNITY_BUILD=OFF gives one object a file, which an edit
# of one file recompiles faster (docs/decisions.md).
set -euo pipefail
cd "$(dirname "$0")/.."
targets=()  # none: all
while [ $# -gt 0 ] && [ "$1" = --target ]; do
  [ $# -ge 2 ] || { echo "error: scripts/build.sh: --target needs a target name" >&2; exit 2; }
  targets+=("$2")
  shift 2
done
venv=${SPIKEHUNT_VENV:-$PWD/.venv}
if [ ! -x "$venv/bin/python" ]; then
  echo "error: $venv/bin/python: no virtual environment there" >&2
  echo "hint: run scripts/setup.sh first (it makes it), or set SPIKEHUNT_VENV to one holding torch 2.x" >&2
  exit 2
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DSPIKEHUNT_PYTHON="$venv/bin/python" \
  -DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=16 "$@"
build=(cmake --build build)
for t in "${targets[@]}"; do build+=(--target "$t"); done
"${build[@]}"
