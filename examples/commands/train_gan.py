#!/usr/bin/env python3
"""A small GAN, written as people write them (two models, two optimizers, a discriminator step then
a generator step each batch), that knows nothing of spikehunt: `spikehunt run -- python
examples/commands/train_gan.py` watches each optimizer's steps as a burst of its own.

The data: a ring of 8 Gaussians in 2-D. --d-lr far above its default blows the discriminator up."""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

parser = argparse.ArgumentParser()
parser.add_argument("--g-lr", type=float, default=1e-3)
parser.add_argument("--d-lr", type=float, default=1e-3)
parser.add_argument("--seed", type=int, default=0)
parser.add_argument("--steps", type=int, default=60)
args = parser.parse_args()

torch.manual_seed(args.seed)
G = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 2))
D = nn.Sequential(nn.Linear(2, 64), nn.LeakyReLU(0.2), nn.Linear(64, 1))
opt_d = torch.optim.SGD(D.parameters(), lr=args.d_lr, momentum=0.9)
opt_g = torch.optim.Adam(G.parameters(), lr=args.g_lr, betas=(0.5, 0.999))


def real_batch(n=64):
    angle = torch.randint(0, 8, (n,)).float() * (2 * math.pi / 8)
    return torch.stack([angle.cos(), angle.sin()], 1) * 2 + 0.05 * torch.randn(n, 2)


for step in range(args.steps):
    real, z = real_batch(), torch.randn(64, 8)
    fake = G(z)
    opt_d.zero_grad()
    d_loss = (F.binary_cross_entropy_with_logits(D(real), torch.ones(64, 1)) +
              F.binary_cross_entropy_with_logits(D(fake.detach()), torch.zeros(64, 1)))
    d_loss.backward()
    opt_d.step()
    opt_g.zero_grad()
    g_loss = F.binary_cross_entropy_with_logits(D(fake), torch.ones(64, 1))
    g_loss.backward()
    opt_g.step()
    if step % 20 == 0:
        print(f"step {step}: d {d_loss.item():.3f} g {g_loss.item():.3f}")
