#!/usr/bin/env python3
"""What the monitor's gather costs a data-parallel step: WORLD processes (gloo on
the CPU, rendezvous through a file) train the motivating case's SimpleCNN under
DistributedDataParallel, each on its shard of a global batch of 64, in blocks
interleaved within one run (so the VM's drift cannot skew one mode):

  plain        DDP steps, no monitor
  watch local  spikehunt.Watch(process_group=None): each rank's monitor on its own shard
  watch ranks  spikehunt.Watch (the default under torch.distributed): the global step,
               one all_gather of the step's statistics
  gather       the all_gather alone, timed inside the ranks' steps

Prints rank 0's median ms per step and ratio to plain for each mode (median over
blocks of each block's median after a warm-up step), the gather's share of a
plain step, the number of values each rank gathers a step, and the BLAS LibTorch calls.

Usage: PYTHONPATH=build/python .venv/bin/python bench/python/ddp_bench.py [--world 2] [--rounds 5] [--steps 12]
       (each rank takes --threads threads: 1 by default, so 2 ranks fill 2 cores)
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(os.path.dirname(here))
sys.path.insert(0, os.path.join(root, "examples", "python"))
sys.path.insert(0, os.path.join(root, "bench", "peer"))
import peer  # noqa: E402

import spikehunt  # noqa: E402
import spikehunt.watch  # noqa: E402
from simple_cnn import SimpleCNN  # noqa: E402

GLOBAL_BATCH = 64


def rank_main(a):
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", init_method="file://" + a.init, rank=a.rank, world_size=a.world)
    gathers, values = [], []
    ranks = spikehunt.watch._ranks

    def timed_ranks(group):  # the Watch's own gather, timed
        rank, world, gather = ranks(group)
        if gather is None:
            return rank, world, gather

        def timed(mine):
            t0 = time.perf_counter()
            out = gather(mine)
            gathers.append((time.perf_counter() - t0) * 1000)
            values.append(mine.numel())
            return out
        return rank, world, timed

    spikehunt.watch._ranks = timed_ranks
    torch.manual_seed(0)
    model = SimpleCNN(0.01)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator().manual_seed(a.rank)
    shard = GLOBAL_BATCH // a.world
    x, y = torch.rand(shard, 1, 28, 28, generator=g), torch.randint(0, 10, (shard,), generator=g)
    times = {"plain": [], "watch local": [], "watch ranks": []}

    def block(mode, out):
        steps = []
        if mode == "plain":
            for _ in range(a.steps):
                t0 = time.perf_counter()
                opt.zero_grad()
                F.cross_entropy(ddp(x), y).backward()
                opt.step()
                steps.append((time.perf_counter() - t0) * 1000)
        else:
            group = "auto" if mode == "watch ranks" else None
            with spikehunt.Watch(model, opt, out=out, taps="leaves", checkpoints=False, process_group=group) as w:
                for _ in range(a.steps):
                    t0 = time.perf_counter()
                    w.step(F.cross_entropy(ddp(x), y), x, y)
                    steps.append((time.perf_counter() - t0) * 1000)
        times[mode].append(statistics.median(steps[1:]))

    with tempfile.TemporaryDirectory() as out:
        for r in range(a.rounds):
            order = list(times) if r % 2 == 0 else list(reversed(times))
            for mode in order:
                block(mode, out)
    del ddp  # its reducer holds the group
    dist.barrier()
    dist.destroy_process_group()
    if a.rank != 0:
        return
    plain = statistics.median(times["plain"])
    print(f"# BLAS: {peer.blas_in_use()}; {a.world} ranks x {a.threads} thread(s), SimpleCNN, global batch "
          f"{GLOBAL_BATCH}, {a.rounds} rounds x {a.steps} steps a mode; rank 0's figures")
    print(f"{'mode':<12} {'ms/step':>8} {'ratio':>6}")
    for mode, ts in times.items():
        m = statistics.median(ts)
        print(f"{mode:<12} {m:8.2f} {m / plain:6.3f}")
    gm = statistics.median(gathers)
    print(f"{'gather':<12} {gm:8.3f} {gm / plain:6.3f}   ({values[0]} float64 values a rank, "
          f"{len(gathers)} gathers)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--rank", type=int, default=-1, help=argparse.SUPPRESS)
    ap.add_argument("--init", default="", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.rank >= 0:
        return rank_main(a)
    with tempfile.TemporaryDirectory() as tmp:
        init = os.path.join(tmp, "init")
        args = [sys.executable, os.path.abspath(__file__), "--world", str(a.world), "--threads", str(a.threads),
                "--rounds", str(a.rounds), "--steps", str(a.steps), "--init", init]
        procs = [subprocess.Popen(args + ["--rank", str(r)]) for r in range(a.world)]
        return max(p.wait() for p in procs)


if __name__ == "__main__":
    sys.exit(main())
