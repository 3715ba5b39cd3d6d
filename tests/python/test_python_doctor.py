"""The doctor on PyTorch code: examples/python/planted_bugs.py plants the
classic bugs as PyTorch users write them; the doctor's top-ranked cause is
pinned for each, and no sign fires on the healthy program over several seeds."""
import json

import pytest

from conftest import spikehunt

SCRIPT = "examples/python/planted_bugs.py"
CONFIG = "examples/python/planted_bugs.json"
DOCTOR = ["--steps", "40", "--overfit-steps", "300", "--json"]


def doctor(*sets):
    args = ["doctor", "--config", CONFIG, *DOCTOR]
    for s in sets:
        args += ["--set", s]
    rc, out, err = spikehunt(*args, script=SCRIPT)
    return rc, json.loads(out), err


@pytest.mark.parametrize("bug, sign", [
    ("double_softmax", "loss_output_mismatch"),
    ("raw_inputs", "input_scale"),
    ("partial_optimizer", "optimizer_coverage"),
    ("detached_hidden", "gradient_flow"),
    ("wrong_num_classes", "training_code_error"),
])
def test_the_doctors_top_cause_is_the_planted_bug(bug, sign):
    rc, report, err = doctor(f'params.bug="{bug}"')
    assert rc == 1, err
    assert report["most_likely_cause"]["sign"] == sign, report["most_likely_cause"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_no_sign_fires_on_the_healthy_program(seed):
    rc, report, err = doctor(f"seed={seed}")
    assert rc == 0, [s["name"] for s in report["signs"] if not s["passed"] and not s["skipped"]]
    assert report["passed"]


def test_the_overfit_probe_turns_a_python_optimizers_weight_decay_off_as_docs_say():
    """docs/doctor.md: the probe memorizes one batch with weight decay off. A decay of 1 at lr 0.05 (momentum 0.9)
    pulls every weight to 0 harder than one batch's gradient can hold it: the loss stays near 1 with it on (the program's own run)."""
    rc, report, err = doctor("optimizer.weight_decay=1")
    assert rc == 1 and not report["passed"], "the program as written, decay on, must fail"
    overfit = next(s for s in report["signs"] if s["name"] == "overfit_one_batch")
    assert overfit["data"]["weight_decay_turned_off"] == 1, overfit
    assert overfit["passed"], overfit
