"""One rank of a data-parallel training loop under spikehunt.Watch, for the tests
(tests/python/test_python_ddp.py) and bench/python/ddp_bench.py:

    python3 ddp_steps.py RANK WORLD INIT_FILE OUT [--steps N] [--nan-rank R --nan-step S] [--lr LR]

WORLD processes (gloo, rendezvous through INIT_FILE) each train their contiguous
shard of the same global batch of 16 under DistributedDataParallel; WORLD 1 is
one process training the whole global batch (no torch.distributed). With
--nan-rank, one input element of that rank's shard is NaN at --nan-step. Rank 0
prints the watch's folder on its last line.
"""
import argparse
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import spikehunt

GLOBAL_BATCH = 16


class Net(nn.Module):  # no BatchNorm: a rank's statistics would be its shard's
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(20, 32)
        self.act = nn.Tanh()
        self.fc2 = nn.Linear(32, 5)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


def data(steps):
    g = torch.Generator().manual_seed(1)
    return torch.randn(steps, GLOBAL_BATCH, 20, generator=g), torch.randint(0, 5, (steps, GLOBAL_BATCH), generator=g)


def main(argv):
    p = argparse.ArgumentParser()
    p.add_argument("rank", type=int)
    p.add_argument("world", type=int)
    p.add_argument("init_file")
    p.add_argument("out")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--nan-rank", type=int, default=-1)
    p.add_argument("--nan-step", type=int, default=-1)
    p.add_argument("--lr", type=float, default=0.1)
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    if a.world > 1:
        torch.distributed.init_process_group("gloo", init_method="file://" + os.path.abspath(a.init_file),
                                             rank=a.rank, world_size=a.world)
    torch.manual_seed(0)
    model = Net()
    trained = torch.nn.parallel.DistributedDataParallel(model) if a.world > 1 else model
    optimizer = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    xs, ys = data(a.steps)
    shard = GLOBAL_BATCH // a.world
    rows = slice(a.rank * shard, (a.rank + 1) * shard)
    with spikehunt.Watch(model, optimizer, out=a.out, taps="leaves", planned_steps=a.steps, num_classes=5) as w:
        for step in range(a.steps):
            x, y = xs[step, rows].clone(), ys[step, rows]
            if a.rank == a.nan_rank and step == a.nan_step:
                x[1, 3] = float("nan")
            loss = F.cross_entropy(trained(x), y)
            record = w.step(loss, x, y)
            if record["health"] == "non_finite":
                break
    if a.world > 1:
        del trained  # DistributedDataParallel's reducer holds the group
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    if a.rank == 0:
        print(w.path)
    else:
        assert w.path is None, w.path


if __name__ == "__main__":
    main(sys.argv[1:])
