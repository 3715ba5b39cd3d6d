#!/usr/bin/env python3
"""The monitor inside the frameworks' own loops against no monitor, in one
process, one run, rounds interleaved:

  lightning plain         the motivating case's SimpleCNN (batch 64) as a LightningModule, trainer.fit()
  lightning SpikeDetection  the same with Lightning's own loss-spike callback
  lightning spikehunt     the same with spikehunt.lightning.Monitor
  hf plain                a 2-layer GPT-2 (n_embd 128, 128 tokens, batch 8) under transformers' Trainer
  hf spikehunt            the same with spikehunt.hf.Monitor
  torch plain / watch     the plain PyTorch loop against the same loop under spikehunt.Watch
  ..., no ckpt            spikehunt's rows with checkpoints=False: no copy of the state entering
                          each step (what the last-healthy checkpoint costs)

Each row is the median over rounds of the median time of a training batch
(from the first callback's on_train_batch_start to the last one's
on_train_batch_end; the Trainer's on_step_begin to on_step_end likewise; the
loop's step), after warm-up batches. Prints ms per step and
each row's ratio to its framework's plain row, and the BLAS LibTorch calls.

--interleaved measures each callback (and the Watch) with monitored and plain steps
alternating in one fit (even steps watched, odd ones not, of the same model: the
callback's or the Watch's hooks stay registered and return at once), which the drift of
a shared VM cannot skew.

--own-time times the Watch's own code in each step (its hooks and its three calls)
against a plain step of a second, identical model in the same loop: the monitor's
cost measured apart from the step's own time, whose drift swamps a few percent here.

--whole-steps times whole steps: a Watch step of one model alternating with a plain step of a
second, identical one, in one process run under glibc settings that keep freed memory (it
re-executes itself with MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_ and MALLOC_TOP_PAD_ set):
by default glibc hands a step's large tensors back to the kernel, and the page faults of mapping
them again (2,000 to 6,200 a SimpleCNN step, by the process's allocation history) swamp the
comparison. Whole steps include what the own time leaves out (the hooks' slow path, the caches
the monitor's reads evict).

--steady-malloc runs the other modes under those settings too.

Usage: PYTHONPATH=build/python .venv/bin/python bench/python/frameworks_bench.py [--threads 2] [--rounds 5] [--steps 40]
       [--clock wall|thread] [--interleaved | --own-time | --whole-steps] [--steady-malloc]
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


class Bracket:
    """A batch's time from the start hook of a callback placed first in the framework's list to the
    end hook of one placed last, so the callbacks between them are timed with the batch (Lightning and
    the Trainer call them in the order given: a timer placed first alone would stop before the others'
    end hooks, where SpikeDetection and spikehunt's step end). around(*callbacks) is the list to give."""

    def __init__(self, base, start_hook, end_hook):
        self.times = []
        outer = self

        def started(self, *args, **kwargs):
            outer.t0 = CLOCK()

        def ended(self, *args, **kwargs):
            outer.times.append((CLOCK() - outer.t0) * 1000)

        self.start = type("Start", (base,), {start_hook: started})()
        self.end = type("End", (base,), {end_hook: ended})()

    def around(self, *callbacks):
        return [self.start, *callbacks, self.end]


def BatchTimes():
    return Bracket(pl.Callback, "on_train_batch_start", "on_train_batch_end")


def StepTimes():
    return Bracket(transformers.TrainerCallback, "on_step_begin", "on_step_end")


def plain_step(model, opt):
    """One plain training step of `model` on the batch: what every monitored step is compared with."""
    opt.zero_grad()
    F.cross_entropy(model(X), Y).backward()
    opt.step()


def quietly(run):
    """run(out) in a fresh temporary folder, its output (the monitors' summaries) silenced."""
    with tempfile.TemporaryDirectory() as out, open(os.devnull, "w") as devnull:
        stdout, sys.stdout = sys.stdout, devnull
        try:
            return run(out)
        finally:
            sys.stdout = stdout


def mean_but_slowest(values, drop=0.02):
    """The mean with the slowest 2% left out (a collector's pause, a burst of page faults): what a
    step costs on average, a cost paid every few steps included (the trace file's write(2), every
    few dozen steps), which a median leaves out. --own-time and --whole-steps (295 steps a run);
    the fits' few dozen steps keep the median, which their page faults swing less."""
    kept = sorted(values)[:max(1, len(values) - int(len(values) * drop))]
    return statistics.fmean(kept)


def fit_lit(callbacks, steps, out):
    """One Lightning fit of the LitCNN on `steps` copies of the batch."""
    torch.manual_seed(0)
    trainer = pl.Trainer(max_steps=steps, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, callbacks=callbacks,
                         default_root_dir=out)
    trainer.fit(LitCNN(), torch.utils.data.DataLoader([(X, Y)] * steps, batch_size=None))


def lightning(extra, steps, out):
    timer = BatchTimes()
    fit_lit(timer.around(*([extra(out)] if extra else [])), steps, out)
    return statistics.median(timer.times[WARMUP:])


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
                                   callbacks=timer.around(*([extra(out)] if extra else [])))
    trainer.train()
    return statistics.median(timer.times[WARMUP:])


