# installed_checks.sh — sourced by tests/wheel.sh and tests/pip_install.sh, after
# spikehunt was installed into the virtual environment $venv (its bin/): what a
# PyTorch user does with the installed package alone, from $work (no build tree,
# no source tree on any path): the `spikehunt` command, `python -m spikehunt`,
# the PyTorch 2.x decoder example (SDPA, RMSNorm, rotary, fused AdamW, bf16
# autocast) under run, sweep (shrink, replayed repro) and doctor, and
# spikehunt.Watch in a loop of the user's own. Needs $venv, $src, $work, expect.sh.
cd "$work"
# The package is the installed one, and the extension sits in site-packages.
expect 0 "site-packages/spikehunt/__init__.py" -- "$venv/python" -c 'import spikehunt; print(spikehunt.__file__)'
expect 0 "^0\.[0-9]+\.[0-9]+" -- "$venv/python" -c 'import spikehunt; print(spikehunt.__version__)'
expect 0 "run +Run one training burst" -- "$venv/spikehunt" --help
llama=$src/examples/python/llama.py
small=(--set max_batches_per_epoch=6 --set schedule.warmup_steps=2 --set model.gpt.width=32 --set batch_size=4)
expect 0 "verdict: healthy after 6 of 6 steps" -- \
  "$venv/python" "$llama" run --config "$src/examples/python/llama.json" "${small[@]}" --out "$work/run"
grep -q "LibTorch 2\." <<<"$out" || fail "run names LibTorch 2.x in its header"
# A learning rate far past stable: the sweep finds it, shrinks it and replays its repro.
cat > "$work/space.json" <<SPACE
{"base": {"scenario": "py_llama", "model": {"kind": "gpt", "gpt": {"width": 32, "layers": 1, "heads": 2, "context": 32}},
          "dataset": {"kind": "text"}, "optimizer": {"kind": "adamw", "lr": 0.003},
          "batch_size": 4, "max_batches_per_epoch": 8, "threads": 1},
 "dimensions": {"optimizer.lr": {"set": [0.003, 10]}, "seed": {"range": [0, 1], "simplest": 0}}}
SPACE
expect 1 "replay: reproduced" -- "$venv/python" "$llama" sweep --space "$work/space.json" --runs 4 -j 2 \
  --shrink-bursts 6 --max-shrinks 1 --no-progress --out "$work/sweep"
grep -qE "replay it: .*llama.py replay" <<<"$out" || fail "the sweep's replay command names the user's script"
repro=$(ls "$work"/sweep/repros/*.repro.json | head -n 1)
expect 0 "reproduced" -- "$venv/python" -m spikehunt --module "$llama" replay "$repro"
expect 0 "no vital sign failed|most likely cause" -- \
  "$venv/python" "$llama" doctor --config "$src/examples/python/llama.json" "${small[@]}"
# spikehunt.Watch in a plain loop of the user's own.
expect 0 "watch: healthy" -- "$venv/python" -c '
import torch, torch.nn.functional as F, spikehunt
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.RMSNorm(16), torch.nn.Linear(16, 2))
opt = torch.optim.AdamW(net.parameters(), lr=1e-3, foreach=True)
with spikehunt.Watch(net, opt, out="watch_run", num_classes=2) as w:
    for step in range(5):  # the watch runs backward, the clip and the step
        x, y = torch.randn(4, 8), torch.randint(0, 2, (4,))
        w.step(F.cross_entropy(net(x), y), x, y)
print("watch:", w.verdict()["outcome"])
'
# A plain training script, unmodified, under run -- COMMAND.
expect 0 "healthy" -- "$venv/spikehunt" run --out "$work/command" -- "$venv/python" \
  "$src/examples/commands/train_mlp.py" --epochs 1
