#!/usr/bin/env python3
"""The monitor inside the frameworks' own loops against no monitor, in one
process, one run, rounds interleaved:

  lightning plain         the motivating case's SimpleCNN (batch 64) as a LightningModule, trainer.fit()
  lightning SpikeDetection  the same with Lightning's own loss-spike callback
  lightning spikehunt     the same with spikehunt.lightning.Monitor
  hf plain                a 2-layer GPT-2 (n_embd 128, 128 tokens, batch 8) under transformers' Trainer
  hf spikehunt            the same with spikehunt.hf.Monitor
  torch plain / watch     the plain PyTorch loop against the same loop under spikehunt.Watch

Each row is the median over rounds of the median time of a training batch
(on_train_batch_start to on_train_batch_end; the Trainer's on_step_begin to
on_step_end; the loop's step), after warm-up batches. Prints ms per step and
each row's ratio to its framework's plain row, and the BLAS LibTorch calls.

Usage: PYTHONPATH=build/python .venv/bin/python bench/python/frameworks_bench.py [--threads 2] [--rounds 5] [--steps 40]
       [--clock wall|thread]
"""
import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
import warnings

import torch
import torch.nn.functional as F

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(os.path.dirname(here))
sys.path.insert(0, os.path.join(root, "bench", "peer"))
sys.path.insert(0, os.path.join(root, "examples", "python"))
import peer  # noqa: E402
import pytorch_lightning as pl  # noqa: E402
import transformers  # noqa: E402

import spikehunt  # noqa: E402
import spikehunt.hf  # noqa: E402
import spikehunt.lightning  # noqa: E402
from simple_cnn import SimpleCNN  # noqa: E402

X = torch.rand(64, 1, 28, 28, generator=torch.Generator().manual_seed(0))
Y = torch.randint(0, 10, (64,), generator=torch.Generator().manual_seed(1))
WARMUP = 5
CLOCK = time.perf_counter  # --clock thread: time.thread_time, the main thread's CPU time


class LitCNN(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = SimpleCNN(0.01)

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)


class BatchTimes(pl.Callback):
    def __init__(self):
        self.times = []

    def on_train_batch_start(self, *args):
        self.t0 = CLOCK()

    def on_train_batch_end(self, *args):
        self.times.append((CLOCK() - self.t0) * 1000)


class StepTimes(transformers.TrainerCallback):
    def __init__(self):
        self.times = []

    def on_step_begin(self, *args, **kwargs):
        self.t0 = CLOCK()

    def on_step_end(self, *args, **kwargs):
        self.times.append((CLOCK() - self.t0) * 1000)


def median_after_warmup(times):
    return statistics.median(times[WARMUP:])


def lightning(extra, steps, out):
    torch.manual_seed(0)
    timer = BatchTimes()
    callbacks = [timer] + ([extra(out)] if extra else [])
    trainer = pl.Trainer(max_steps=steps, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, callbacks=callbacks,
                         default_root_dir=out)
    trainer.fit(LitCNN(), torch.utils.data.DataLoader([(X, Y)] * steps, batch_size=None))
    return median_after_warmup(timer.times)


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n):
        self.rows = torch.randint(0, 256, (n, 128), generator=torch.Generator().manual_seed(2))

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return {"input_ids": self.rows[i], "labels": self.rows[i]}


def hf(extra, steps, out):
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=256, n_positions=128, n_embd=128, n_layer=2, n_head=4,
                                     bos_token_id=0, eos_token_id=0)
    timer = StepTimes()
    args = transformers.TrainingArguments(output_dir=out, max_steps=steps, per_device_train_batch_size=8,
                                          learning_rate=1e-3, logging_steps=10 ** 6, save_strategy="no",
                                          report_to=[], use_cpu=True, seed=0, disable_tqdm=True)
    trainer = transformers.Trainer(model=transformers.GPT2LMHeadModel(config), args=args,
                                   train_dataset=Tokens(steps * 8),
                                   callbacks=[timer] + ([extra(out)] if extra else []))
    trainer.train()
    return median_after_warmup(timer.times)


def loop(watch, steps, out):
    torch.manual_seed(0)
    model = SimpleCNN(0.01)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    times = []
    if watch:
        with spikehunt.Watch(model, opt, out=out, taps="leaves") as w:
            for _ in range(steps):
                t0 = CLOCK()
                w.step(F.cross_entropy(model(X), Y), X, Y)
                times.append((CLOCK() - t0) * 1000)
    else:
        for _ in range(steps):
            t0 = CLOCK()
            opt.zero_grad()
            F.cross_entropy(model(X), Y).backward()
            opt.step()
            times.append((CLOCK() - t0) * 1000)
    return median_after_warmup(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--clock", choices=["wall", "thread"], default="wall",
                    help="thread: the main thread's CPU time (what another process on the machine cannot inflate)")
    a = ap.parse_args()
    global CLOCK
    CLOCK = time.thread_time if a.clock == "thread" else time.perf_counter
    torch.set_num_threads(a.threads)
    warnings.filterwarnings("ignore")
    logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    transformers.logging.set_verbosity_error()
    rows = {
        "lightning plain": (lambda o: lightning(None, a.steps, o), "lightning plain"),
        "lightning SpikeDetection": (lambda o: lightning(lambda d: pl.callbacks.SpikeDetection(
            exclude_batches_path=os.path.join(d, "skip.json")), a.steps, o), "lightning plain"),
        "lightning spikehunt": (lambda o: lightning(lambda d: spikehunt.lightning.Monitor(
            out=d, taps="leaves"), a.steps, o), "lightning plain"),
        "hf plain": (lambda o: hf(None, a.steps, o), "hf plain"),
        "hf spikehunt": (lambda o: hf(lambda d: spikehunt.hf.Monitor(out=d, taps="leaves"), a.steps, o), "hf plain"),
        "torch plain": (lambda o: loop(False, a.steps, o), "torch plain"),
        "torch watch": (lambda o: loop(True, a.steps, o), "torch plain"),
    }
    times = {k: [] for k in rows}
    devnull = open(os.devnull, "w")
    for _ in range(a.rounds):
        for name, (f, _) in rows.items():
            with tempfile.TemporaryDirectory() as out:
                stdout, sys.stdout = sys.stdout, devnull
                try:
                    times[name].append(f(out))
                finally:
                    sys.stdout = stdout
    print(f"{a.threads} thread(s), torch {torch.__version__}, pytorch-lightning {pl.__version__}, transformers "
          f"{transformers.__version__}, {a.rounds} rounds of {a.steps} steps ({WARMUP} warm-up), {a.clock} clock; "
          f"BLAS: {peer.blas_in_use()}")
    print(f"{'':26} {'ms/step':>9} {'/ plain':>9}")
    for name, (_, base) in rows.items():
        m = statistics.median(times[name])
        print(f"{name:26} {m:9.2f} {m / statistics.median(times[base]):9.3f}")


if __name__ == "__main__":
    main()
