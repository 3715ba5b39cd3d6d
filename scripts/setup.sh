#!/usr/bin/env bash
# setup.sh — installs every Debian package spikehunt needs, then the project's
# virtual environment with the pinned torch (requirements.txt) whose LibTorch
# spikehunt builds against. Idempotent: a package already installed is
# skipped, apt is not touched when nothing is missing, and pip finds the pins
# satisfied (its cache serves a fresh clone).
# Usage: scripts/setup.sh            (as root, or with sudo available): what the binary and the
#                                    Python package need to build and run
#        scripts/setup.sh --tests    also what the tests, benchmarks and fuzz targets need
#                                    (GoogleTest, Google Benchmark, clang-14 and libFuzzer, chromium)
#        scripts/setup.sh --slurm    also Slurm and munge, for the test of sharded sweeps
#                                    (tests/slurm_cluster.sh; scripts/quickstart.sh test passes both)
#        scripts/setup.sh --peer     kept for scripts that pass it (PyTorch is always installed)
# The environment: .venv in the project, made with python3 (3.9 or newer), or
# the one SPIKEHUNT_VENV names. A named environment that already holds torch
# 2.x keeps its torch (spikehunt is then built against that one); only the
# other requirements are added to it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

# What the binary and the Python package build from and run on (the README's first command).
packages=(
  build-essential cmake ninja-build pkg-config git
  libopenblas0-openmp
  librapidcheck-dev
  dataset-fashion-mnist fortunes
  libxxhash-dev nlohmann-json3-dev libcli11-dev libsqlite3-dev zlib1g-dev
  libjs-dygraphs
  python3-dev python3-venv
)
# ... and what the tests, benchmarks and fuzz targets need besides (--tests).
test_packages=(
  libgtest-dev libgmock-dev libbenchmark-dev
  clang-14 libfuzzer-14-dev libclang-rt-14-dev
  chromium libxml2-utils
)

for option in "$@"; do
  case "$option" in
    --peer) ;;
    --tests) packages+=("${test_packages[@]}") ;;
    # The daemons are not started as services: the test starts its own cluster.
    --slurm) packages+=(slurmctld slurmd slurm-client munge) ;;
    *) echo "setup: unknown option $option (known: --tests, --slurm, --peer)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages already installed"
else
  sudo_cmd=()
  if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# ---- the virtual environment and its torch ----
venv=${SPIKEHUNT_VENV:-$root/.venv}
if [ ! -x "$venv/bin/python" ]; then
  echo "setup: creating the virtual environment $venv"
  python3 -m venv "$venv"
fi
requirements=("-r" "$root/requirements.txt")
if [ -n "${SPIKEHUNT_VENV:-}" ] &&
   user_torch=$("$venv/bin/python" -c 'import torch; print(torch.__version__)' 2>/dev/null) &&
   [ "${user_torch%%.*}" -ge 2 ]; then
  echo "setup: $venv holds torch $user_torch: spikehunt builds against it (the tested pin is $(grep '^torch==' "$root/requirements.txt"))"
  requirements=($(grep -v '^#' "$root/requirements.txt" | grep -v '^torch=='))
fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check "${requirements[@]}"
echo "setup: $venv: $("$venv/bin/python" -c 'import torch; print("torch", torch.__version__, "(CUDA", torch.version.cuda, "built)")')"
