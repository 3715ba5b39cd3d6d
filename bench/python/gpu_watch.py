#!/usr/bin/env python3
"""The Python half of the GPU check: spikehunt.Watch and spikehunt.lightning.Monitor
on cuda:0, as users run them in their own loops. scripts/gpu_check.sh runs it on a
lent GPU machine after building the extension there; exit 77 without a GPU.

For two models, the motivating SimpleCNN (batch 64, SGD lr 0.05 momentum 0.9) and
llama.py's decoder (4 layers x 512, bf16 autocast, SDPA, fused AdamW, 16 x 256
tokens):
  syncs    host-device synchronizations a step, plain loop and under the Watch
           (checkpoints on and off), counted by torch.profiler as the CUDA runtime's
           synchronizing calls (cudaStreamSynchronize, cudaDeviceSynchronize,
           cudaEventSynchronize, synchronous cudaMemcpy) over STEPS steps; the
           promise: at most one more a step than the plain loop
  ms/step  plain and watched, rounds interleaved, each step ended by a synchronize
and then, on the CNN:
  fault    a NaN written into fc1.weight before step 5: the Watch's record of step 5
           is non-finite and names fc1 (its forward) as the first non-finite tensor
  repeat   two watched runs with deterministic algorithms on: bit-identical losses,
           trace statistics and final parameters
  hashes   a batch on the device hashed, counted and chained as the same batch on the CPU
  fused    a failure under fused AdamW (step counts on the device): last_healthy.safetensors
           holds every parameter's step count
  lightning  a Trainer(accelerator="gpu") fit of 20 steps under
           spikehunt.lightning.Monitor: 20 healthy steps traced; its syncs a step
           against the same fit without the callback

Prints one JSON object; exits 1 when a promise fails (the failures listed).

Usage: PYTHONPATH=<dir holding spikehunt> python3 bench/python/gpu_watch.py [--steps 10] [--rounds 5]
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # before CUDA starts: deterministic cuBLAS

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(os.path.dirname(here))
sys.path.insert(0, os.path.join(root, "examples", "python"))
import spikehunt  # noqa: E402
import spikehunt.lightning  # noqa: E402,F401
from simple_cnn import SimpleCNN  # noqa: E402

DEV = "cuda"  # --device cpu: the same steps on the CPU, to try the script where no GPU is
SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy")


def count_syncs(fn):
    """The CUDA runtime's synchronizing calls fn() makes, read from torch.profiler."""
    if DEV == "cpu":
        fn()
        return 0, []
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()  # this one is subtracted below
    names = [e.name for e in prof.events() if e.name in SYNC_CALLS]
    return max(0, len(names) - 1), sorted(set(names))


class Model:
    """A model, its optimizer and a fixed batch on cuda:0: one training step, plain or watched."""

    def __init__(self, kind, seed=0):
        torch.manual_seed(seed)
        g = torch.Generator(device="cpu").manual_seed(seed + 1)
        self.kind = kind
        if kind == "cnn":
            self.net = SimpleCNN(0.01).to(DEV)
            self.opt = torch.optim.SGD(self.net.parameters(), lr=0.05, momentum=0.9)
            self.x = torch.rand(64, 1, 28, 28, generator=g).to(DEV)
            self.y = torch.randint(0, 10, (64,), generator=g).to(DEV)
            self.taps = ["conv1", "conv2", "fc1", "fc2"]
        else:
            from llama import Llama
            self.net = Llama(vocab=256, width=512, layers=4, heads=8, context=256, bf16=True).to(DEV)
            self.opt = torch.optim.AdamW(self.net.parameters(), lr=3e-4, fused=True)
            tokens = torch.randint(0, 256, (16, 257), generator=g).to(DEV)
            self.x, self.y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
            self.taps = "leaves"

    def loss(self):
        out = self.net(self.x)
        return F.cross_entropy(out.reshape(-1, out.shape[-1]).float(), self.y.reshape(-1))

    def plain(self):
        self.opt.zero_grad(set_to_none=True)
        self.loss().backward()
        self.opt.step()

    def watch(self, out, **options):
        return spikehunt.Watch(self.net, self.opt, out=out, taps=self.taps, num_classes=256 if self.kind != "cnn" else 10,
                               **options)


def sync():
    if DEV == "cuda":
        torch.cuda.synchronize()


def timed(step, steps):
    sync()
    start = time.perf_counter()
    for _ in range(steps):
        step()
        sync()
    return (time.perf_counter() - start) * 1000 / steps


