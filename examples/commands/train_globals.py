#!/usr/bin/env python3
"""A training script in nanoGPT's style, knowing nothing of spikehunt: its knobs are module-level
globals that `--key=value` words override (nanoGPT's configurator.py, inlined), and its model
returns (logits, loss). `spikehunt sweep --space S -- python train_globals.py --learning_rate={lr}`
sweeps it unmodified (docs/commands.md)."""
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

learning_rate = 1e-3
max_iters = 40
seed = 1337
batch_size = 16
block_size = 16
for arg in sys.argv[1:]:  # configurator.py: --key=value overrides a global of the same type
    key, value = arg[2:].split("=", 1)
    assert key in globals(), f"unknown config key {key}"
    globals()[key] = type(globals()[key])(value)

torch.manual_seed(seed)
text = torch.randint(0, 32, (4000,))


def get_batch():
    ix = torch.randint(len(text) - block_size, (batch_size,))
    x = torch.stack([text[i:i + block_size] for i in ix])
    return x, torch.stack([text[i + 1:i + 1 + block_size] for i in ix])


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(32, 48)
        self.mlp = nn.Sequential(nn.Linear(48, 96), nn.GELU(), nn.Linear(96, 48))
        self.ln_f = nn.LayerNorm(48)
        self.lm_head = nn.Linear(48, 32)

    def forward(self, idx, targets=None):
        x = self.wte(idx)
        x = self.ln_f(x + self.mlp(x))
        logits = self.lm_head(x)
        loss = None if targets is None else F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss


model = TinyLM()
optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, betas=(0.9, 0.95), weight_decay=0.1)
for it in range(max_iters):
    X, Y = get_batch()
    logits, loss = model(X, Y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if it % 10 == 0:
        print(f"iter {it}: loss {loss.item():.4f}")
