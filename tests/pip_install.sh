#!/usr/bin/env bash
# `pip install .` as a PyTorch user does it, on the torch they have: a fresh
# virtual environment, TORCH (a pip requirement: the newest torch PyPI serves,
# tests/CMakeLists.txt) from PyPI, then spikehunt built from this source tree
# against it with pip's default build isolation, which brings no torch of its
# own (pyproject.toml). Then, from another folder with no build tree on any
# path, tests/installed_checks.sh, and the Python tests named after TORCH
# against the installed package.
# Usage: tests/pip_install.sh SOURCE_DIR PYTHON TORCH [TEST_FILE...]
#   PYTHON: whose base interpreter makes the venv; TORCH: e.g. torch==2.15.0
set -euo pipefail
src=$(cd "$1" && pwd)
python=$2
torch=$3
shift 3
work=$(mktemp -d /tmp/spikehunt-pip.XXXXXX)
trap 'rm -rf "$work"' EXIT
# shellcheck source=tests/expect.sh
. "$src/tests/expect.sh"

base=$("$python" -c 'import sys; print(sys._base_executable)')
"$base" -m venv "$work/venv"
venv=$work/venv/bin
unset PYTHONPATH
start=$(date +%s)
"$venv/python" -m pip install -q --disable-pip-version-check "$torch" \
  $(grep -E '^(numpy|pytest|safetensors)==' "$src/requirements.txt" | cut -d' ' -f1) || fail "pip install $torch, numpy, pytest and safetensors"
version=$("$venv/python" -c 'import torch; print(torch.__version__)')
echo "ok: torch $version installed in $(( $(date +%s) - start )) s"
start=$(date +%s)
"$venv/python" -m pip install --disable-pip-version-check -C build-dir="$work/build" "$src" > "$work/pip.log" 2>&1 ||
  { tail -n 60 "$work/pip.log"; fail "pip install $src"; }
echo "ok: pip install . built spikehunt against torch $version and installed it in $(( $(date +%s) - start )) s"
# The package requires the torch it was built against, exactly.
requires=$("$venv/python" -c 'import importlib.metadata as m; print(m.requires("spikehunt"))')
grep -q "torch==${version%%+*}" <<<"$requires" || fail "spikehunt requires $requires, not torch==${version%%+*}"

# shellcheck source=tests/installed_checks.sh
. "$src/tests/installed_checks.sh"
if [ $# -gt 0 ]; then
  cd "$src"  # the tests run from the repository root, on the installed package (no PYTHONPATH)
  SPIKEHUNT_SOURCE=$src PATH="$venv:$PATH" "$venv/python" -m pytest -q -p no:cacheprovider "$@" ||
    fail "the Python tests under torch $version"
fi
echo "pip install on torch $version: passed"
