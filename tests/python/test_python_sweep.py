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
    # the command to check it names this program as it was run, not the spikehunt binary
    assert "check with: %s %s guard check --suite " % (sys.executable, TINY) in text, text
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


def _project(tmp_path):
    """A copy of tiny.py in a project of its own, importing a helper module of that project."""
    import shutil
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(os.path.join(SOURCE, TINY), project / "train.py")
    (project / "helper.py").write_text("SCALE = 1.0\n")
    text = (project / "train.py").read_text()
    (project / "train.py").write_text(text.replace("import spikehunt\n", "import spikehunt\nimport helper  # noqa: F401\n", 1))
    return project


def test_one_sweep_is_one_version_of_the_code(tmp_path):
    """The build id covers the script and the modules it imports from its project: a resume after
    helper.py changed is refused (exit 2, naming the database's build), goes on with
    --allow-code-change and says so; a burst told to run another build refuses (exit 4)."""
    project = _project(tmp_path)
    train = str(project / "train.py")
    out = str(tmp_path / "sweep")
    args = ("sweep", "--space", os.path.join(SOURCE, SPACE), "--out", out, "--no-progress", "--max-shrinks", "0")
    rc, text, err = spikehunt(*args, "--runs", "2", script=train)
    assert rc in (0, 1), text + err
    (project / "helper.py").write_text("SCALE = 2.0\n")
    rc, text, err = spikehunt(*args, "--runs", "4", script=train)
    assert rc == 2, text + err
    assert "sweep.db: build = " in err and "resuming would mix two versions of the code" in err, err
    assert "--allow-code-change" in err, err
    rc, text, err = spikehunt(*args, "--runs", "4", "--allow-code-change", script=train)
    assert rc in (0, 1), text + err
    assert "resuming over changed code (--allow-code-change)" in text, text
    assert "the code changed during this sweep (--allow-code-change): builds " in text, text
    report = open(os.path.join(out, "report.html")).read()
    assert "The code changed during this sweep" in report
    rc, text, err = spikehunt("burst", "--config", os.path.join(SOURCE, CONFIG), "--result", str(tmp_path / "r.json"),
                              "--build", "not this build", script=train)
    assert rc == 4 and "the program or the files it is built from changed" in err, text + err


def test_a_name_holds_one_class_and_a_replay_under_another_says_so(tmp_path):
    project = _project(tmp_path)
    train = project / "train.py"
    text = train.read_text()
    twice = project / "twice.py"
    twice.write_text(text.replace('if __name__ == "__main__":',
                                  'class Other(Tiny):\n    pass\n\n\nspikehunt.register("tiny", Other)\n\n'
                                  'if __name__ == "__main__":', 1))
    rc, out, err = spikehunt("run", "--config", os.path.join(SOURCE, CONFIG), script=str(twice))
    assert rc == 2 and "'tiny' is already registered to Tiny" in err and "a name holds one class" in err, out + err
    # A repro recorded with Tiny, replayed by a program whose "tiny" is another class.
    rc, out, err = spikehunt("run", "--config", os.path.join(SOURCE, CONFIG), "--set", "optimizer.lr=8",
                             "--out", str(tmp_path / "runs"), script=str(train))
    assert rc == 1, out + err
    repro = [l for l in out.splitlines() if l.startswith("wrote ")][0].split()[1].rstrip("/") + "/repro.json"
    other = project / "other.py"
    other.write_text(text.replace("class Tiny(spikehunt.Scenario):", "class Renamed(spikehunt.Scenario):", 1)
                     .replace("Tiny,", "Renamed,").replace("Tiny)", "Renamed)"))
    rc, out, err = spikehunt("replay", repro, script=str(other))
    assert 'scenario "tiny" was class Tiny when recorded and is class Renamed now' in out, out + err


def test_os_exit_in_the_training_code_is_a_crash_not_a_clean_exit(tmp_path):
    """os._exit(0) in the user's forward would end the process with exit 0 and no verdict ("nothing
    found"): under spikehunt it raises, and run reports a crash at the forward naming the call."""
    rc, out, err = spikehunt("run", "--config", CONFIG, "--set", 'params.bug="os_exit"', "--out", str(tmp_path))
    assert rc == 1, out + err
    assert "the training code threw in the forward stage" in out, out
    assert "the training code called os._exit(0)" in out, out
