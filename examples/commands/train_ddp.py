#!/usr/bin/env python3
"""Data-parallel training as people write it for torchrun (DistributedDataParallel, gloo on CPU,
a DistributedSampler-style shard of each batch), knowing nothing of spikehunt:

    spikehunt run -- torchrun --nproc-per-node 2 examples/commands/train_ddp.py --lr 0.05"""
import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, default=0.05)
parser.add_argument("--steps", type=int, default=30)
args = parser.parse_args()

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = DistributedDataParallel(nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 4)))
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
data = torch.Generator().manual_seed(1)
centers = torch.randn(4, 16, generator=data) * 2
for step in range(args.steps):
    labels = torch.randint(0, 4, (64,), generator=data)
    inputs = centers[labels] + torch.randn(64, 16, generator=data)
    mine = slice(rank * 64 // world, (rank + 1) * 64 // world)
    optimizer.zero_grad()
    loss = F.cross_entropy(model(inputs[mine]), labels[mine])
    loss.backward()
    optimizer.step()
if rank == 0:
    print(f"rank 0 done: loss {loss.item():.4f}")
dist.destroy_process_group()
