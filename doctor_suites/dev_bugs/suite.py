#!/usr/bin/env python3
"""Runs the doctor on every case of the development suite (bugs.py) at the doctor's own default
budgets (as a user runs it), and scores each bug by expected.py: the top cause must match the
mechanism's expression; each healthy program at 2 seeds, any failed sign a false alarm.

    PYTHONPATH=build/python .venv/bin/python doctor_suites/dev_bugs/suite.py [--bugs | --healthy] [--json FILE]

Exit code 0 when every bug is diagnosed and no healthy run raised an alarm, 1 otherwise."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import bugs  # noqa: E402
from evaluate import Suite  # noqa: E402
from expected import EXPECTED, HEALTHY_SEEDS  # noqa: E402

SUITE = Suite(EXPECTED, bugs.HEALTHY, os.path.join(HERE, "dev_bugs.json"), default_lrs=[0.05],
              seeds=HEALTHY_SEEDS, flags=["--json"])

if __name__ == "__main__":
    SUITE.main(__doc__.split("\n\n")[0])
