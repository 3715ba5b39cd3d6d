#!/usr/bin/env python3
"""Classic training bugs in a plain PyTorch script that knows nothing of spikehunt, for
`spikehunt doctor -- python examples/commands/train_buggy.py --bug NAME` (docs/commands.md;
tests/python/test_command_doctor.py pins the doctor's top cause for each).

A small classifier on seeded Gaussian blobs (4 classes, 16 features), its own loop, evaluated on
a validation set after every epoch. --bug plants what is wrong, as people write it:

  none               healthy
  double_softmax     the model ends in nn.Softmax and the loss is nn.CrossEntropyLoss
  raw_inputs         inputs on a 0..255 scale (no normalization)
  partial_optimizer  the optimizer is built over the last layer only
"""
import argparse

import torch
import torch.nn as nn

parser = argparse.ArgumentParser()
parser.add_argument("--bug", default="none", choices=["none", "double_softmax", "raw_inputs", "partial_optimizer"])
parser.add_argument("--lr", type=float, default=0.05)
parser.add_argument("--seed", type=int, default=0)
parser.add_argument("--epochs", type=int, default=5)
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--clip", type=float, default=0, help="clip the gradients' norm at this value (0: no clipping)")
args = parser.parse_args()

torch.manual_seed(args.seed)
centers = torch.randn(4, 16, generator=torch.Generator().manual_seed(7)) * 2


def blobs(n):
    labels = torch.randint(0, 4, (n,))
    x = centers[labels] + 2 * torch.randn(n, 16)
    return (x * 50 + 128 if args.bug == "raw_inputs" else x), labels


train_x, train_y = blobs(2048)
val_x, val_y = blobs(512)
layers = [nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4)]
model = nn.Sequential(*layers, *([nn.Softmax(dim=1)] if args.bug == "double_softmax" else []))
params = layers[-1].parameters() if args.bug == "partial_optimizer" else model.parameters()
optimizer = torch.optim.SGD(params, lr=args.lr, momentum=0.9)
criterion = nn.CrossEntropyLoss()

for epoch in range(args.epochs):
    model.train()
    order = torch.randperm(len(train_x))
    for start in range(0, len(train_x), args.batch_size):
        index = order[start:start + args.batch_size]
        optimizer.zero_grad()
        loss = criterion(model(train_x[index]), train_y[index])
        loss.backward()
        if args.clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        optimizer.step()
    model.eval()
    with torch.no_grad():
        out = model(val_x)
        val_loss = criterion(out, val_y)
    print(f"epoch {epoch}: validation loss {val_loss:.4f}, accuracy {(out.argmax(1) == val_y).float().mean():.3f}")
