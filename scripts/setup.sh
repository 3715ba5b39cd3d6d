#!/usr/bin/env bash
# setup.sh — installs every Debian package spikehunt needs. Idempotent: a package
# already installed is skipped, and apt is not touched when nothing is missing.
# Usage: scripts/setup.sh            (as root, or with sudo available)
#        scripts/setup.sh --peer     kept for scripts that pass it: PyTorch's Python API is
#                                    always installed now (the Python package needs it)
#        scripts/setup.sh --slurm    also Slurm and munge, for the test of sharded sweeps
#                                    (tests/slurm_cluster.sh; scripts/quickstart.sh test passes it)
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  libtorch-dev libopenblas0-openmp
  librapidcheck-dev libgtest-dev libgmock-dev libbenchmark-dev
  clang-14 libfuzzer-14-dev libclang-rt-14-dev
  dataset-fashion-mnist fortunes
  libxxhash-dev nlohmann-json3-dev libcli11-dev libsqlite3-dev zlib1g-dev
  libjs-dygraphs chromium
  libxml2-utils
  python3-torch python3-dev pybind11-dev python3-pytest python3-numpy
)

for option in "$@"; do
  case "$option" in
    --peer) ;;
    # The daemons are not started as services: the test starts its own cluster.
    --slurm) packages+=(slurmctld slurmd slurm-client munge) ;;
    *) echo "setup: unknown option $option (known: --peer, --slurm)" >&2; exit 2 ;;
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
  exit 0
fi

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
