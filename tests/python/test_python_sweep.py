"""A PyTorch scenario under the verbs that start workers: sweep (persistent
workers that import torch and the user's file once), shrink, replay of the
recorded repros, a kill -9 resumed with nothing lost, guard and doctor."""
import os
import signal
import sqlite3
import subprocess
import sys
import time

from conftest import CONFIG, SOURCE, SPACE, TINY, read_json, spikehunt


def runs_in(db):
    with sqlite3.connect(db) as c:
        return c.execute("select kind, sample, config_json, outcome from runs order by id").fetchall()


def test_a_sweep_shrinks_and_replays_its_failures_and_drafts_a_pytest_test(tmp_path):
    out = tmp_path / "sweep"
    rc, text, err = spikehunt("sweep", "--space", SPACE, "--runs", "6", "--out", str(out), "--no-progress")
    assert rc == 1, text + err  # this space has failures
    assert "distinct failure" in text
    repros = sorted(os.listdir(out / "repros"))
    jsons = [r for r in repros if r.endswith(".repro.json")]
    assert jsons, repros
    assert text.count("replay: reproduced") == len(jsons), text
    assert "def test_training_stability_repro_" in text and "spikehunt.run_config([" in text
    assert "#include" not in text  # no C++ draft for a Python scenario
    assert (out / "report.html").exists()
    # A drafted test runs as pytest would run it, and fails as drafted (the config is unstable).
    draft = text[text.index("# Drafted by spikehunt"):]
    draft = "\n".join(line[5:] for line in draft.split("\n")[:40] if line.startswith("     ") or not line)
    draft = draft[:draft.index("report:")] if "report:" in draft else draft
    test_file = tmp_path / "test_drafted.py"
    test_file.write_text(draft)
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test_file)],
                       cwd=SOURCE, capture_output=True, text=True, timeout=300)
    assert p.returncode == 1 and "1 failed" in p.stdout, p.stdout + p.stderr


def test_a_sweep_killed_with_kill_9_resumes_with_nothing_lost(tmp_path):
    out = tmp_path / "sweep"
    args = [sys.executable, TINY, "sweep", "--space", SPACE, "--runs", "8", "--out", str(out), "--no-progress",
            "--max-shrinks", "0"]
    # Two bursts train, the rest are held (tiny.py's TINY_HOLD): the kill lands mid-sweep on any machine.
    env = dict(os.environ, TINY_HOLD="%s:2" % (tmp_path / "bursts"))
    p = subprocess.Popen(args, cwd=SOURCE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True, env=env)
    db = out / "sweep.db"
    deadline = time.time() + 120
    while time.time() < deadline:
        time.sleep(0.2)
        if db.exists():
            try:
                if len(runs_in(str(db))) >= 2:
                    break
            except sqlite3.Error:
                pass
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    before = runs_in(str(db))
    assert 2 <= len(before) < 8, before
    rc, text, err = spikehunt("sweep", "--space", SPACE, "--runs", "8", "--out", str(out), "--no-progress",
                              "--max-shrinks", "0")
    assert rc in (0, 1), text + err
    after = [r for r in runs_in(str(db)) if r[0] == "search"]
    assert after[:len(before)] == before  # what was committed stays as it was
    assert sorted(r[1] for r in after) == list(range(8))  # every sample once, none twice


def test_guard_records_a_baseline_and_checks_it(tmp_path):
    suite = tmp_path / "suite.json"
    suite.write_text('{"configs": [{"name": "tiny", "config": "%s"}]}' % os.path.join(SOURCE, CONFIG))
    baseline = tmp_path / "baseline.json"
    rc, text, err = spikehunt("guard", "record", "--suite", str(suite), "--out", str(baseline))
    assert rc == 0, text + err
    rc, text, err = spikehunt("guard", "check", "--suite", str(suite), "--baseline", str(baseline))
    assert rc == 0, text + err
    # The same suite with an unstable learning rate is a regression.
    rc, text, err = spikehunt("guard", "check", "--suite", str(suite), "--baseline", str(baseline),
                              "--set", "optimizer.lr=10", "--set", "params.width=256")
    assert rc == 1, text + err


def test_shrink_takes_a_failing_run_to_a_minimal_repro_that_replays(tmp_path):
    from conftest import run_folder
    rc, text, err = spikehunt("run", "--config", CONFIG, "--set", "optimizer.lr=10", "--set", "params.width=256",
                              "--set", "max_batches_per_epoch=40", "--out", str(tmp_path / "run"))
    assert rc == 1, text + err
    rc, text, err = spikehunt("shrink", "--run", run_folder(tmp_path / "run"), "--space", SPACE, "--bursts", "16",
                              "--out", str(tmp_path / "shrink"))
    assert rc == 1, text + err  # the config fails: it was shrunk
    minimal = read_json(str(tmp_path / "shrink" / "minimal.config.json"))
    assert minimal["scenario"] == "tiny" and minimal["optimizer"]["lr"] <= 10
    rc, text, err = spikehunt("replay", str(tmp_path / "shrink" / "minimal.repro.json"))
    assert rc == 0 and "reproduced" in text, text + err


def test_training_code_that_changes_directory_moves_nothing_spikehunt_writes(tmp_path):
    """The scenario chdirs into a folder of its own in __init__ (Hydra-style): run still writes under
    --out as given (relative, from where it was run), prints a path that exists from there, and its
    repro replays; a sweep's bursts (in persistent workers, several per worker) are not crashed by it."""
    import json
    import shutil
    rel = os.path.join("build", "chdir-test-%d" % os.getpid())  # relative to the repository root, the cwd
    try:
        rc, stdout, err = spikehunt("run", "--config", CONFIG, "--set", 'params.bug="chdir"', "--set",
                                    "optimizer.lr=8", "--out", os.path.join(rel, "runs"))
        assert rc == 1, stdout + err
        wrote = [l for l in stdout.splitlines() if l.startswith("wrote ")][0].split()[1].rstrip("/")
        assert wrote.startswith(rel) and os.path.isfile(os.path.join(SOURCE, wrote, "repro.json")), stdout
        rc, replayed, err = spikehunt("replay", os.path.join(wrote, "repro.json"), "--from-checkpoint")
        assert rc == 0 and "reproduced" in replayed and "not reproduced" not in replayed, replayed + err
        space = json.load(open(os.path.join(SOURCE, SPACE)))
        space["base"]["params"] = {"bug": "chdir"}
        (tmp_path / "space.json").write_text(json.dumps(space))
        rc, stdout, err = spikehunt("sweep", "--space", str(tmp_path / "space.json"), "--runs", "6", "-j", "2",
                                    "--max-shrinks", "0", "--no-progress", "--out", os.path.join(rel, "sweep"))
        summary = [l for l in stdout.splitlines() if l.startswith("6 runs, ")]
        assert summary and "crashed" not in summary[0], stdout + err
        assert "crashed:" not in stdout, stdout + err
    finally:
        shutil.rmtree(os.path.join(SOURCE, rel), ignore_errors=True)
