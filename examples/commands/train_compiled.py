#!/usr/bin/env python3
"""A torch.compile'd model in a plain loop, knowing nothing of spikehunt: `spikehunt run -- python
examples/commands/train_compiled.py` watches it (no taps inside the compiled region: Dynamo would
trace the monitor's hooks into the graph, so there they do nothing)."""
import torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
m = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
cm = torch.compile(m)
o = torch.optim.SGD(m.parameters(), lr=0.1)
for i in range(20):
    x, y = torch.randn(32, 16), torch.randint(0, 4, (32,))
    o.zero_grad(); F.cross_entropy(cm(x), y).backward(); o.step()
print("done")
