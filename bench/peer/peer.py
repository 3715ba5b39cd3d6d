#!/usr/bin/env python3
"""The motivating case's simple_cnn training step (batch 64, LeakyReLU 0.01,
SGD lr 0.05 momentum 0.9) in PyTorch's Python API: plain, under a hook-based
monitor equivalent to spikehunt's (max |activation| per tap, loss, global and
per-layer grad norms and max |grad|, parameter norms before and after the
step, momentum-buffer norms and max, finiteness of all of it, one host copy
per step), and under torch.autograd.detect_anomaly(). Prints one JSON object
of median milliseconds per step.

Usage: peer.py --threads N [--steps 30] [--repeats 7]
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class SimpleCnn(nn.Module):
    def __init__(self, slope=0.01):
        super().__init__()
        self.slope = slope
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.fc1 = nn.Linear(3136, 128)
        self.fc2 = nn.Linear(128, 10)
        self.taps = None  # a list while monitored

    def tap(self, t):
        if self.taps is not None:
            self.taps.append(t.detach().abs().max())
        return t

    def forward(self, x):
        x = F.max_pool2d(self.tap(F.leaky_relu(self.conv1(x), self.slope)), 2)
        x = F.max_pool2d(self.tap(F.leaky_relu(self.conv2(x), self.slope)), 2)
        x = self.tap(F.leaky_relu(self.fc1(x.flatten(1)), self.slope))
        return self.tap(self.fc2(x))


def norms(tensors):
    return [torch.linalg.vector_norm(t.detach(), dtype=torch.float64) for t in tensors]


def maxes(tensors):
    return [t.detach().abs().max().double() for t in tensors]


def step(model, opt, x, y, mode):
    params = list(model.parameters())
    if mode == "monitored":
        model.taps = []
    opt.zero_grad(set_to_none=True)
    if mode == "anomaly":
        with torch.autograd.detect_anomaly():
            loss = F.cross_entropy(model(x), y)
            loss.backward()
    else:
        loss = F.cross_entropy(model(x), y)
        loss.backward()
    if mode == "monitored":
        grads = [p.grad for p in params]
        stats = model.taps + [loss.detach().double()] + norms(grads) + maxes(grads) + norms(params)
    opt.step()
    if mode == "monitored":
        bufs = [opt.state[p]["momentum_buffer"] for p in params if "momentum_buffer" in opt.state[p]]
        stats += norms(params) + norms(bufs) + maxes(bufs) + norms([x])
        values = torch.stack([s.double() for s in stats]).tolist()  # the one host copy
        finite = all(v == v and abs(v) != float("inf") for v in values)
        model.taps = None
        return finite
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=7)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    x = torch.rand(64, 1, 28, 28)
    y = torch.randint(0, 10, (64,))
    result = {"torch": torch.__version__, "threads": torch.get_num_threads()}
    modes = ["plain", "monitored", "anomaly"]
    times = {m: [] for m in modes}
    models = {}
    for m in modes:
        torch.manual_seed(0)
        model = SimpleCnn()
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        for _ in range(5):
            step(model, opt, x, y, m)
        models[m] = (model, opt)
    for _ in range(a.repeats):  # interleaved, like the C++ benchmark
        for m in modes:
            model, opt = models[m]
            start = time.perf_counter()
            for _ in range(a.steps):
                step(model, opt, x, y, m)
            times[m].append((time.perf_counter() - start) * 1000 / a.steps)
    for m in modes:
        result[m + "_ms"] = statistics.median(times[m])
    # The BLAS this process loaded (Debian's libblas.so.3 alternative), not the build's BLAS_INFO.
    with open("/proc/self/maps") as maps:
        libs = sorted({line.split()[-1] for line in maps if "blas" in line.split()[-1]})
    result["blas"] = ", ".join(libs) or "none loaded"
    print(json.dumps(result))


if __name__ == "__main__":
    main()
