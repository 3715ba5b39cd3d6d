#!/usr/bin/env python3
"""A training script whose knobs are Hydra-style `group.key=value` overrides of a nested config
(`python train_hydra_style.py optim.lr=0.1 optim.momentum=0.9 seed=3`; parsed here as Hydra's
override grammar reads them, without Hydra), knowing nothing of spikehunt: `spikehunt sweep
--space S -- python train_hydra_style.py optim.lr={lr}` sweeps it unmodified (docs/commands.md)."""
import sys

import torch
import torch.nn as nn

cfg = {"seed": 0, "optim": {"lr": 0.05, "momentum": 0.9}, "data": {"batch_size": 32, "steps": 40}}
for override in sys.argv[1:]:
    path, value = override.split("=", 1)
    node, keys = cfg, path.split(".")
    for key in keys[:-1]:
        node = node[key]
    node[keys[-1]] = type(node[keys[-1]])(value)

torch.manual_seed(cfg["seed"])
w_true = torch.randn(16, 1)
model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=cfg["optim"]["lr"], momentum=cfg["optim"]["momentum"])
criterion = nn.MSELoss()
for step in range(cfg["data"]["steps"]):
    x = torch.randn(cfg["data"]["batch_size"], 16)
    y = x @ w_true
    optimizer.zero_grad()
    loss = criterion(model(x), y)
    loss.backward()
    optimizer.step()
print(f"final loss {loss.item():.4f}")
