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
