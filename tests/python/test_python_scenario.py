"""A PyTorch scenario (tests/python/tiny.py) under run and replay, as a user
runs it (`python3 tiny.py VERB`): the monitor reads the Python model, its
torch.optim state and its forward hooks; runs are bit-identical; Python
errors are diagnoses; contract errors are exit 2."""
import os
import sys

import pytest

from conftest import CONFIG, SOURCE, TINY, read_json, read_jsonl, run_folder, spikehunt

# lr 8 on 256 hidden units: extreme from the first steps, non-finite at fc2's output later.
EXPLODES = ["--set", "optimizer.lr=8", "--set", "params.width=256", "--set", "max_batches_per_epoch=40"]


def test_a_run_is_bit_identical_when_run_again_and_the_hooks_tap_every_leaf(tmp_path):
    traces = []
    for i in range(2):
        rc, out, err = spikehunt("run", "--config", CONFIG, "--out", str(tmp_path / str(i)))
        assert rc == 0, out + err
        folder = run_folder(tmp_path / str(i))
        assert read_json(os.path.join(folder, "verdict.json"))["outcome"] == "healthy"
        traces.append(read_jsonl(os.path.join(folder, "trace.jsonl")))
    a, b = traces
    assert len(a) == 12
    for x, y in zip(a, b):
        x.pop("step_ms"), y.pop("step_ms")  # wall time, the one field that may differ
        assert x == y  # every statistic of the step, losses and hashes included
    assert set(a[0]["activations"]) == {"fc1", "act", "fc2"}  # taps = "leaves", by module name
    assert [layer["name"] for layer in a[0]["layers"]] == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    assert a[-1]["loss"] < a[0]["loss"] / 3  # it trains: the SGD steps reach the Python model
    # SGD's momentum buffers, read from the Python optimizer's state.
    assert all(layer["state_max"] > 0 for layer in a[1]["layers"])


def test_another_seed_is_another_run():
    import spikehunt as sh
    sys.path.insert(0, os.path.join(SOURCE, "tests", "python"))
    import tiny  # noqa: F401  (registers "tiny")
    base = ["scenario=\"tiny\"", "max_batches_per_epoch=8", "threads=1"]
    a = sh.run_config(base + ["seed=1"])
    b = sh.run_config(base + ["seed=1"])
    c = sh.run_config(base + ["seed=2"])
    assert a["losses"] == b["losses"] and a["input_hashes"] == b["input_hashes"]
    assert a["input_hashes"] != c["input_hashes"]  # the data order and Python's random follow the seed
    with pytest.raises(sh.InputError, match="optimizer.lr"):
        sh.run_config(base + ["optimizer.lr=-1"])


def test_a_failure_names_the_hooked_module_and_replays_bit_for_bit_also_from_its_checkpoint(tmp_path):
    rc, out, err = spikehunt("run", "--config", CONFIG, *EXPLODES, "--out", str(tmp_path))
    assert rc == 1, out + err
    folder = run_folder(tmp_path)
    v = read_json(os.path.join(folder, "verdict.json"))
    assert v["outcome"] == "non_finite"
    assert v["fault"]["tensor"] == "fc2" and v["fault"]["stage"] == "forward", v["fault"]
    assert os.path.exists(os.path.join(folder, "last_healthy.safetensors"))
    assert f"replay it: {sys.executable} tests/python/tiny.py replay" in out  # the command to paste back
    repro = os.path.join(folder, "repro.json")
    assert read_json(repro)["scenario_class"] == "Tiny"
    # The code that ran, file by file: the extension and the script (the interpreter first).
    code = [os.path.basename(f["path"]) for f in read_json(repro)["code"]]
    assert "tiny.py" in code and any(c.startswith("_core") for c in code), code
    for extra in ([], ["--from-checkpoint"]):
        rc, out, err = spikehunt("replay", repro, *extra)
        assert rc == 0, out + err
        assert "reproduced" in out and "the code changed" not in out, out


def test_a_replay_from_a_checkpoint_mid_run_matches(tmp_path):
    # lr 4 (without the parameter-jump rule, which a tiny model's first steps trip): healthy
    # first steps, extreme from step 2, non-finite at step 32; the checkpoint is the onset's.
    rc, out, err = spikehunt("run", "--config", CONFIG, "--set", "optimizer.lr=4", "--set", "health.param_jump_limit=1000",
                             "--set", "max_batches_per_epoch=60", "--out", str(tmp_path))
    folder = run_folder(tmp_path)
    v = read_json(os.path.join(folder, "verdict.json"))
    assert v["outcome"] == "non_finite", out + err
    assert v["onset_step"] > 0, v
    rc, out, err = spikehunt("replay", os.path.join(folder, "repro.json"), "--from-checkpoint")
    assert rc == 0, out + err
    assert f"from step {v['onset_step']}" in out and "reproduced" in out


def test_an_exception_in_the_users_code_is_a_crash_naming_the_stage_and_the_users_line(tmp_path):
    rc, out, err = spikehunt("run", "--config", CONFIG, "--set", "params.bug=\"raise_in_loss\"", "--out", str(tmp_path))
    assert rc == 1, out + err
    v = read_json(os.path.join(run_folder(tmp_path), "verdict.json"))
    assert v["outcome"] == "crashed"
    assert v["stage"] == "loss" and v["steps_run"] == 2
    line = next(i for i, text in enumerate(open(os.path.join(SOURCE, TINY)), 1) if "raise ValueError" in text)
    assert v["message"] == f"ValueError: no loss for step 3 ({TINY}:{line} in loss)"
    assert "Traceback" not in out and "Traceback" not in err


