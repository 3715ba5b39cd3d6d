"""examples/python/ as a user runs them, and the package as `cmake --install`
puts it under a prefix for the interpreter it was built for."""
import glob
import os
import subprocess
import sys

from conftest import CONFIG, SOURCE, TINY, read_json, read_jsonl, run_folder, spikehunt

CNN = "examples/python/simple_cnn.py"
CNN_CONFIG = "examples/python/simple_cnn.json"


def test_the_motivating_case_in_pytorch_runs_on_fashion_mnist_in_its_protocol_and_replays(tmp_path):
    for order, first in (("[0,1]", "domain A"), ("[1,0]", "domain B")):
        out = tmp_path / first.replace(" ", "_")
        rc, text, err = spikehunt("run", "--config", CNN_CONFIG, "--set", "max_batches_per_epoch=3",
                                  "--set", f"protocol.task_order={order}", "--out", str(out), script=CNN)
        assert rc == 0, text + err
        folder = run_folder(out)
        trace = read_jsonl(os.path.join(folder, "trace.jsonl"))
        assert len(trace) == 9  # three phases of three batches
        assert [r["phase"] for r in trace[::3]] == [first, "domain B" if first == "domain A" else "domain A", "all"]
        assert set(trace[0]["activations"]) == {"conv1", "conv2_act", "fc1_act", "fc2"}  # hooks and spikehunt.tap
        # The first phase's batches hold only its classes.
        classes = [c for c, n in enumerate(trace[0]["label_histogram"]) if n]
        assert set(classes) <= (set(range(5)) if first == "domain A" else set(range(5, 10))), classes
    rc, text, err = spikehunt("replay", os.path.join(folder, "repro.json"), script=CNN)
    assert rc == 0 and "reproduced" in text, text + err


def test_the_installed_package_runs_a_scenario_without_the_build_tree(tmp_path):
    build = os.environ.get("SPIKEHUNT_BUILD", os.path.join(SOURCE, "build"))
    prefix = tmp_path / "prefix"
    subprocess.run(["cmake", "--install", build, "--prefix", str(prefix)], check=True, capture_output=True)
    packages = glob.glob(str(prefix / "lib" / "python3*" / "site-packages"))
    assert len(packages) == 1, os.listdir(prefix / "lib")
    assert sorted(os.listdir(os.path.join(packages[0], "spikehunt")))[0:2] == ["__init__.py", "__main__.py"]
    env = {"PYTHONPATH": packages[0]}
    rc, out, err = spikehunt("run", "--config", CONFIG, "--out", str(tmp_path / "run"), env=env)
    assert rc == 0, out + err
    p = subprocess.run([sys.executable, "-c", "import spikehunt; print(spikehunt.__file__)"],
                       env=dict(os.environ, **env), capture_output=True, text=True, cwd=str(tmp_path))
    assert p.stdout.startswith(packages[0]), p.stdout + p.stderr


def test_a_pytorch_gpt_on_real_text_under_lr_sensitivity(tmp_path):
    rc, text, err = spikehunt("lr-sensitivity", "--config", "examples/python/gpt.json", "--set", "max_batches_per_epoch=6",
                              "--set", "schedule.warmup_steps=2", "--lrs", "1e-3,3e-1", "--heldout", "64",
                              "--out", str(tmp_path), script="examples/python/gpt.py")
    assert rc == 0, text + err
    points = read_json(os.path.join(tmp_path, "lr_sensitivity.json"))["variants"][0]["points"]
    low, high = sorted(points, key=lambda p: p["lr"])
    assert low["outcome"] == "healthy" and low["final_loss"] < low["init_loss"]  # it learns at 1e-3
    assert high["diverged"]  # and not at 0.3
    # The tapped attention logits (spikehunt.tap("block0_attn_logits", ...)) are read as the C++ GPT's are.
    assert 0 < low["max_attention_logit"] < high["max_attention_logit"]


LIT_CNN = "examples/python/lightning_cnn.py"
HF_GPT2 = "examples/python/hf_gpt2.py"


def test_the_motivating_case_as_a_lightning_module_runs_its_domains_in_order_and_replays(tmp_path):
    rc, text, err = spikehunt("run", "--config", "examples/python/lightning_cnn.json", "--set",
                              "max_batches_per_epoch=3", "--set", 'params.order="BA"', "--out", str(tmp_path),
                              script=LIT_CNN)
    assert rc == 0, text + err
    trace = read_jsonl(os.path.join(run_folder(tmp_path), "trace.jsonl"))
    assert [r["epoch"] for r in trace] == [0] * 3 + [1] * 3 + [2] * 3
    seen = [{c for c, n in enumerate(r["label_histogram"]) if n} for r in trace]
    assert set().union(*seen[:3]) <= set(range(5, 10)) and set().union(*seen[3:6]) <= set(range(5))  # B, then A
    rc, text, err = spikehunt("replay", os.path.join(run_folder(tmp_path), "repro.json"), script=LIT_CNN)
    assert rc == 0 and "reproduced" in text, text + err


def test_the_lightning_example_fits_with_the_callback(tmp_path):
    rc, text, err = spikehunt("fit", "--batches", "3", "--out", str(tmp_path), script=LIT_CNN)
    assert rc == 0, text + err
    trace = read_jsonl(os.path.join(run_folder(tmp_path), "trace.jsonl"))
    assert len(trace) == 9 and set(trace[0]["activations"]) == {"conv1", "conv2", "fc1", "fc2"}


def test_the_hugging_face_example_trains_under_run_and_under_the_callback(tmp_path):
    rc, text, err = spikehunt("run", "--config", "examples/python/hf_gpt2.json", "--set", "max_batches_per_epoch=5",
                              "--out", str(tmp_path / "run"), script=HF_GPT2)
    assert rc == 0, text + err
    trace = read_jsonl(os.path.join(run_folder(tmp_path / "run"), "trace.jsonl"))
    assert len(trace) == 200 and trace[-1]["loss"] < trace[0]["loss"] - 1  # max_steps 200 over epochs of 5 batches
    rc, text, err = spikehunt("train", "--steps", "5", "--out", str(tmp_path / "train"), script=HF_GPT2)
    assert rc == 0, text + err
    assert len(read_jsonl(os.path.join(run_folder(tmp_path / "train"), "trace.jsonl"))) == 5
