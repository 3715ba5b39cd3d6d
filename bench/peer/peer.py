#!/usr/bin/env python3
"""The motivating case's simple_cnn training step (batch 64, LeakyReLU 0.01,
SGD lr 0.05 momentum 0.9) in PyTorch's Python API: plain, under a hook-based
monitor equivalent to spikehunt's (max |activation| per tap, loss, global and
per-layer grad norms and max |grad|, parameter norms before and after the
step, momentum-buffer norms and max, finiteness of all of it, one host copy
per step), and under torch.autograd.detect_anomaly(). Prints one JSON object
of median milliseconds per step.

With --model gpt: the gpt step of configs/gpt.json instead (width 128, 2
layers, 4 heads, context 64, pre-LayerNorm, the same hand-written causal
attention as spikehunt's, GELU MLP, AdamW betas (0.9, 0.95), grad clip 1.0,
batch 16 of byte tokens), plain only.

Usage: peer.py --threads N [--model simple_cnn|gpt] [--steps 30] [--repeats 7]
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


class Block(nn.Module):
    def __init__(self, c, h):
        super().__init__()
        self.h = h
        self.ln1, self.ln2 = nn.LayerNorm(c), nn.LayerNorm(c)
        self.qkv, self.proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
        self.fc, self.out = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)

    def forward(self, x, future):
        b, t, c = x.shape
        d = c // self.h
        q, k, v = self.qkv(self.ln1(x)).split(c, -1)
        q, k, v = (z.view(b, t, self.h, d).transpose(1, 2) for z in (q, k, v))
        logits = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / d ** 0.5)
        att = torch.softmax(logits.masked_fill(future, float("-inf")), -1)
        x = x + self.proj(torch.matmul(att, v).transpose(1, 2).reshape(b, t, c))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class Gpt(nn.Module):
    def __init__(self, vocab=256, c=128, layers=2, h=4, context=64):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, c), nn.Embedding(context, c)
        self.blocks = nn.ModuleList(Block(c, h) for _ in range(layers))
        self.ln_f, self.head = nn.LayerNorm(c), nn.Linear(c, vocab, bias=False)

    def forward(self, x):
        t = x.shape[1]
        h = self.tok(x) + self.pos(torch.arange(t))
        future = torch.ones(t, t, dtype=torch.bool).triu(1)
        for b in self.blocks:
            h = b(h, future)
        return self.head(self.ln_f(h))


def gpt_main(a):
    torch.manual_seed(0)
    model = Gpt()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0)
    x = torch.randint(0, 256, (16, 64))
    y = torch.randint(0, 256, (16, 64))

    def step():
        opt.zero_grad(set_to_none=True)
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, 256), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    for _ in range(5):
        step()
    times = []
    for _ in range(a.repeats):
        start = time.perf_counter()
        for _ in range(a.steps):
            step()
        times.append((time.perf_counter() - start) * 1000 / a.steps)
    return {"torch": torch.__version__, "threads": torch.get_num_threads(), "model": "gpt",
            "parameters": sum(p.numel() for p in model.parameters()), "plain_ms": statistics.median(times)}


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
    ap.add_argument("--model", choices=["simple_cnn", "gpt"], default="simple_cnn")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    if a.model == "gpt":
        result = gpt_main(a)
        result["blas"] = blas_in_use()
        print(json.dumps(result))
        return
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
    result["blas"] = blas_in_use()
    print(json.dumps(result))


def blas_in_use():
    """The BLAS LibTorch calls: the wheel's MKL, linked into libtorch_cpu.so (as spikehunt's environment
    line says it), else the BLAS libraries this process loaded."""
    mkl = [line.strip() for line in torch.__config__.show().splitlines() if "Math Kernel Library Version" in line]
    if mkl and torch.backends.mkl.is_available():
        return "MKL " + mkl[0].split("Version ")[1].split("-")[0] + " (linked into LibTorch)"
    with open("/proc/self/maps") as maps:
        libs = sorted({line.split()[-1] for line in maps if "blas" in line.split()[-1]})
    return ", ".join(libs) or "none loaded"


if __name__ == "__main__":
    main()
