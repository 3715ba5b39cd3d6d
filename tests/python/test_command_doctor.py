"""`spikehunt doctor -- COMMAND`: the doctor on a plain PyTorch script, unmodified
(python/spikehunt/_capture.py, _command_doctor.py; docs/commands.md). The script
examples/commands/train_buggy.py knows nothing of spikehunt; --bug plants a classic bug."""
import json
import sys

import pytest

from conftest import read_jsonl, run_folder, spikehunt

BUGGY = ["examples/commands/train_buggy.py"]
SMALL = ["--steps", "40", "--overfit-steps", "300", "--heldout", "256"]


def doctor(out, *command, flags=SMALL, json_out=True):
    rc, stdout, err = spikehunt("doctor", "--out", str(out), *flags, *(["--json"] if json_out else []), "--",
                                sys.executable, *command, script=["-m", "spikehunt"])
    return rc, (json.loads(stdout) if json_out else stdout), err


def failed(report):
    return [s["name"] for s in report["signs"] if not s["passed"] and not s["skipped"]]


def test_a_healthy_script_passes_every_sign_twice_bit_for_bit_with_held_out_data_of_its_own(tmp_path):
    flags = ["--steps", "60", "--overfit-steps", "300", "--heldout", "600"]
    rc, report, err = doctor(tmp_path / "a", *BUGGY, "--clip", "5", flags=flags)
    assert rc == 0 and report["passed"], (failed(report), err[-2000:])
    assert report["config"]["grad_clip"] == 5, "the copies clip as the script does"
    captured = report["command"]
    assert captured["captured_steps"] == 60 and captured["heldout_samples"] == 600, captured
    # 4 batches of the stream after step 60 (128 samples), then the script's own validation set.
    assert "the script's own evaluation" in captured["heldout_from"], captured
    assert "epoch 1" not in err, "the script ends once the doctor's batches are captured"
    again = doctor(tmp_path / "b", *BUGGY, "--clip", "5", flags=flags)[1]
    assert [s["evidence"] for s in again["signs"]] == [s["evidence"] for s in report["signs"]]


@pytest.mark.parametrize("bug, sign", [
    ("double_softmax", "loss_output_mismatch"),
    ("raw_inputs", "input_scale"),  # non-finite by step 10: captured on to step 40 all the same
])
def test_the_doctors_top_cause_on_a_command_is_the_planted_bug(tmp_path, bug, sign):
    rc, report, err = doctor(tmp_path, *BUGGY, "--bug", bug)
    assert rc == 1, err[-2000:]
    assert report["most_likely_cause"]["sign"] == sign, (report["most_likely_cause"], failed(report))
    assert report["command"]["captured_steps"] == 40


def test_the_text_report_names_the_command_its_model_and_the_planted_bug(tmp_path):
    rc, out, err = doctor(tmp_path, *BUGGY, "--bug", "partial_optimizer", json_out=False)
    assert rc == 1, err[-2000:]
    assert "epoch 0" not in out, "the script's output stops when the batches are captured"
    assert f"spikehunt doctor: {sys.executable} examples/commands/train_buggy.py --bug partial_optimizer: Sequential" \
        in out, out[:2000]
    assert "captured   40 training step(s)" in out and "[optimizer_coverage]\n" in out, out[-3000:]


@pytest.mark.parametrize("command, reason", [
    (["examples/commands/train_gan.py"], "the code between them cannot be replayed"),
    (["examples/commands/train_mlp.py", "--accumulate", "2", "--amp"], "gradient accumulation"),
])
def test_training_the_hooks_cannot_replay_is_said_and_its_signs_read_through_the_hooks(tmp_path, command, reason):
    """A GAN (the generator's backward reaches the discriminator's gradients after its step) and accumulation
    under a GradScaler (the gradient applied is backward's over the scale) are correct programs: every sign
    the hooks read passes, and the doctor's other signs are named as needing a Scenario."""
    rc, report, err = doctor(tmp_path, *command, flags=["--steps", "6"])
    assert rc == 0 and report["passed"], (failed(report), err[-2000:])
    assert any(reason in r for r in report["command"]["not_run"]), report["command"]["not_run"]
    read = {s["name"]: s for s in report["signs"]}
    assert {"optimizer_coverage", "gradient_flow", "applied_update", "grad_accumulation"} <= set(read), read
    assert "overfit_one_batch" in report["command"]["needs_scenario"] and not set(read) & set(
        report["command"]["needs_scenario"])
    assert "equals backward's at 0 of 0" not in read["applied_update"]["evidence"], read["applied_update"]
    for w in report["command"]["watched"]:
        assert w["outcome"] == "healthy" and w["steps_run"] >= 5, w


@pytest.mark.parametrize("bug, sign", [
    ("no_zero_grad", "grad_accumulation"),
    ("zero_grad_before_step", "applied_update"),
    ("partial_optimizer", "optimizer_coverage"),
    ("reinit", "applied_update"),
])
def test_a_bug_in_training_the_hooks_cannot_replay_is_found_by_the_signs_they_read(tmp_path, bug, sign):
    rc, report, err = doctor(tmp_path, "examples/commands/train_mlp.py", "--accumulate", "2", "--bug", bug,
                             flags=["--steps", "8"])
    assert rc == 1, err[-2000:]
    assert report["most_likely_cause"]["sign"] == sign, (report["most_likely_cause"], failed(report))
    assert failed(report) == [sign], "a bug that a backward's gradients reach is not also a cut path"


def test_the_text_report_of_training_the_hooks_cannot_replay_names_what_it_read_and_what_it_could_not(tmp_path):
    rc, out, err = doctor(tmp_path, "examples/commands/train_mlp.py", "--accumulate", "2", "--bug",
                          "partial_optimizer", flags=["--steps", "6"], json_out=False)
    assert rc == 1, err[-2000:]
    assert "the hooks cannot replay its training" in out and "read through the hooks" in out, out[-3000:]
    assert "most likely cause: no optimizer updates 0.weight, 0.bias, 2.weight, 2.bias" in out, out[-3000:]
    assert "not run, as they need a Scenario: " in out and "overfit_one_batch" in out.split("not run, as")[1]


def test_bad_flags_are_bad_input():
    for flags, says in [(["--bogus"], "'--bogus' is not a flag of doctor on a command"),
                        (["--heldout", "0"], "--heldout = '0': a whole number, 1 or more")]:
        rc, out, err = spikehunt("doctor", *flags, "--", sys.executable, *BUGGY, script=["-m", "spikehunt"])
        assert rc == 2 and says in err, err


def test_an_evaluations_loss_gives_no_training_step_its_targets(tmp_path):
    """run -- COMMAND: the validation loss after epoch 0 (512 targets, under no_grad) is not the
    next training step's targets: that step's labels are its own batch of 32."""
    rc, out, err = spikehunt("run", "--out", str(tmp_path), "--", sys.executable, *BUGGY, "--epochs", "2",
                             script=["-m", "spikehunt"])
    assert rc == 0, err[-2000:]
    trace = read_jsonl(f"{run_folder(tmp_path)}/trace.jsonl")
    assert len(trace) == 128
    assert sum(trace[64]["label_histogram"]) == 32, trace[64]["label_histogram"]
