"""Data-parallel training under spikehunt.Watch: two processes (gloo on the CPU,
DistributedDataParallel averaging the gradients) record the global step, the trace
one process writes for the same global batch, and a non-finite tensor names its rank.
Each test starts its own ranks (tests/python/ddp_steps.py); ~10 s in all."""
import math
import os
import subprocess
import sys

from conftest import SOURCE, read_json, read_jsonl

import pytest
import torch.distributed

STEPS = os.path.join(SOURCE, "tests", "python", "ddp_steps.py")

if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("this torch has no torch.distributed with gloo: the data-parallel tests cannot start their ranks",
                allow_module_level=True)


def ranks(tmp_path, world, name, *extra):
    """Runs WORLD ranks of ddp_steps.py at once; rank 0's folder."""
    out, init = tmp_path / name, tmp_path / f"{name}.init"
    procs = [subprocess.Popen([sys.executable, STEPS, str(r), str(world), str(init), str(out), *extra],
                              cwd=SOURCE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(world)]
    try:
        results = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            p.kill()
    for r, (p, (stdout, err)) in enumerate(zip(procs, results)):
        assert p.returncode == 0, f"rank {r}: {stdout}{err}"
    folder = results[0][0].strip().splitlines()[-1]
    assert os.listdir(out) == [os.path.basename(folder)]  # rank 1 wrote nothing
    return folder


def close(a, b, rel):
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-12)


def test_two_ranks_record_the_trace_one_process_records_for_the_global_batch(tmp_path):
    one = read_jsonl(os.path.join(ranks(tmp_path, 1, "one"), "trace.jsonl"))
    two = read_jsonl(os.path.join(ranks(tmp_path, 2, "two"), "trace.jsonl"))
    assert len(one) == len(two) == 6
    for x, y in zip(one, two):
        assert x["health"] == y["health"] == "finite"
        assert x["label_histogram"] == y["label_histogram"] and sum(y["label_histogram"]) == 16
        # maxima over the ranks are the global batch's maxima (the same sample's, exactly or nearly:
        # a shard of 8 rows may take another matmul blocking than 16 rows)
        assert close(x["input_max"], y["input_max"], 0)
        assert list(x["activations"]) == list(y["activations"]) == ["act", "fc1", "fc2"]
        for name, m in x["activations"].items():
            assert close(m, y["activations"][name], 1e-5), (x["step"], name, m, y["activations"][name])
        # the loss: the mean of the ranks' means; gradients: DDP's average. Equal up to reduction order.
        assert close(x["loss"], y["loss"], 1e-6), (x["step"], x["loss"], y["loss"])
        assert close(x["grad_norm"], y["grad_norm"], 1e-5), (x["step"], x["grad_norm"], y["grad_norm"])
        assert close(x["param_norm_after"], y["param_norm_after"], 1e-6)
        for lx, ly in zip(x["layers"], y["layers"]):
            assert lx["name"] == ly["name"] and close(lx["grad_norm"], ly["grad_norm"], 1e-5), (lx, ly)
    # the hashes cover every rank's batch: a hash of the ranks' hashes, so not one process's
    assert one[0]["input_hash"] != two[0]["input_hash"]


def test_two_ranks_run_twice_give_the_same_hashes_and_statistics_bit_for_bit(tmp_path):
    a = read_jsonl(os.path.join(ranks(tmp_path, 2, "a"), "trace.jsonl"))
    b = read_jsonl(os.path.join(ranks(tmp_path, 2, "b"), "trace.jsonl"))
    for x, y in zip(a, b):
        x.pop("step_ms"), y.pop("step_ms")
        assert x == y


def test_a_nan_on_rank_1_is_named_as_rank_1s(tmp_path):
    folder = ranks(tmp_path, 2, "nan", "--nan-rank", "1", "--nan-step", "3")
    verdict = read_json(os.path.join(folder, "verdict.json"))
    assert verdict["outcome"] == "non_finite" and verdict["failure_step"] == 3
    fault = verdict["fault"]
    assert (fault["tensor"], fault["stage"], fault["rank"], fault["nan"], fault["numel"]) == \
        ("input", "forward", 1, 1, 8 * 20), fault
    trace = read_jsonl(os.path.join(folder, "trace.jsonl"))
    assert [r["health"] for r in trace] == ["finite"] * 3 + ["non_finite"]
    # the same NaN on rank 0 is rank 0's
    fault0 = read_json(os.path.join(ranks(tmp_path, 2, "nan0", "--nan-rank", "0", "--nan-step", "3"),
                                    "verdict.json"))["fault"]
    assert fault0["rank"] == 0 and fault0["tensor"] == "input"


LIGHTNING = os.path.join(SOURCE, "tests", "python", "ddp_lightning.py")


def lightning_fit(out, devices, *extra):
    """A Lightning fit over DEVICES CPU processes (Lightning starts them) under the Monitor: its folder."""
    p = subprocess.run([sys.executable, LIGHTNING, str(devices), str(out), *extra], cwd=SOURCE,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    folder = p.stdout.strip().splitlines()[-1]
    assert os.listdir(out) == [os.path.basename(folder)]  # rank 1 wrote nothing
    return folder


def test_a_lightning_ddp_fit_under_the_callback_records_the_global_steps_and_names_rank_1s_nan(tmp_path):
    two = lightning_fit(tmp_path / "two", 2, "--nan-rank", "1", "--nan-step", "4")
    one = read_jsonl(os.path.join(lightning_fit(tmp_path / "one", 1), "trace.jsonl"))
    trace = read_jsonl(os.path.join(two, "trace.jsonl"))
    assert [r["health"] for r in trace] == ["finite"] * 4 + ["non_finite"]
    for x, y in zip(one[:4], trace[:4]):  # the same global batches: Lightning's DistributedSampler's
        assert x["label_histogram"] == y["label_histogram"]
        assert close(x["loss"], y["loss"], 1e-6) and close(x["grad_norm"], y["grad_norm"], 1e-5), (x, y)
        for name, m in x["activations"].items():
            assert close(m, y["activations"][name], 1e-5)
    fault = read_json(os.path.join(two, "verdict.json"))["fault"]
    assert (fault["tensor"], fault["stage"], fault["rank"], fault["nan"]) == ("net.fc1", "forward", 1, 32), fault


# ---- a Python scenario over two processes: `run` and `replay` with world_size 2 ----

def test_a_python_scenario_runs_over_two_processes_as_one_process_on_the_global_batch_and_replays(tmp_path):
    from conftest import CONFIG, run_folder, spikehunt as cli
    rc, out, err = cli("run", "--config", CONFIG, "--set", "world_size=2", "--out", str(tmp_path / "two"))
    assert rc == 0, out + err
    two = run_folder(tmp_path / "two")
    rc, out, err = cli("run", "--config", CONFIG, "--out", str(tmp_path / "one"))
    assert rc == 0, out + err
    one = read_jsonl(os.path.join(run_folder(tmp_path / "one"), "trace.jsonl"))
    trace = read_jsonl(os.path.join(two, "trace.jsonl"))
    assert len(one) == len(trace) == 12
    for x, y in zip(one, trace):
        assert x["label_histogram"] == y["label_histogram"]
        assert close(x["loss"], y["loss"], 1e-6) and close(x["grad_norm"], y["grad_norm"], 1e-5), (x, y)
    assert read_json(os.path.join(two, "config.json"))["world_size"] == 2
    rc, out, err = cli("replay", os.path.join(two, "repro.json"))
    assert rc == 0 and "reproduced: healthy" in out, out + err
