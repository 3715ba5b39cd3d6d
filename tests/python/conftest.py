"""Shared helpers of the Python tests: run `python3 SCRIPT VERB ...` as a user
does, from the repository root, with the build tree's package on PYTHONPATH
(ctest sets it; tests/CMakeLists.txt)."""
import glob
import json
import os
import subprocess
import sys

SOURCE = os.environ.get("SPIKEHUNT_SOURCE",
                        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
TINY = os.path.join("tests", "python", "tiny.py")
CONFIG = os.path.join("tests", "python", "tiny.json")
SPACE = os.path.join("tests", "python", "tiny_space.json")


def spikehunt(*args, env=None, script=TINY, timeout=600):
    """Runs `python3 SCRIPT ARGS` (SCRIPT: a path, or a list such as ["-m", "spikehunt"]) from the
    repository root: (exit code, stdout, stderr)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    prefix = list(script) if isinstance(script, (list, tuple)) else [script]
    p = subprocess.run([sys.executable, *prefix, *args], cwd=SOURCE, env=full_env, capture_output=True,
                       text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def run_folder(out):
    """The one result folder `run --out OUT` wrote."""
    folders = [f for f in glob.glob(os.path.join(str(out), "*")) if os.path.isdir(f)]
    assert len(folders) == 1, folders
    return folders[0]


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def read_json(path):
    with open(path) as f:
        return json.load(f)


def traces_equal(a, b):
    """Two trace.jsonl files' records, step by step, equal but for the wall time (step_ms):
    hashes, loss, taps, every layer's gradient, parameter and optimizer-state statistics."""
    ta, tb = read_jsonl(a), read_jsonl(b)
    for x, y in zip(ta, tb):
        x.pop("step_ms"), y.pop("step_ms")
    assert len(ta) == len(tb), (len(ta), len(tb))
    for x, y in zip(ta, tb):
        assert x == y
    return len(ta)


def tiny_run_trace(out):
    """`tiny.py run` of tests/python/tiny.json into `out`: its trace.jsonl's path."""
    rc, stdout, err = spikehunt("run", "--config", CONFIG, "--out", str(out))
    assert rc == 0, stdout + err
    return os.path.join(run_folder(out), "trace.jsonl")


def run_doctor_suite(suite, tmp_path, half):
    """doctor_suites/<suite>/suite.py run in a process of its own on one half (--bugs or --healthy): its
    exit code, its printed table and its rows (the --json it wrote)."""
    out = tmp_path / "rows.json"
    p = subprocess.run([sys.executable, os.path.join(SOURCE, "doctor_suites", suite, "suite.py"), half, "--json", str(out)],
                       cwd=SOURCE, capture_output=True, text=True, timeout=900)
    return p.returncode, p.stdout, json.loads(out.read_text())
