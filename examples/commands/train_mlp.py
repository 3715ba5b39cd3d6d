#!/usr/bin/env python3
"""A plain PyTorch training script, written as people write them (argparse knobs, its own loop,
zero_grad/backward/step), that knows nothing of spikehunt: `spikehunt run -- python
examples/commands/train_mlp.py --lr 0.1` watches it unmodified (docs/commands.md).

A small MLP on seeded Gaussian blobs (8 classes, 32 features). At --lr 0.05 it trains; far above,
with momentum, it blows up within a few dozen steps."""
import argparse
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, default=float(os.environ.get("LR", 0.05)))  # or from the environment
parser.add_argument("--momentum", type=float, default=0.9)
parser.add_argument("--seed", type=int, default=0)
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--loss-module", action="store_true", help="nn.CrossEntropyLoss instead of F.cross_entropy")
parser.add_argument("--accumulate", type=int, default=1, help="micro-batches per optimizer step")
parser.add_argument("--amp", action="store_true", help="autocast to bfloat16 with a GradScaler")
parser.add_argument("--overflow-at", type=int, default=-1, help="a loss scaled to inf at this step (the scaler skips it)")
parser.add_argument("--crash-at", type=int, default=-1, help="raise at this step (a bug in the loop)")
parser.add_argument("--bug", default="none", help="a classic bug planted in the loop: no_zero_grad, "
                    "zero_grad_before_step, partial_optimizer, reinit (the first layer re-initialized every step)")
args = parser.parse_args()

torch.manual_seed(args.seed)
centers = torch.randn(8, 32, generator=torch.Generator().manual_seed(7)) * 2
labels = torch.randint(0, 8, (1024,))
inputs = centers[labels] + torch.randn(1024, 32)

model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8))
trained = model[4].parameters() if args.bug == "partial_optimizer" else model.parameters()
optimizer = torch.optim.SGD(trained, lr=args.lr, momentum=args.momentum)
criterion = nn.CrossEntropyLoss()
scaler = torch.amp.GradScaler("cpu", enabled=args.amp)


def check(step):
    if step == args.crash_at:
        raise ValueError(f"a batch this loop cannot handle at step {step}")


step = 0
for epoch in range(args.epochs):
    order = torch.randperm(len(inputs))
    total = 0.0
    for start in range(0, len(inputs), args.batch_size):
        index = order[start:start + args.batch_size]
        x, y = inputs[index], labels[index]
        if args.bug == "reinit":
            model[0].reset_parameters()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.amp):
            out = model(x)
            loss = criterion(out, y) if args.loss_module else F.cross_entropy(out, y)
        if step // args.accumulate == args.overflow_at:
            loss = loss * float("inf")
        scaler.scale(loss / args.accumulate).backward()
        total += loss.item()
        if (start // args.batch_size + 1) % args.accumulate == 0:
            check(step // args.accumulate)
            if args.bug == "zero_grad_before_step":
                optimizer.zero_grad()
            scaler.step(optimizer)
            scaler.update()
            if args.bug != "no_zero_grad":
                optimizer.zero_grad()
        step += 1
    print(f"epoch {epoch}: mean loss {total / (len(inputs) // args.batch_size):.4f}")