def loop(watch, steps, out, checkpoints):
    torch.manual_seed(0)
    model = SimpleCNN(0.01)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    times = []
    if watch:
        with spikehunt.Watch(model, opt, out=out, taps="leaves", checkpoints=checkpoints) as w:
            for _ in range(steps):
                t0 = CLOCK()
                w.step(F.cross_entropy(model(X), Y), X, Y)
                times.append((CLOCK() - t0) * 1000)
    else:
        for _ in range(steps):
            t0 = CLOCK()
            plain_step(model, opt)
            times.append((CLOCK() - t0) * 1000)
    return statistics.median(times[WARMUP:])


# ---- interleaved: monitored and plain steps alternating in one fit (what the VM's drift cannot skew) ----

class AlternatingLightning(spikehunt.lightning.Monitor):
    """spikehunt's callback on even batches only; odd batches run as if it were absent
    (its hooks stay registered and return at once)."""

    def _off(self, batch_idx):
        return batch_idx % 2 == 1

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self._skip = self._off(batch_idx)
        if self._skip:
            self.watch.take_forward(None)
        else:
            super().on_train_batch_start(trainer, pl_module, batch, batch_idx)

    def on_before_backward(self, trainer, pl_module, loss):
        if not self._skip:
            super().on_before_backward(trainer, pl_module, loss)
        else:
            self.watch.take_forward(None)

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        if not self._skip:
            super().on_before_optimizer_step(trainer, pl_module, optimizer)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if not self._skip:
            super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)


class AlternatingSpikeDetection(pl.callbacks.SpikeDetection):
    """Lightning's own loss-spike callback on even batches only (its one hook returns at once on
    odd ones)."""

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if batch_idx % 2 == 0:
            super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)


class AlternatingHf(spikehunt.hf.Monitor):
    """The same for the Trainer: even optimizer steps watched."""

    def on_step_begin(self, args, state, control, **kwargs):
        self._skip = state.global_step % 2 == 1

    def _pre(self, model, args, kwargs):
        if not self._skip:
            super()._pre(model, args, kwargs)

    def _post(self, model, args, kwargs, output):
        if not self._skip:
            super()._post(model, args, kwargs, output)
        else:
            self.watch.take_forward(None)

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        if not self._skip:
            super().on_pre_optimizer_step(args, state, control, **kwargs)

    def on_optimizer_step(self, args, state, control, **kwargs):
        if not self._skip:
            super().on_optimizer_step(args, state, control, **kwargs)


class AlternatingWatch(spikehunt.Watch):
    """The Watch whose hooks return at once while skip is set: plain steps of the same model between
    watched ones."""
    skip = False

    def _collect(self, name, tensor):
        if not self.skip:
            super()._collect(name, tensor)

    def _root(self, module, inputs, output):
        if not self.skip:
            super()._root(module, inputs, output)