def measure(kind, steps, rounds, failures):
    row = {"model": kind}
    m = Model(kind)
    for _ in range(3):
        m.plain()
    try:
        row["plain_syncs_per_step"] = count_syncs(lambda: [m.plain() for _ in range(steps)])[0] / steps
    except Exception as e:  # the profiler may not run on every machine: the timings still do
        failures.append(f"{kind}: syncs not counted: torch.profiler: {type(e).__name__}: {e}")
        row["plain_syncs_per_step"] = None
    with tempfile.TemporaryDirectory() as out:
        for checkpoints in (True, False) if row["plain_syncs_per_step"] is not None else ():
            with m.watch(out, checkpoints=checkpoints) as w:
                for _ in range(3):
                    w.step(m.loss(), m.x, m.y)
                n, calls = count_syncs(lambda: [w.step(m.loss(), m.x, m.y) for _ in range(steps)])
            key = "watch_syncs_per_step" + ("" if checkpoints else "_no_checkpoints")
            row[key] = n / steps
            row[key + "_calls"] = calls
            if row[key] > row["plain_syncs_per_step"] + 1:
                failures.append(f"{kind}: the watched step made {row[key]:g} syncs a step "
                                f"(checkpoints {checkpoints}), plain {row['plain_syncs_per_step']:g}: "
                                f"at most one more promised")
        times = {"plain": [], "watch": [], "watch_no_checkpoints": []}
        for _ in range(rounds):
            times["plain"].append(timed(m.plain, steps))
            for checkpoints, key in ((True, "watch"), (False, "watch_no_checkpoints")):
                with m.watch(out, checkpoints=checkpoints) as w:
                    w.step(m.loss(), m.x, m.y)  # the first step allocates the monitor's buffers
                    times[key].append(timed(lambda: w.step(m.loss(), m.x, m.y), steps))
    for key, values in times.items():
        row[key + "_ms"] = round(statistics.median(values), 3)
    row["watch/plain"] = round(row["watch_ms"] / row["plain_ms"], 3)
    row["watch_no_checkpoints/plain"] = round(row["watch_no_checkpoints_ms"] / row["plain_ms"], 3)
    return row


def fault(failures):
    m = Model("cnn")
    with tempfile.TemporaryDirectory() as out:
        with m.watch(out) as w:
            records = []
            for step in range(8):
                if step == 5:
                    with torch.no_grad():
                        m.net.fc1.weight[0, 0] = float("nan")
                records.append(w.step(m.loss(), m.x, m.y))
                if w.ended is not None:
                    break
    last = records[-1]
    row = {"fault_step": last["step"], "fault_health": last["health"], "fault": last.get("fault")}
    if last["step"] != 5 or last["health"] != "non_finite" or "fc1" not in json.dumps(last.get("fault")):
        failures.append(f"a NaN in fc1.weight before step 5 on cuda: the watch recorded {json.dumps(last)}")
    return row


def repeat(failures):
    torch.use_deterministic_algorithms(True)
    runs = []
    try:
        for _ in range(2):
            m = Model("cnn", seed=3)
            with tempfile.TemporaryDirectory() as out:
                with m.watch(out) as w:
                    losses = [w.step(m.loss(), m.x, m.y)["loss"] for _ in range(10)]
                path = w.path
                with open(os.path.join(path, "trace.jsonl")) as f:
                    trace = [{k: v for k, v in json.loads(line).items() if "time" not in k and "ms" not in k}
                             for line in f]
            params = torch.cat([p.detach().flatten() for p in m.net.parameters()]).cpu()
            runs.append((losses, trace, params))
    finally:
        torch.use_deterministic_algorithms(False)
    (l0, t0, p0), (l1, t1, p1) = runs
    same = l0 == l1 and t0 == t1 and torch.equal(p0.view(torch.int32), p1.view(torch.int32))
    if not same:
        failures.append("two watched CNN runs with deterministic algorithms on cuda differ "
                        f"(losses equal {l0 == l1}, traces equal {t0 == t1})")
    return {"repeat_bit_identical": same, "repeat_losses": l0[:3]}


def first_record(model, opt, x, y, out, num_classes, **options):
    """One watched step; the trace's first line."""
    with spikehunt.Watch(model, opt, out=out, num_classes=num_classes, **options) as w:
        w.step(F.cross_entropy(model(x), y), x, y)
    with open(os.path.join(w.path, "trace.jsonl")) as f:
        return json.loads(f.readline()), w.path


def hashes(failures):
    """A batch on the device is hashed as the same batch on the host: its bytes, one copy a step."""
    rows = {}
    for dev in (DEV, "cpu"):
        m = Model("cnn")
        x, y = m.x.to(dev), m.y.to(dev)
        with tempfile.TemporaryDirectory() as out:
            rows[dev], _ = first_record(m.net.to(dev), m.opt, x, y, out, 10)
    a, b = rows[DEV], rows["cpu"]
    same = all(a[k] == b[k] for k in ("input_hash", "label_hash", "label_histogram"))
    if not same:
        failures.append(f"a batch on {DEV} hashed as {a['input_hash']}/{a['label_hash']} {a['label_histogram']}, "
                        f"on the CPU as {b['input_hash']}/{b['label_hash']} {b['label_histogram']}")
    return {"hashes_equal_to_cpu": same, "input_hash": a["input_hash"]}


