#!/usr/bin/env bash
# TrainCheck (PyPI traincheck 0.2.0, OSDI '25) and its dependencies into .traincheck/, beside the
# project's .venv (whose torch it uses): pip --target, without dependencies, so that it does not
# install a second torch. Used by bench/traincheck/run.py only; no test needs it.
set -euo pipefail
cd "$(dirname "$0")/../.."
.venv/bin/pip install -q --no-deps --target .traincheck \
  traincheck==0.2.0 numba==0.68.1 llvmlite==0.50.0 polars==2.1.0 polars-runtime-32==2.1.0 pandas==3.1.1 \
  python-dateutil==4.0.0 tzdata==2026.6 orjson==3.13.0 watchdog==7.1.1 astor==0.8.1 six==1.17.0
echo "TrainCheck in $(pwd)/.traincheck"