def test_a_warning_the_users_loss_raises_every_step_is_shown_once_with_its_count(tmp_path):
    rc, out, err = spikehunt("run", "--config", CONFIG, "--set", "params.bug=\"broadcast_loss\"", "--out", str(tmp_path))
    assert rc == 0, out + err
    v = read_json(os.path.join(run_folder(tmp_path), "verdict.json"))
    assert v["outcome"] == "healthy" and v["steps_run"] == 12
    [w] = v["warnings"]
    assert w["message"].startswith("Using a target size (torch.Size([32])) that is different to the input size") \
        and w["count"] == 12, w
    shown = out + err
    assert shown.count("Using a target size") == 1, shown
    assert "12x Using a target size" in out, out


def test_a_wrong_return_type_is_bad_input_naming_the_file_the_method_and_what_it_must_return(tmp_path):
    rc, out, err = spikehunt("run", "--config", CONFIG, "--set", "params.bug=\"forward_returns_list\"",
                             "--out", str(tmp_path))
    assert rc == 2, out + err
    assert f"error: {TINY}: Tiny.forward() returned a list: it must return a torch.Tensor" in err


def test_a_class_missing_a_method_is_bad_input_before_anything_runs():
    rc, out, err = spikehunt("run", "--config", CONFIG, env={"TINY_BROKEN": "1"})
    assert rc == 2, out + err
    assert f"error: {TINY}: NoData.next_batch() is missing" in err
    assert f"error: {TINY}: NoConfig.__init__(self) does not take the config" in err
    assert f"error: {TINY}: register('dict_params', ...): params is a dict, not a list of declared params: " \
        "declare each with spikehunt.number()" in err, err
    assert "TypeError" not in err
    assert out == ""


def test_an_empty_optimizer_list_is_bad_input_and_a_loss_per_sample_a_crash_saying_to_reduce_it(tmp_path):
    rc, out, err = spikehunt("run", "--config", CONFIG, "--set", "params.bug=\"no_optimizers\"",
                             "--out", str(tmp_path / "a"))
    assert rc == 2, out + err
    assert f"error: {TINY}: Tiny.optimizers() returned an empty list: it must return at least one " \
        "torch.optim.Optimizer" in err, err
    rc, out, err = spikehunt("run", "--config", CONFIG, "--set", "params.bug=\"loss_per_sample\"",
                             "--out", str(tmp_path / "b"))
    assert rc == 1, out + err
    v = read_json(os.path.join(run_folder(tmp_path / "b"), "verdict.json"))
    assert v["outcome"] == "crashed" and v["stage"] == "loss", v
    assert "the loss is 32 numbers, not one: reduce it" in out, out


def test_a_model_method_that_builds_a_new_module_each_call_is_bad_input(tmp_path):
    rc, out, err = spikehunt("run", "--config", CONFIG, "--set", "scenario=\"new_model_each_call\"", "--out", str(tmp_path))
    assert rc == 2, out + err
    assert f"error: {TINY}: NewModelEachCall.model() returned another module on its second call" in err


def test_numpy_integers_and_attributes_are_accepted(tmp_path):
    rc, out, err = spikehunt("run", "--config", CONFIG, "--set", "scenario=\"numpy_and_attributes\"", "--out", str(tmp_path))
    assert rc == 0, out + err


def test_a_module_that_fails_to_import_is_bad_input_naming_the_file_and_line(tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("import spikehunt\nimport no_such_module_here\n")
    rc, out, err = spikehunt("--module", str(broken), "run", script=["-m", "spikehunt"])
    assert rc == 2, out + err
    assert err.startswith("error: ") and "broken.py:2: cannot import it: ModuleNotFoundError" in err and "No module named 'no_such_module_here'" in err
    assert "Traceback" not in err


def test_python_m_spikehunt_runs_the_scenarios_a_module_registers(tmp_path):
    rc, out, err = spikehunt("--module", TINY, "run", "--config", CONFIG, "--out", str(tmp_path),
                             script=["-m", "spikehunt"])
    assert rc == 0, out + err
    assert f"replay it: {sys.executable} -m spikehunt --module {TINY} replay" in out


def test_declared_params_are_checked_like_cpp_ones(tmp_path):
    rc, out, err = spikehunt("run", "--config", CONFIG, "--set", "params.widht=3")
    assert rc == 2
    assert "params.widht" in err and "width" in err  # the unknown name, and did-you-mean
    rc, out, err = spikehunt("run", "--config", CONFIG, "--print-config")
    assert rc == 0 and '"width": 16' in out


def test_the_doctor_names_a_python_exception_and_shows_its_traceback_only_with_verbose():
    sets = ["--config", CONFIG, "--set", "params.bug=\"raise_in_loss\""]
    rc, out, err = spikehunt("doctor", *sets)
    assert rc == 1, out + err
    assert "most likely cause: the training code throws in the loss stage: ValueError: no loss for step" in out
    assert "Traceback" not in out
    rc, out, err = spikehunt("doctor", *sets, "--verbose")
    assert rc == 1 and "Traceback (most recent call last):" in out and 'raise ValueError(f"no loss' in out
