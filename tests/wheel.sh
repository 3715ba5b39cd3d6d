#!/usr/bin/env bash
# The wheel, as docs/python.md tells a user to make and install it: `pip wheel .`
# against the environment's torch (PYTHON's: the pin), then, in a fresh virtual
# environment holding that torch and no compiler on the PATH, `pip install` of
# the wheel alone. Checked: its metadata requires that torch exactly; its
# extension needs nothing beyond torch and the C/C++ runtime (no SQLite, no
# zlib from apt) and carries no path of the build machine (RPATH/RUNPATH, as
# auditwheel would read them); it installs in under a minute; from another
# folder, tests/installed_checks.sh, the Lightning and Hugging Face callbacks;
# and imported under another torch, one clear error naming both versions.
# Usage: tests/wheel.sh SOURCE_DIR PYTHON   (PYTHON: the environment holding the pinned torch)
set -euo pipefail
src=$(cd "$1" && pwd)
python=$2
work=$(mktemp -d /tmp/spikehunt-wheel.XXXXXX)
trap 'rm -rf "$work"' EXIT
# shellcheck source=tests/expect.sh
. "$src/tests/expect.sh"
unset PYTHONPATH

start=$(date +%s)
"$python" -m pip wheel --disable-pip-version-check --no-deps -w "$work/dist" -C build-dir="$work/build" "$src" \
  > "$work/wheel.log" 2>&1 || { tail -n 60 "$work/wheel.log"; fail "pip wheel $src"; }
wheel=$(ls "$work"/dist/spikehunt-*.whl)
echo "ok: pip wheel built $(basename "$wheel") in $(( $(date +%s) - start )) s"
torch_version=$("$python" -c 'import torch; print(torch.__version__)')
release=${torch_version%%+*}

# What the wheel holds and needs.
mkdir "$work/unpacked"
"$python" -m zipfile -e "$wheel" "$work/unpacked"
grep -qx "Requires-Dist: torch==$release" "$work"/unpacked/spikehunt-*.dist-info/METADATA ||
  fail "the wheel's metadata does not require torch==$release: $(grep Requires-Dist "$work"/unpacked/*.dist-info/METADATA)"
echo "ok: the wheel requires torch==$release"
core=$(ls "$work"/unpacked/spikehunt/_core*.so)
dynamic=$(readelf -d "$core")
if grep -E "R(UN)?PATH" <<<"$dynamic"; then fail "the extension carries a search path of the build machine"; fi
needed=$(grep NEEDED <<<"$dynamic" | sed -E 's/.*\[(.*)\]/\1/' | sort | tr '\n' ' ')
for lib in $needed; do
  case "$lib" in
    libc.so.*|libm.so.*|libgcc_s.so.*|libstdc++.so.*|ld-linux-*|libpthread.so.*|libdl.so.*) ;;  # the runtime
    libtorch*.so|libc10*.so|libgomp.so.1|libcudart.so.*) ;;  # torch's own, loaded by `import torch`
    *) fail "the extension needs $lib, which neither torch nor the C/C++ runtime provides (all: $needed)" ;;
  esac
done
echo "ok: the extension needs only torch and the C/C++ runtime: $needed"
[ "$(grep -c "spikehunt/_build.py" "$work"/unpacked/*.dist-info/RECORD)" = 1 ] || fail "the wheel lacks spikehunt/_build.py"

# A fresh environment holding the pinned torch and the frameworks, and no compiler on the PATH.
base=$("$python" -c 'import sys; print(sys._base_executable)')
"$base" -m venv "$work/venv"
venv=$work/venv/bin
"$venv/python" -m pip install -q --disable-pip-version-check "torch==$release" \
  $(grep -E '^(numpy|lightning|transformers|accelerate)==' "$src/requirements.txt" | cut -d' ' -f1) || fail "pip install torch and the frameworks"
start=$(date +%s)
PATH=$venv CC=/nonexistent CXX=/nonexistent "$venv/python" -m pip install -q --disable-pip-version-check "$wheel" ||
  fail "pip install $(basename "$wheel") with no compiler on the PATH"
seconds=$(( $(date +%s) - start ))
[ "$seconds" -lt 60 ] || fail "installing the wheel took $seconds s (at most 60)"
echo "ok: the wheel installed in $seconds s with no compiler on the PATH"

# shellcheck source=tests/installed_checks.sh
. "$src/tests/installed_checks.sh"
# The frameworks' callbacks, from the wheel alone.
expect 0 "verdict: healthy after 4 of 4 steps" -- "$venv/python" -c '
import lightning as L, torch, torch.nn.functional as F, spikehunt.lightning
class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(8, 2)
    def training_step(self, batch, i):
        x, y = batch
        return F.cross_entropy(self.net(x), y)
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)
torch.manual_seed(0)
data = torch.utils.data.TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
monitor = spikehunt.lightning.Monitor(out="lightning_run")
L.Trainer(max_epochs=1, callbacks=[monitor], logger=False, enable_checkpointing=False, enable_progress_bar=False,
          enable_model_summary=False).fit(Tiny(), torch.utils.data.DataLoader(data, batch_size=16))
'
expect 0 "verdict: healthy after [0-9]+ of [0-9]+ steps" -- "$venv/python" "$src/examples/python/hf_gpt2.py" run \
  --config "$src/examples/python/hf_gpt2.json" --set max_batches_per_epoch=4 --set params.n_embd=32 --out "$work/hf"

# Under another torch: one clear error naming both releases, before the extension loads.
mkdir -p "$work/other/torch"
echo "__version__ = '9.9.0+cpu'" > "$work/other/torch/version.py"
touch "$work/other/torch/__init__.py"
expect 1 "built against torch ${release//./\\.}(\+[a-z0-9]+)? and this environment holds torch 9\.9\.0\+cpu" -- \
  env PYTHONPATH="$work/other" "$venv/python" -c 'import spikehunt'
grep -q "pip install --force-reinstall --no-deps" <<<"$out" || fail "the error names no command that builds it for the torch at hand"
grep -q "undefined symbol" <<<"$out" && fail "the error is the loader's"
echo "wheel: passed"
