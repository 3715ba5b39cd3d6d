#!/usr/bin/env bash
# build.sh — configures and builds spikehunt (Release, Ninja) into build/,
# against the LibTorch of the torch in the project's virtual environment
# (scripts/setup.sh makes it: .venv, or $SPIKEHUNT_VENV).
# Extra arguments go to the CMake configure step, e.g. -DSPIKEHUNT_BENCH=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${SPIKEHUNT_VENV:-$PWD/.venv}
if [ ! -x "$venv/bin/python" ]; then
  echo "error: $venv/bin/python: no virtual environment there" >&2
  echo "hint: run scripts/setup.sh first (it makes it), or set SPIKEHUNT_VENV to one holding torch 2.x" >&2
  exit 2
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DSPIKEHUNT_PYTHON="$venv/bin/python" "$@"
cmake --build build
