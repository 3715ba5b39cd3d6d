"""A PyTorch 2.x user's decoder (examples/python/llama.py: nn.RMSNorm, rotary
embeddings, F.scaled_dot_product_attention, SwiGLU, fused or foreach AdamW,
bf16 torch.autocast in its forward) under run, guard and torch.compile. Its
sweep with shrink and replay, and doctor, run from the pip-installed package
(tests/pip_install.sh)."""
import json
import os

import torch

from conftest import read_json, read_jsonl, run_folder, spikehunt

LLAMA = "examples/python/llama.py"
CONFIG = "examples/python/llama.json"
# Small enough for seconds a burst on 2 cores.
SMALL = ["--set", "model.gpt.width=32", "--set", "model.gpt.layers=1", "--set", "batch_size=4",
         "--set", "max_batches_per_epoch=6", "--set", "schedule.warmup_steps=2"]


def run(tmp_path, name, *sets):
    out = tmp_path / name
    args = ["run", "--config", CONFIG, *SMALL, "--no-checkpoints", "--out", str(out)]
    for s in sets:
        args += ["--set", s]
    rc, text, err = spikehunt(*args, script=LLAMA)
    folder = run_folder(out)
    return rc, text + err, read_json(os.path.join(folder, "verdict.json")), read_jsonl(
        os.path.join(folder, "trace.jsonl"))


def test_torch_2x_is_what_spikehunt_runs_on():
    assert int(torch.__version__.split(".")[0]) >= 2
    assert hasattr(torch.nn, "RMSNorm") and hasattr(torch.nn.functional, "scaled_dot_product_attention")


def test_a_modern_decoder_trains_under_run_and_the_monitor_reads_its_fused_adamw_and_taps(tmp_path):
    rc, text, verdict, trace = run(tmp_path, "a")
    assert rc == 0, text
    assert verdict["outcome"] == "healthy" and len(trace) == 6
    assert "LibTorch 2." in text
    # The forward hooks (blocks.0.mlp, norm_f) and the tap inside attention (SDPA hides its logits).
    assert set(trace[0]["activations"]) == {"blocks.0.mlp", "norm_f", "block0_qk_bound"}, trace[0]["activations"]
    # AdamW's moments, read from the fused optimizer's state, are in every step's record.
    assert all(r["state_max"] > 0 for r in trace[1:]), [r["state_max"] for r in trace]
    assert trace[-1]["loss"] < trace[0]["loss"]  # it learns
    # bit for bit again, fused AdamW and bf16 autocast included
    rc, text2, verdict2, trace2 = run(tmp_path, "b")
    assert verdict2["hash_chain"] == verdict["hash_chain"]
    for x, y in zip(trace, trace2):
        x.pop("step_ms"), y.pop("step_ms")
        assert x == y
    # foreach AdamW and fp32 train the same model the same way to within bf16's error, not bit for bit.
    rc, text3, verdict3, trace3 = run(tmp_path, "c", "params.adamw_kernel=foreach", "params.autocast_bf16=false")
    assert rc == 0 and verdict3["outcome"] == "healthy", text3
    assert abs(trace3[0]["loss"] - trace[0]["loss"]) < 0.05 * trace[0]["loss"]


def test_a_compiled_model_gets_the_eager_verdict_and_onset(tmp_path):
    # AdamW at lr 10 breaks the model within a few steps: eager and torch.compile must say the same.
    rc, text, eager, _ = run(tmp_path, "eager", "optimizer.lr=10", "params.autocast_bf16=false")
    assert rc == 1 and eager["outcome"] != "healthy", text
    rc, text, compiled, trace = run(tmp_path, "compiled", "optimizer.lr=10", "params.autocast_bf16=false",
                                    "params.compile=true")
    assert rc == 1, text
    assert (compiled["outcome"], compiled["onset_step"]) == (eager["outcome"], eager["onset_step"])
    # The taps still report through the compiled graph (Dynamo runs them eagerly, as graph breaks).
    assert "block0_qk_bound" in trace[0]["activations"]
    assert "Dynamo does not know how to trace" not in text


def test_guard_records_and_checks_the_decoder(tmp_path):
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps({"configs": [{"name": "llama", "config": os.path.abspath(CONFIG),
                                              "set": [s for s in SMALL if s != "--set"]}]}))
    baseline = tmp_path / "baseline.json"
    rc, text, err = spikehunt("guard", "record", "--suite", str(suite), "--out", str(baseline), script=LLAMA)
    assert rc == 0, text + err
    rc, text, err = spikehunt("guard", "check", "--suite", str(suite), "--baseline", str(baseline), script=LLAMA)
    assert rc == 0 and "no regression" in text, text + err
    rc, text, err = spikehunt("guard", "check", "--suite", str(suite), "--baseline", str(baseline),
                              "--set", "optimizer.lr=10", script=LLAMA)
    assert rc == 1 and "REGRESSION" in text, text + err