def split_even_odd(times):
    times = times[WARMUP + WARMUP % 2:]
    return statistics.median(times[0::2]), statistics.median(times[1::2])


def interleaved(steps, checkpoints, out):
    """{row: (watched ms, plain ms)} from one fit / train / loop each, steps alternating."""
    result = {}
    timer = BatchTimes()
    fit_lit(timer.around(AlternatingLightning(out=out, taps="leaves", checkpoints=checkpoints)), steps, out)
    result["lightning"] = split_even_odd(timer.times)
    timer = BatchTimes()
    fit_lit(timer.around(AlternatingSpikeDetection(exclude_batches_path=os.path.join(out, "skip.json"))), steps, out)
    result["lightning SpikeDetection"] = split_even_odd(timer.times)
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=256, n_positions=128, n_embd=128, n_layer=2, n_head=4,
                                     bos_token_id=0, eos_token_id=0)
    hf_timer = StepTimes()
    args = transformers.TrainingArguments(output_dir=out, max_steps=steps, per_device_train_batch_size=8,
                                          learning_rate=1e-3, logging_steps=10 ** 6, save_strategy="no",
                                          report_to=[], use_cpu=True, seed=0, disable_tqdm=True)
    transformers.Trainer(model=transformers.GPT2LMHeadModel(config), args=args, train_dataset=Tokens(steps * 8),
                         callbacks=hf_timer.around(AlternatingHf(out=out, taps="leaves",
                                                                 checkpoints=checkpoints))).train()
    result["hf"] = split_even_odd(hf_timer.times)
    torch.manual_seed(0)
    model = SimpleCNN(0.01)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    times = []
    with AlternatingWatch(model, opt, out=out, taps="leaves", checkpoints=checkpoints) as w:
        for _ in range(steps // 2):
            w.skip = False
            t0 = CLOCK()
            w.step(F.cross_entropy(model(X), Y), X, Y)
            times.append((CLOCK() - t0) * 1000)
            w.skip = True  # the same model and optimizer, its hooks returning at once
            t0 = CLOCK()
            plain_step(model, opt)
            times.append((CLOCK() - t0) * 1000)
    result["watch"] = split_even_odd(times)
    return result


class TimedWatch(spikehunt.Watch):
    """The Watch with the time of its forward hooks added up (own_time)."""
    hooks = 0.0

    def _collect(self, name, tensor):
        t0 = time.perf_counter()
        super()._collect(name, tensor)
        TimedWatch.hooks += time.perf_counter() - t0


def two_cnns():
    """Two identical SimpleCNNs with their SGD optimizers: one watched, one plain beside it."""
    pairs = []
    for _ in range(2):
        torch.manual_seed(0)
        model = SimpleCNN(0.01)
        pairs.append((model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)))
    return pairs


def own_time(steps, checkpoints, out):
    """{part: ms a step}: the time spent in the Watch's own code in each step (its forward hooks,
    the step's start with the checkpoint's state, after backward, after the optimizer step), and a
    plain step of a second, identical model, from one loop: the monitor's cost without the rest of
    the step's time, which the VM's noise swamps when whole steps are compared."""
    (model, opt), (other, other_opt) = two_cnns()
    parts = {k: [] for k in ("hooks", "begin", "after backward", "after step", "own", "plain step")}
    P = time.perf_counter
    with TimedWatch(model, opt, out=out, taps="leaves", checkpoints=checkpoints) as w:
        for step in range(steps):
            TimedWatch.hooks = 0.0
            loss = F.cross_entropy(model(X), Y)
            outputs, taps = w.take_forward(loss.detach())
            t0 = P()
            w.replay([(X, Y, outputs, loss, taps)])
            t1 = P()
            model.zero_grad()
            loss.backward()
            t2 = P()
            w.after_backward()
            t3 = P()
            opt.step()
            t4 = P()
            w.finish()
            t5 = P()
            plain_step(other, other_opt)
            t6 = P()
            if step >= WARMUP:
                for k, v in (("hooks", TimedWatch.hooks), ("begin", t1 - t0), ("after backward", t3 - t2),
                             ("after step", t5 - t4), ("plain step", t6 - t5)):
                    parts[k].append(v * 1000)
                parts["own"].append(1000 * (TimedWatch.hooks + (t1 - t0) + (t3 - t2) + (t5 - t4)))
    return {k: mean_but_slowest(v) for k, v in parts.items()}


