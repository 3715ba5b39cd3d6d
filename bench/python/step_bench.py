#!/usr/bin/env python3
"""A Python scenario's training step against plain PyTorch, in one process, one
run, rounds interleaved: the motivating case's simple_cnn step (batch 64,
LeakyReLU 0.01, SGD lr 0.05 momentum 0.9) as

  torch plain      the plain PyTorch loop (zero_grad, forward, loss, backward, step)
  torch hooks      the same under bench/peer's hook-based monitor (one host copy a step)
  torch anomaly    the same under torch.autograd.detect_anomaly()
  scenario plain   a spikehunt.Scenario trained by spikehunt without the monitor
  scenario monitor the same under spikehunt's monitor (taps by forward hooks)
  watch            the plain loop under spikehunt.Watch

and then a sweep of tiny Python bursts (tests/python/tiny.py) through persistent
workers against a process a burst (bursts per minute). Prints a table of median
ms per step and ratios to torch plain, and the BLAS LibTorch calls.

Usage: PYTHONPATH=build/python .venv/bin/python bench/python/step_bench.py [--threads 2] [--rounds 5] [--steps 30]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(os.path.dirname(here))
sys.path.insert(0, os.path.join(root, "bench", "peer"))
sys.path.insert(0, os.path.join(root, "examples", "python"))
import peer  # noqa: E402  (bench/peer/peer.py: the PyTorch side)
import spikehunt  # noqa: E402
from simple_cnn import SimpleCNN  # noqa: E402

X = torch.rand(64, 1, 28, 28, generator=torch.Generator().manual_seed(0))
Y = torch.randint(0, 10, (64,), generator=torch.Generator().manual_seed(1))
STEPS = 30


class FixedBatch(spikehunt.Scenario):
    """The bench's batch, STEPS times: the step alone, no data pipeline."""
    taps = ["conv1", "fc2"]

    def __init__(self, config):
        super().__init__(config)
        self.net = SimpleCNN(0.01)
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.05, momentum=0.9)
        self.left = STEPS

    def model(self):
        return self.net

    def optimizers(self):
        return self.opt

    def next_batch(self):
        if self.left == 0:
            return None
        self.left -= 1
        return X, Y

    def planned_steps(self):
        return STEPS


spikehunt.register("bench_fixed_batch", FixedBatch)


def torch_loop(mode):
    torch.manual_seed(0)
    model = peer.SimpleCnn()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for _ in range(3):
        peer.step(model, opt, X, Y, mode)
    start = time.perf_counter()
    for _ in range(STEPS):
        peer.step(model, opt, X, Y, mode)
    return (time.perf_counter() - start) * 1000 / STEPS


def scenario(monitor, threads):
    v = spikehunt.run_config(["scenario=\"bench_fixed_batch\"", f"threads={threads}"], monitor=monitor)
    assert v["steps_run"] == STEPS, v
    return v["wall_seconds"] * 1000 / STEPS


def watched():
    torch.manual_seed(0)
    model = SimpleCNN(0.01)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    with tempfile.TemporaryDirectory() as out:
        with spikehunt.Watch(model, opt, out=out, taps=["conv1", "fc2"], checkpoints=False) as w:
            start = time.perf_counter()
            for _ in range(STEPS):
                w.step(F.cross_entropy(model(X), Y), X, Y)
            return (time.perf_counter() - start) * 1000 / STEPS


def sweep_rate(threads, per_process):
    with tempfile.TemporaryDirectory() as out:
        args = [sys.executable, os.path.join(root, "tests", "python", "tiny.py"), "sweep",
                "--space", os.path.join(root, "tests", "python", "tiny_space.json"), "--runs", "12",
                "--max-shrinks", "0", "--no-progress", "-j", str(threads), "--out", out]
        if per_process:
            args.append("--process-per-burst")
        start = time.perf_counter()
        subprocess.run(args, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        return 12 / ((time.perf_counter() - start) / 60)


def main():
    global STEPS
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=30)
    a = ap.parse_args()
    STEPS = a.steps
    torch.set_num_threads(a.threads)
    rows = {
        "torch plain": lambda: torch_loop("plain"),
        "torch hooks": lambda: torch_loop("monitored"),
        "torch anomaly": lambda: torch_loop("anomaly"),
        "scenario plain": lambda: scenario(False, a.threads),
        "scenario monitor": lambda: scenario(True, a.threads),
        "watch": watched,
    }
    times = {k: [] for k in rows}
    for _ in range(a.rounds):
        for name, f in rows.items():
            times[name].append(f())
    base = statistics.median(times["torch plain"])
    print(f"simple_cnn step, batch 64, {a.threads} thread(s), torch {torch.__version__}, "
          f"{a.rounds} rounds of {STEPS} steps; BLAS: {peer.blas_in_use()}")
    print(f"{'':18} {'ms/step':>9} {'/ torch plain':>14}")
    for name in rows:
        m = statistics.median(times[name])
        print(f"{name:18} {m:9.2f} {m / base:14.3f}")
    plain = statistics.median(times["scenario plain"])
    print(f"scenario monitor / scenario plain: {statistics.median(times['scenario monitor']) / plain:.3f}")
    workers = sweep_rate(a.threads, False)
    processes = sweep_rate(a.threads, True)
    print(f"tiny Python bursts per minute, -j {a.threads}: persistent workers {workers:.0f}, "
          f"a process a burst {processes:.0f} ({workers / processes:.2f}x)")


if __name__ == "__main__":
    main()
