"""The doctor on publicly reported training bugs (examples/public_bugs): each
case's top-ranked cause is pinned, and no sign fires on the healthy programs
over 3 seeds and 3 learning rates. The suite runs in one process per half
(examples/public_bugs/suite.py), as a user would run it."""
import json
import os
import subprocess
import sys

import pytest

from conftest import SOURCE

SUITE = os.path.join(SOURCE, "examples", "public_bugs", "suite.py")
sys.path.insert(0, os.path.dirname(SUITE))


def run_suite(tmp_path, half):
    out = tmp_path / "rows.json"
    p = subprocess.run([sys.executable, SUITE, half, "--json", str(out)], cwd=SOURCE, capture_output=True, text=True,
                       timeout=900)
    rows = json.loads(out.read_text())
    return p.returncode, p.stdout, rows


@pytest.fixture(scope="module")
def bugs(tmp_path_factory):
    return run_suite(tmp_path_factory.mktemp("bugs"), "--bugs")


def test_every_public_bug_is_detected_and_its_top_cause_is_the_expected_one(bugs):
    rc, text, rows = bugs
    from suite import EXPECTED
    assert [r["case"] for r in rows["bugs"]] == list(EXPECTED), text
    wrong = [(r["case"], r["top"], r["cause"]) for r in rows["bugs"] if not r["diagnosed"]]
    assert not wrong, text
    assert all(r["detected"] for r in rows["bugs"])
    assert rc == 0, text
    assert f"bugs: {len(EXPECTED)}, detected {len(EXPECTED)}, diagnosed (right top cause) {len(EXPECTED)}" in text


def test_the_evidence_is_in_numbers(bugs):
    rc, text, rows = bugs
    by_case = {r["case"]: r for r in rows["bugs"]}
    assert "disagree on" in by_case["functional_dropout_eval"]["cause"]  # on a share of the predicted classes
    assert "[64] against targets [64, 1]" in by_case["squeezed_logits_against_column_labels"]["cause"]
    assert "(2560 labels)" in by_case["all_labels_zero"]["cause"]
    assert "of 460 planned" in by_case["scheduler_stepped_per_batch"]["cause"]


def test_no_sign_fires_on_the_healthy_programs_across_seeds_and_learning_rates(tmp_path):
    rc, text, rows = run_suite(tmp_path, "--healthy")
    assert len(rows["healthy"]) == 7 * 3 * 3, text
    alarms = [(r["case"], r["seed"], r["lr"], r["alarms"]) for r in rows["healthy"] if r["alarms"]]
    assert not alarms, text
    assert rc == 0 and "false alarms 0" in text, text
