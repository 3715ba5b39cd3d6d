#!/usr/bin/env python3
"""The workload of bench/python/command_bench.py: the motivating case's SimpleCNN-sized CNN (LeakyReLU,
SGD momentum 0.9, batch 64) on random 28x28 inputs, a plain PyTorch loop that knows nothing of spikehunt.
Prints one JSON line: each step's wall time (ms) after `--warmup` steps."""
import argparse
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=60)
parser.add_argument("--warmup", type=int, default=5)
parser.add_argument("--threads", type=int, default=2)
args = parser.parse_args()
torch.set_num_threads(args.threads)
torch.manual_seed(0)
model = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.LeakyReLU(0.01), nn.MaxPool2d(2),
                      nn.Conv2d(32, 64, 3, padding=1), nn.LeakyReLU(0.01), nn.MaxPool2d(2), nn.Flatten(),
                      nn.Linear(64 * 7 * 7, 128), nn.LeakyReLU(0.01), nn.Linear(128, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
inputs, labels = torch.randn(args.steps + args.warmup, 64, 1, 28, 28), torch.randint(0, 10, (args.steps + args.warmup, 64))
times = []
for i in range(args.steps + args.warmup):
    start = time.perf_counter()
    optimizer.zero_grad()
    loss = F.cross_entropy(model(inputs[i]), labels[i])
    loss.backward()
    optimizer.step()
    if i >= args.warmup:
        times.append((time.perf_counter() - start) * 1000)
print(json.dumps({"step_ms": times}))