STEADY_MALLOC = {"MALLOC_MMAP_THRESHOLD_": "4294967295", "MALLOC_TRIM_THRESHOLD_": "4294967295",
                 "MALLOC_TOP_PAD_": "268435456"}


def whole_steps(steps, checkpoints, out):
    """(watched ms, plain ms): whole steps, a Watch step of one SimpleCNN alternating
    with a plain step of a second, identical one (taps="leaves")."""
    (model, opt), (other, other_opt) = two_cnns()
    watched, plain = [], []
    with spikehunt.Watch(model, opt, out=out, taps="leaves", checkpoints=checkpoints) as w:
        for step in range(steps):
            t0 = CLOCK()
            w.step(F.cross_entropy(model(X), Y), X, Y)
            t1 = CLOCK()
            plain_step(other, other_opt)
            t2 = CLOCK()
            if step >= WARMUP:
                watched.append((t1 - t0) * 1000)
                plain.append((t2 - t1) * 1000)
    return mean_but_slowest(watched), mean_but_slowest(plain)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--interleaved", action="store_true",
                    help="instead: monitored and plain steps alternating in one fit, train and loop each")
    ap.add_argument("--clock", choices=["wall", "thread"], default="wall",
                    help="thread: the main thread's CPU time (what another process on the machine cannot inflate)")
    ap.add_argument("--whole-steps", action="store_true",
                    help="instead: whole Watch steps against plain steps of a second model, alternating, "
                         "under glibc settings that keep freed memory")
    ap.add_argument("--own-time", action="store_true",
                    help="instead: the time spent in the Watch's own code a step against a plain step")
    ap.add_argument("--steady-malloc", action="store_true",
                    help="run under the glibc settings that keep freed memory, as --whole-steps always does")
    a = ap.parse_args()
    if (a.whole_steps or a.steady_malloc) and any(os.environ.get(k) != v for k, v in STEADY_MALLOC.items()):
        os.execve(sys.executable, [sys.executable] + sys.argv, {**os.environ, **STEADY_MALLOC})
    malloc = ("glibc " + " ".join(f"{k}={v}" for k, v in STEADY_MALLOC.items())
              if all(os.environ.get(k) == v for k, v in STEADY_MALLOC.items()) else "glibc's default malloc settings")
    global CLOCK
    CLOCK = time.thread_time if a.clock == "thread" else time.perf_counter
    torch.set_num_threads(a.threads)
    warnings.filterwarnings("ignore")
    logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    transformers.logging.set_verbosity_error()
    if a.whole_steps:
        print(f"{a.threads} thread(s), torch {torch.__version__}, {a.rounds} runs of {a.steps} alternating steps "
              f"({WARMUP} warm-up), the motivating SimpleCNN, batch 64, taps=\"leaves\", {malloc}; "
              f"BLAS: {peer.blas_in_use()}")
        print(f"{'checkpoints':>12} {'watched ms':>11} {'plain ms':>9} {'ratio':>7}")
        for checkpoints in (True, False):
            for _ in range(a.rounds):
                on, off = quietly(lambda out: whole_steps(a.steps, checkpoints, out))
                print(f"{str(checkpoints):>12} {on:11.3f} {off:9.3f} {on / off:7.3f}")
        return
    if a.own_time:
        print(f"{a.threads} thread(s), torch {torch.__version__}, {a.rounds} runs of {a.steps} steps "
              f"({WARMUP} warm-up), the motivating SimpleCNN, batch 64, taps=\"leaves\", {malloc}; "
              f"BLAS: {peer.blas_in_use()}")
        print(f"{'checkpoints':>12} {'hooks':>7} {'begin':>7} {'backward':>9} {'step':>7} {'own ms':>7} "
              f"{'plain ms':>9} {'1 + own/plain':>14}")
        for checkpoints in (True, False):
            for _ in range(a.rounds):
                m = quietly(lambda out: own_time(a.steps, checkpoints, out))
                print(f"{str(checkpoints):>12} {m['hooks']:7.3f} {m['begin']:7.3f} {m['after backward']:9.3f} "
                      f"{m['after step']:7.3f} {m['own']:7.3f} {m['plain step']:9.2f} "
                      f"{1 + m['own'] / m['plain step']:14.3f}")
        return
    if a.interleaved:
        print(f"{a.threads} thread(s), torch {torch.__version__}, pytorch-lightning {pl.__version__}, transformers "
              f"{transformers.__version__}, {a.rounds} rounds of {a.steps} alternating steps, {a.clock} clock, "
              f"{malloc}; BLAS: {peer.blas_in_use()}")
        print(f"{'':26} {'checkpoints':>12} {'watched ms':>11} {'plain ms':>9} {'ratio':>7}")
        for checkpoints in (True, False):
            ratios = {}
            for _ in range(a.rounds):
                for name, (on, off) in quietly(lambda out: interleaved(a.steps, checkpoints, out)).items():
                    ratios.setdefault(name, []).append((on, off))
            for name, pairs in ratios.items():
                on = statistics.median(p[0] for p in pairs)
                off = statistics.median(p[1] for p in pairs)
                ratio = statistics.median(p[0] / p[1] for p in pairs)
                print(f"{name:26} {str(checkpoints):>12} {on:11.2f} {off:9.2f} {ratio:7.3f}")
        return
    rows = {
        "lightning plain": (lambda o: lightning(None, a.steps, o), "lightning plain"),
        "lightning SpikeDetection": (lambda o: lightning(lambda d: pl.callbacks.SpikeDetection(
            exclude_batches_path=os.path.join(d, "skip.json")), a.steps, o), "lightning plain"),
        "lightning spikehunt": (lambda o: lightning(lambda d: spikehunt.lightning.Monitor(
            out=d, taps="leaves"), a.steps, o), "lightning plain"),
        "lightning spikehunt, no ckpt": (lambda o: lightning(lambda d: spikehunt.lightning.Monitor(
            out=d, taps="leaves", checkpoints=False), a.steps, o), "lightning plain"),
        "hf plain": (lambda o: hf(None, a.steps, o), "hf plain"),
        "hf spikehunt": (lambda o: hf(lambda d: spikehunt.hf.Monitor(out=d, taps="leaves"), a.steps, o), "hf plain"),
        "hf spikehunt, no ckpt": (lambda o: hf(lambda d: spikehunt.hf.Monitor(
            out=d, taps="leaves", checkpoints=False), a.steps, o), "hf plain"),
        "torch plain": (lambda o: loop(False, a.steps, o, True), "torch plain"),
        "torch watch": (lambda o: loop(True, a.steps, o, True), "torch plain"),
        "torch watch, no ckpt": (lambda o: loop(True, a.steps, o, False), "torch plain"),
    }
    times = {k: [] for k in rows}
    for _ in range(a.rounds):
        for name, (f, _) in rows.items():
            times[name].append(quietly(f))
    print(f"{a.threads} thread(s), torch {torch.__version__}, pytorch-lightning {pl.__version__}, transformers "
          f"{transformers.__version__}, {a.rounds} rounds of {a.steps} steps ({WARMUP} warm-up), {a.clock} clock, "
          f"{malloc}; BLAS: {peer.blas_in_use()}")
    print(f"{'':30} {'ms/step':>9} {'/ plain':>9}")
    for name, (_, base) in rows.items():
        m = statistics.median(times[name])
        print(f"{name:30} {m:9.2f} {m / statistics.median(times[base]):9.3f}")


if __name__ == "__main__":
    main()
