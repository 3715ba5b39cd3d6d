#!/usr/bin/env bash
# build.sh — configures and builds spikehunt (Release, Ninja) into build/.
# Extra arguments go to the CMake configure step, e.g. -DSPIKEHUNT_BENCH=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build build
