"""The doctor on publicly reported training bugs (doctor_suites/public_bugs): each
case's top-ranked cause is pinned (one test a case), and no sign fires on the
healthy programs over 3 seeds and 3 learning rates. The suite runs in one
process per half (doctor_suites/public_bugs/suite.py), as a user would run it."""
import os
import sys

import pytest

from conftest import SOURCE, run_doctor_suite

SUITE = os.path.join(SOURCE, "doctor_suites", "public_bugs", "suite.py")
sys.path.insert(0, os.path.dirname(SUITE))
from suite import EXPECTED  # noqa: E402


def run_suite(tmp_path, half):
    return run_doctor_suite("public_bugs", tmp_path, half)


@pytest.fixture(scope="module")
def bugs(tmp_path_factory):
    rc, text, rows = run_suite(tmp_path_factory.mktemp("bugs"), "--bugs")
    return rc, text, {r["case"]: r for r in rows["bugs"]}


@pytest.mark.parametrize("case", list(EXPECTED))
def test_the_top_cause_is_the_reported_bug(bugs, case):
    rc, text, rows = bugs
    source, sign, phrase = EXPECTED[case]
    r = rows[case]
    assert r["detected"], r
    assert r["top"] == sign and phrase in r["cause"], r
    assert not r["contradictions"], r


def test_the_suite_reports_as_the_anchors_do(bugs):
    rc, text, rows = bugs
    n = len(EXPECTED)
    assert rc == 0 and f"bugs: {n}, detected {n}, diagnosed (right top cause) {n}" in text, text
    # The evidence is in numbers.
    assert "disagree on" in rows["functional_dropout_eval"]["cause"]  # a share of the predicted classes
    assert "[64] against targets [64, 1]" in rows["squeezed_logits_against_column_labels"]["cause"]
    assert "(2560 labels)" in rows["all_labels_zero"]["cause"]
    assert "of 460 planned" in rows["scheduler_stepped_per_batch"]["cause"]


def test_no_sign_fires_on_the_healthy_programs_across_seeds_and_learning_rates(tmp_path):
    rc, text, rows = run_suite(tmp_path, "--healthy")
    assert len(rows["healthy"]) == 7 * 3 * 3, text
    alarms = [(r["case"], r["seed"], r["lr"], r["alarms"]) for r in rows["healthy"] if r["alarms"]]
    assert not alarms, text
    assert all(not r["contradictions"] for r in rows["healthy"])
    assert rc == 0 and "false alarms 0" in text, text