def fused_checkpoint(failures):
    """A failure under fused AdamW (its step counts are tensors on the device): the checkpoint
    holds each parameter's step count, read without a host sync a parameter."""
    from safetensors.torch import load_file
    m = Model("cnn")
    opt = torch.optim.AdamW(m.net.parameters(), lr=1e-3, fused=DEV == "cuda")
    with tempfile.TemporaryDirectory() as out:
        with spikehunt.Watch(m.net, opt, out=out, taps=m.taps) as w:
            for step in range(4):
                if step == 3:
                    with torch.no_grad():
                        m.net.fc1.weight[0, 0] = float("inf")
                w.step(m.loss(), m.x, m.y)
                if w.ended is not None:
                    break
        saved = load_file(os.path.join(w.path, "last_healthy.safetensors"))
    steps = {k: int(v) for k, v in saved.items() if k.endswith(".step")}
    ok = len(steps) == len(list(m.net.parameters())) and set(steps.values()) == {3}
    if not ok:
        failures.append(f"fused AdamW's step counts in last_healthy.safetensors: {steps} (want 3 for each parameter)")
    return {"fused_adamw_checkpoint_steps": sorted(set(steps.values())), "fused_adamw_step_tensors": len(steps)}


def lightning_fit(failures):
    try:
        import lightning.pytorch as pl
    except ImportError:
        import pytorch_lightning as pl

    class Cnn(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = SimpleCNN(0.01)

        def training_step(self, batch, index):
            x, y = batch
            return F.cross_entropy(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)

    g = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.rand(64 * 20, 1, 28, 28, generator=g),
                                          torch.randint(0, 10, (64 * 20,), generator=g))
    row = {}
    with tempfile.TemporaryDirectory() as out:
        for with_callback in (False, True):
            torch.manual_seed(0)
            callback = spikehunt.lightning.Monitor(out=out) if with_callback else None
            trainer = pl.Trainer(accelerator="gpu" if DEV == "cuda" else "cpu", devices=1, max_steps=20, logger=False,
                                 enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                                 callbacks=[callback] if callback else [])
            loader = torch.utils.data.DataLoader(data, batch_size=64)
            n, _ = count_syncs(lambda: trainer.fit(Cnn(), loader))
            row["lightning_syncs_per_step" + ("_callback" if with_callback else "")] = n / 20
        verdict = callback.watch.verdict() if callback.watch else {}
        with open(os.path.join(callback.path, "trace.jsonl")) as f:
            steps = [json.loads(line) for line in f]
    row["lightning_steps_traced"] = len(steps)
    row["lightning_outcome"] = verdict.get("outcome") or verdict.get("health")
    if len(steps) != 20 or any(s.get("health") != "finite" for s in steps):
        failures.append(f"the Lightning fit on the GPU traced {len(steps)} steps, "
                        f"health {sorted(set(str(s.get('health')) for s in steps))}")
    if row["lightning_syncs_per_step_callback"] > row["lightning_syncs_per_step"] + 1:
        failures.append(f"the Lightning callback added {row['lightning_syncs_per_step_callback'] - row['lightning_syncs_per_step']:g} "
                        "syncs a step: at most one promised")
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    a = ap.parse_args()
    global DEV
    DEV = a.device
    if DEV == "cuda" and not torch.cuda.is_available():
        print(json.dumps({"SKIPPED": "no CUDA device visible to torch " + torch.__version__}))
        return 77
    failures = []
    result = {"gpu": torch.cuda.get_device_name(0) if DEV == "cuda" else "none (--device cpu)", "torch": torch.__version__, "rows": []}
    for part in (lambda: measure("cnn", a.steps, a.rounds, failures),
                 lambda: measure("llama", a.steps, a.rounds, failures),
                 lambda: fault(failures), lambda: repeat(failures), lambda: hashes(failures),
                 lambda: fused_checkpoint(failures), lambda: lightning_fit(failures)):
        try:
            result["rows"].append(part())
            print(json.dumps(result["rows"][-1]), flush=True)
        except Exception as e:  # one part's breakage is a finding; the others still run
            failures.append(f"{type(e).__name__}: {e}")
            print(f"FAILED: {failures[-1]}", flush=True)
    result["failures"] = failures
    print(json.dumps(result, indent=1))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
