#!/usr/bin/env bash
# quickstart.sh — the README's two commands on a fresh Debian 12 machine.
#   scripts/quickstart.sh run [spikehunt sweep flags...] install, build the binary and the Python
#                                                        package, run the default sweep
#   scripts/quickstart.sh test                           install, build (fuzz targets too), run the tests
# Installs packages with scripts/setup.sh (apt, as root or through sudo),
# builds Release into build/, then runs. `run` exits 0 when the sweep ran to
# its summary (it is meant to find failures: spikehunt's own exit code 1 means
# "a finding", see README), 2 on bad input.
set -euo pipefail
cd "$(dirname "$0")/.."

what=${1:-}
case "$what" in
  run|test) shift ;;
  *) echo "usage: scripts/quickstart.sh run|test" >&2; exit 2 ;;
esac

if [ "$what" = test ]; then scripts/setup.sh --tests --slurm; else scripts/setup.sh; fi

if [ "$what" = test ]; then
  # The tests include the benchmarks' build and every fuzz target on its corpus (ON again after a `run`).
  scripts/build.sh -DSPIKEHUNT_TESTS=ON -DSPIKEHUNT_BENCH=ON -DSPIKEHUNT_FUZZ=ON
  exec ctest --test-dir build --output-on-failure -j "$(nproc)"
fi
# What it runs; without the tests and benchmarks, whose GoogleTest and Google Benchmark `setup.sh --tests`
# installs (`test` configures them again and builds the rest).
scripts/build.sh --target spikehunt --target spikehunt_python -DSPIKEHUNT_TESTS=OFF -DSPIKEHUNT_BENCH=OFF

set +e
build/spikehunt sweep "$@"
rc=$?
set -e
if [ $rc -eq 1 ]; then
  echo "spikehunt sweep exited 1: it found failures (a finding), as the default sweep is meant to."
  exit 0
fi
exit $rc
