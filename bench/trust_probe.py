#!/usr/bin/env python3
"""trust_probe.py BINARY WORKDIR — can a team trust what spikehunt leaves behind?
Cases a hostile-but-ordinary user and a failing machine bring, in the classes of
issue 41 (an output that is an input, a working directory the training code
changes, a suspended sweep, code that changes under a sweep, a damaged checkpoint
or database, sizes a file asks for, text that reaches a report, interrupts, the
order failures are shrunk in) and a few beside them. Each case is judged:

  clear    what it must do, said (exit 2 naming the file or flag, the input left
           byte for byte; or the run goes on correctly and says what happened)
  unclear  nothing lost, but the message does not name what it should
  worse    something lost or destroyed, or a wrong result given as a right one

Prints one line a case and the counts. About 4 minutes on a 2-core VM.
PYTHONPATH must reach the built package (build/python) for the Python cases."""
import glob
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time

B = os.path.abspath(sys.argv[1])
W = os.path.abspath(sys.argv[2])
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = os.path.join(ROOT, "tests", "python", "tiny.py")
TINY_JSON = os.path.join(ROOT, "tests", "python", "tiny.json")
os.environ["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)
shutil.rmtree(W, ignore_errors=True)
os.makedirs(W)
os.chdir(W)


def sh(args, timeout=300, env=None, program=None):
    p = subprocess.run(([program] if program else [B]) + args, capture_output=True, text=True, timeout=timeout,
                       env={**os.environ, **(env or {})})
    return p.returncode, p.stdout + p.stderr


def put(name, text):
    path = os.path.join(W, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    return path


def read(path, mode="rb"):
    with open(path, mode) as f:
        return f.read()


def refused(rc, out, parts, kept=()):
    """exit 2 naming every part, every (path, bytes) in kept unchanged."""
    if any(read(p) != b for p, b in kept):
        return "worse", "an input was changed"
    if rc == 0:
        return "worse", "exit 0"
    if rc != 2 or not all(p in out for p in parts):
        return "unclear", f"exit {rc}: {out.strip().splitlines()[-1] if out.strip() else ''}"
    return "clear", next((l for l in out.splitlines() if l.startswith("error:")), out.strip())[:110]


TINY_CFG = put("tiny.json", json.dumps({"model": {"kind": "mlp", "mlp_width": 8}, "dataset": {"synthetic_train_per_class": 10},
                                        "batch_size": 8, "threads": 1, "max_batches_per_epoch": 2}))
SPACE = put("space.json", json.dumps({"base": {"model": {"kind": "mlp", "mlp_width": 16},
                                               "dataset": {"synthetic_train_per_class": 20}, "batch_size": 16,
                                               "max_batches_per_epoch": 4, "threads": 1},
                                      "dimensions": {"optimizer.lr": {"log_range": [0.01, 10]},
                                                     "seed": {"range": [0, 3], "simplest": 0}}}))


def small_sweep(out, runs=6, extra=()):
    return sh(["sweep", "--space", SPACE, "--runs", str(runs), "--shrink-bursts", "6", "--out", out, "--no-progress",
               *extra])


small_sweep(W + "/base")
REPROS = sorted(glob.glob(W + "/base/repros/*.repro.json"))


def c_calibrate_onto_its_config():
    c = put("cal.json", read(os.path.join(ROOT, "configs", "healthy.json"), "r"))
    b = read(c)
    return refused(*sh(["calibrate", "--config", c, "--out", c]), ["--out", "cal.json"], [(c, b)])


def c_report_onto_the_database():
    db = W + "/base/sweep.db"
    b = read(db)
    return refused(*sh(["report", W + "/base", "--out", db]), ["--out", "sweep.db"], [(db, b)])


def c_report_onto_a_repro():
    r = REPROS[0]
    b = read(r)
    return refused(*sh(["report", W + "/base", "--out", r]), ["--out"], [(r, b)])


def c_sweep_over_the_users_report():
    os.makedirs(W + "/mine", exist_ok=True)
    p = put("mine/report.html", "<html>my notes</html>")
    b = read(p)
    return refused(*small_sweep(W + "/mine", runs=2), ["report.html"], [(p, b)])


def c_junit_onto_the_users_notes():
    p = put("notes.txt", "my notes\n")
    b = read(p)
    return refused(*small_sweep(W + "/j1", runs=2, extra=["--junit", p]), ["--junit", "notes.txt"], [(p, b)])


def c_guard_record_onto_its_suite():
    s = put("suite.json", json.dumps({"configs": [{"name": "t", "config": TINY_CFG}], "tolerances": {}}))
    b = read(s)
    return refused(*sh(["guard", "record", "--suite", s, "--out", W + "/./suite.json"]), ["--out"], [(s, b)])


def c_run_out_is_a_file():
    p = put("afile", "x")
    return refused(*sh(["run", "--config", TINY_CFG, "--out", p]), ["afile"], [(p, b"x")])


def c_chdir_in_training_code():
    rc, out = sh([TINY, "run", "--config", TINY_JSON, "--set", 'params.bug="chdir"', "--out", "chd"],
                 program=sys.executable)
    folders = glob.glob(W + "/chd/*/verdict.json")
    if rc not in (0, 1):
        return "unclear", f"exit {rc}: {out.strip().splitlines()[-1] if out.strip() else ''}"
    return ("clear", f"{len(folders)} run folder under --out as given") if folders else ("worse", "no folder under --out")


def c_suspended_sweep_is_no_timeout():
    p = subprocess.Popen([B, "sweep", "--space", SPACE, "--runs", "6", "--max-shrinks", "0", "--timeout", "3s", "--out",
                          W + "/susp", "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
    time.sleep(2.5)
    os.killpg(p.pid, signal.SIGSTOP)
    time.sleep(5)
    os.killpg(p.pid, signal.SIGCONT)
    out = p.communicate(timeout=300)[0]
    timeouts = sqlite3.connect(W + "/susp/sweep.db").execute("SELECT COUNT(*) FROM runs WHERE outcome = 'timeout'").fetchone()[0]
    return ("clear", "no timeout after a 5 s stop with --timeout 3s") if timeouts == 0 else ("worse", f"{timeouts} timeouts")


def c_resume_after_editing_the_script():
    script = put("mytiny.py", read(TINY, "r"))
    put("myspace.json", json.dumps({**json.loads(read(os.path.join(ROOT, "tests", "python", "tiny_space.json"), "r")),
                                    "base": {"scenario": "tiny", "batch_size": 32, "max_batches_per_epoch": 3,
                                             "threads": 1}}))
    sh([script, "sweep", "--space", W + "/myspace.json", "--runs", "2", "--max-shrinks", "0", "--out", W + "/edit",
        "--no-progress"], program=sys.executable)
    with open(script, "a") as f:
        f.write("\n# an edit\n")
    rc, out = sh([script, "sweep", "--space", W + "/myspace.json", "--runs", "4", "--max-shrinks", "0", "--out",
                  W + "/edit", "--no-progress"], program=sys.executable)
    return refused(rc, out, ["build", "--allow-code-change"])


def checkpointed_repro():
    """(repro, its checkpoint) of the base sweep, copied into a folder of its own."""
    for r in REPROS:
        c = json.loads(read(r, "r")).get("checkpoint")
        if c and os.path.exists(os.path.join(os.path.dirname(r), c["file"])):
            d = W + f"/ck{len(os.listdir(W))}"
            os.makedirs(d)
            shutil.copy(r, d)
            shutil.copy(os.path.join(os.path.dirname(r), c["file"]), d)
            return os.path.join(d, os.path.basename(r)), os.path.join(d, c["file"])
    return None, None


def damaged_checkpoint(edit):
    r, ck = checkpointed_repro()
    if r is None:
        return "unclear", "no repro with a checkpoint to damage"
    data = bytearray(read(ck))
    edit(data)
    with open(ck, "wb") as f:
        f.write(data)
    rc, out = sh(["replay", r, "--from-checkpoint"])
    return refused(rc, out, [os.path.basename(ck)])


def c_checkpoint_bit_flipped():
    return damaged_checkpoint(lambda d: d.__setitem__(len(d) - 10, d[len(d) - 10] ^ 0x40))


def c_checkpoint_tensor_zeroed():
    def zero(d):
        n = int.from_bytes(d[:8], "little")
        d[8 + n:8 + n + 256] = bytes(256)
    return damaged_checkpoint(zero)


def c_repro_asks_for_a_huge_gpt():
    r = json.loads(read(REPROS[0], "r"))
    r["config"]["model"] = {**r["config"].get("model", {}), "kind": "gpt",
                            "gpt": {"width": 8192, "layers": 64, "heads": 64, "context": 64}}
    r["config"]["dataset"] = {**r["config"].get("dataset", {}), "kind": "text"}
    r["config"]["batch_size"] = 65536
    p = put("huge.repro.json", json.dumps(r))
    return refused(*sh(["replay", p]), ["huge.repro.json", "config.model.gpt", "model.gpt.layers = 64", "GiB"])


def c_repro_with_a_million_hashes():
    r = json.loads(read(REPROS[0], "r"))
    r["step_hashes"] = [r["step_hashes"][0]] * 1000000
    p = put("long.repro.json", json.dumps(r))
    t0 = time.time()
    rc, out = sh(["-f", "peak %M KB", B, "replay", p], program="/usr/bin/time")
    peak = int(out.strip().splitlines()[-1].split()[1]) // 1024
    verdict, why = refused(rc, out.rsplit("peak", 1)[0], ["step_hashes"])
    return verdict, f"{why} (peak {peak} MB, {time.time() - t0:.1f} s)"


def c_baseline_with_nan_losses():
    s = put("suite2.json", json.dumps({"configs": [{"name": "t", "config": TINY_CFG}], "tolerances": {}}))
    sh(["guard", "record", "--suite", s, "--out", W + "/base.json"])
    b = json.loads(read(W + "/base.json", "r"))
    for entry in b.get("configs", b.get("entries", [])):
        if "losses" in entry:
            entry["losses"] = ["nan"] * len(entry["losses"])
    p = put("nan_base.json", json.dumps(b))
    return refused(*sh(["guard", "check", "--suite", s, "--baseline", p]), ["nan_base.json"])


def c_script_in_a_vary_value():
    rc, out = sh(["lr-sensitivity", "--config", TINY_CFG, "--lrs", "0.1", "--vary", "name=<!--<script>,b",
                  "--out", W + "/lrs"])
    rc, out = sh(["report", W + "/lrs", "--out", W + "/lrs.html"])
    if not os.path.exists(W + "/lrs.html"):
        return "unclear", f"exit {rc}, no page"
    text = read(W + "/lrs.html", "r")
    return ("clear", "escaped in the page") if "<!--<script>" not in text else ("worse", "raw in the page")


def c_ctrl_c_during_run():
    p = subprocess.Popen([B, "run", "--config", os.path.join(ROOT, "configs", "healthy.json"), "--set",
                          "protocol.epochs_per_phase=6", "--out", W + "/int"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(3)
    p.send_signal(signal.SIGINT)
    out = p.communicate(timeout=120)[0]
    verdicts = glob.glob(W + "/int/*/verdict.json")
    ok = p.returncode == 130 and verdicts and json.loads(read(verdicts[0], "r")).get("interrupted") is True
    return ("clear", "exit 130, folder committed, interrupted") if ok else ("worse", f"exit {p.returncode}, {len(verdicts)} folders")


def c_os_exit_in_training_code():
    rc, out = sh([TINY, "run", "--config", TINY_JSON, "--set", 'params.bug="os_exit"', "--out", "osx"],
                 program=sys.executable)
    return ("clear", "not exit 0; os._exit named") if rc != 0 and "os._exit" in out else ("worse" if rc == 0 else "unclear", f"exit {rc}")


def c_damaged_database_page():
    shutil.copytree(W + "/base", W + "/dmg")
    db = W + "/dmg/sweep.db"
    root = sqlite3.connect(db).execute("SELECT rootpage FROM sqlite_master WHERE name = 'runs'").fetchone()[0]
    data = bytearray(read(db))
    data[(root - 1) * 4096 + 8:(root - 1) * 4096 + 408] = b"\xde" * 400
    with open(db, "wb") as f:
        f.write(data)
    return refused(*sh(["report", W + "/dmg"]), ["sweep.db", "damaged"], [(db, bytes(data))])


def c_deleted_wal_after_a_kill():
    p = subprocess.Popen([B, "sweep", "--space", SPACE, "--runs", "40", "--max-shrinks", "0", "--out", W + "/wal",
                          "--no-progress"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(6)
    p.kill()
    p.wait()
    before = sqlite3.connect(f"file:{W}/wal/sweep.db?immutable=1", uri=True).execute("SELECT COUNT(*) FROM runs").fetchone()[0]
    for f in glob.glob(W + "/wal/sweep.db-*"):
        os.remove(f)
    after = sqlite3.connect(W + "/wal/sweep.db").execute("SELECT COUNT(*) FROM runs").fetchone()[0]
    return ("clear", f"{after} runs kept of {after}") if after > 0 else ("worse", f"{after} runs in the file ({before} read without the log)")


def c_ulimit_12():
    rc, out = sh(["-c", f"ulimit -n 12; exec {B} sweep --space {SPACE} --runs 2 --out {W}/ul"], program="bash")
    return refused(rc, out, ["ulimit -n", "12"])


def c_report_of_a_running_sweep():
    p = subprocess.Popen([B, "sweep", "--space", SPACE, "--runs", "5000", "--out", W + "/live", "--no-progress"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(3)
    rc, out = sh(["report", W + "/live", "--out", W + "/live.html"])
    p.kill()
    p.wait()
    return ("clear", "says it is still running") if "still running" in out else ("unclear", out.strip()[:100])


def c_watch_float_loss():
    code = ("import torch, spikehunt\nm = torch.nn.Linear(2, 2)\no = torch.optim.SGD(m.parameters(), lr=0.1)\n"
            f"w = spikehunt.Watch(m, o, out={W + '/wf'!r})\nw.step(1.5, torch.zeros(1, 2), torch.zeros(1))\n")
    rc, out = sh(["-c", code], program=sys.executable)
    return ("clear", "names the float loss") if rc != 0 and "not a torch.Tensor" in out else ("unclear", out.strip()[-100:])


def c_replay_without_its_checkpoint():
    r, ck = checkpointed_repro()
    if r is None:
        return "unclear", "no repro with a checkpoint"
    os.remove(ck)
    return refused(*sh(["replay", r, "--from-checkpoint"]), [os.path.basename(ck)])


def c_checkpoint_path_escapes():
    r = json.loads(read(REPROS[0], "r"))
    if not r.get("checkpoint"):
        return "unclear", "no checkpoint"
    r["checkpoint"]["file"] = "../../etc/passwd"
    p = put("esc.repro.json", json.dumps(r))
    return refused(*sh(["replay", p, "--from-checkpoint"]), ["checkpoint.file"])


def c_database_is_a_text_file():
    os.makedirs(W + "/txt", exist_ok=True)
    p = put("txt/sweep.db", "not a database\n")
    return refused(*small_sweep(W + "/txt", runs=2), ["sweep.db"], [(p, b"not a database\n")])


def c_merge_with_a_damaged_shard():
    for i in range(2):
        small_sweep(W + "/shards", runs=4, extra=["--shard", f"{i}/2"])
    db = W + "/shards/shard-1-of-2/sweep.db"
    data = bytearray(read(db))
    data[4096 + 8:4096 + 408] = b"\xde" * 400
    with open(db, "wb") as f:
        f.write(data)
    return refused(*sh(["merge", W + "/merged", W + "/shards/shard-0-of-2", W + "/shards/shard-1-of-2"]),
                   ["shard-1-of-2", "damaged"], [(db, bytes(data))])


def c_truncated_baseline():
    s = put("suite3.json", json.dumps({"configs": [{"name": "t", "config": TINY_CFG}], "tolerances": {}}))
    sh(["guard", "record", "--suite", s, "--out", W + "/b3.json"])
    text = read(W + "/b3.json", "r")
    p = put("cut.json", text[:len(text) // 2])
    return refused(*sh(["guard", "check", "--suite", s, "--baseline", p]), ["cut.json"])


def c_two_sweeps_into_one_folder():
    p = subprocess.Popen([B, "sweep", "--space", SPACE, "--runs", "5000", "--out", W + "/twice", "--no-progress"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(2)
    rc, out = small_sweep(W + "/twice", runs=2)
    p.kill()
    p.wait()
    return refused(rc, out, ["twice", "pid"])


def c_a_repro_given_as_a_baseline():
    s = put("suite4.json", json.dumps({"configs": [{"name": "t", "config": TINY_CFG}], "tolerances": {}}))
    r = REPROS[0]
    b = read(r)
    return refused(*sh(["guard", "check", "--suite", s, "--baseline", r]), [os.path.basename(r)], [(r, b)])


def c_a_baseline_given_as_rules():
    s = put("suite5.json", json.dumps({"configs": [{"name": "t", "config": TINY_CFG}], "tolerances": {}}))
    sh(["guard", "record", "--suite", s, "--out", W + "/b5.json"])
    return refused(*sh(["run", "--config", TINY_CFG, "--rules", W + "/b5.json", "--out", W + "/r5"]), ["b5.json"])


def c_sweep_into_an_lr_sensitivity_folder():
    sh(["lr-sensitivity", "--config", TINY_CFG, "--lrs", "0.1,0.2", "--out", W + "/lrs2"])
    db = W + "/lrs2/sweep.db"
    b = read(db)
    return refused(*small_sweep(W + "/lrs2", runs=2), ["lrs2"], [(db, b)])


def c_compare_with_a_damaged_database():
    shutil.copytree(W + "/base", W + "/dmg2")
    db = W + "/dmg2/sweep.db"
    data = bytearray(read(db))
    data[4096 + 8:4096 + 408] = b"\xde" * 400
    with open(db, "wb") as f:
        f.write(data)
    return refused(*sh(["compare", W + "/base", W + "/dmg2"]), ["dmg2/sweep.db", "damaged"], [(db, bytes(data))])


def c_a_stopped_worker_is_no_timeout():
    slow = put("slowspace.json", json.dumps({"base": {"max_batches_per_epoch": 20, "threads": 1},  # the CNN: seconds a burst
                                             "dimensions": {"optimizer.lr": {"log_range": [0.001, 0.01]},
                                                            "seed": {"range": [0, 50]}}}))
    p = subprocess.Popen([B, "sweep", "--space", slow, "--runs", "6", "--max-shrinks", "0", "--timeout", "3s", "--out",
                          W + "/wstop", "--no-progress", "-j", "1"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True)
    workers = []
    for _ in range(100):  # the worker, once the sweep has started it
        workers = subprocess.run(["pgrep", "-P", str(p.pid), "-f", " worker"], capture_output=True, text=True).stdout.split()
        if workers:
            break
        time.sleep(0.05)
    time.sleep(0.5)
    stopped = []
    for w in subprocess.run(["pgrep", "-P", str(p.pid), "-f", " worker"], capture_output=True, text=True).stdout.split():
        try:
            os.kill(int(w), signal.SIGSTOP)
            stopped.append(int(w))
        except ProcessLookupError:  # retired meanwhile
            pass
    workers = stopped
    time.sleep(5)
    for w in workers:
        try:
            os.kill(w, signal.SIGCONT)
        except ProcessLookupError:
            pass
    p.communicate(timeout=300)
    timeouts = sqlite3.connect(W + "/wstop/sweep.db").execute("SELECT COUNT(*) FROM runs WHERE outcome = 'timeout'").fetchone()[0]
    if not workers:
        return "unclear", "no worker found to stop"
    return ("clear", f"{len(workers)} worker stopped 5 s, --timeout 3s: no timeout") if timeouts == 0 else ("worse", f"{timeouts} timeouts")


def c_two_classes_under_one_name():
    script = put("twice.py", "import spikehunt, sys\nsys.path.insert(0, %r)\nimport tiny\n"
                 "class Other(tiny.Tiny):\n    pass\n"
                 "spikehunt.register('tiny', Other, params=[spikehunt.string('bug', 'none', ['none'], ''), "
                 "spikehunt.integer('width', 16, 1, 1024, '')])\n"
                 "spikehunt.main()\n" % os.path.dirname(TINY))
    rc, out = sh([script, "run", "--config", TINY_JSON, "--out", W + "/tw"], program=sys.executable)
    return refused(rc, out, ["'tiny' is already registered"]) if rc != 1 else ("unclear", out.strip()[-100:])


def c_a_zero_initialized_head_under_sgd():
    code = ("import torch, torch.nn.functional as F, spikehunt\ntorch.manual_seed(0)\n"
            "m = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))\n"
            "torch.nn.init.zeros_(m[2].weight); torch.nn.init.zeros_(m[2].bias)\n"
            "o = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)\nworst = 'finite'\n"
            f"with spikehunt.Watch(m, o, out={W + '/zero'!r}, num_classes=4) as w:\n"
            "    for _ in range(30):\n        x = torch.randn(32, 8); y = torch.randint(0, 4, (32,))\n"
            "        r = w.step(F.cross_entropy(m(x), y), x, y)\n"
            "        worst = r['health'] if r['health'] != 'finite' else worst\nprint('worst', worst)\n")
    rc, out = sh(["-c", code], program=sys.executable)
    return ("clear", "healthy over 30 steps") if "worst finite" in out else ("worse", out.strip()[-100:])


def c_guard_record_says_the_program_as_invoked():
    s = put("suite6.json", json.dumps({"configs": [{"name": "t", "config": TINY_CFG}], "tolerances": {}}))
    link = W + "/my-spikehunt"
    if not os.path.exists(link):
        os.symlink(B, link)
    rc, out = sh(["guard", "record", "--suite", s, "--out", W + "/b6.json"], program=link)
    return ("clear", "prints my-spikehunt guard check") if "my-spikehunt guard check" in out else ("unclear", out.strip()[-100:])


def huge_config():
    r = json.loads(read(REPROS[0], "r"))["config"]
    r["model"] = {**r.get("model", {}), "kind": "gpt", "gpt": {"width": 8192, "layers": 64, "heads": 64, "context": 64}}
    r["dataset"] = {**r.get("dataset", {}), "kind": "text"}
    r["batch_size"] = 65536
    return r


def c_lr_sensitivity_of_a_huge_model():
    p = put("huge.json", json.dumps(huge_config()))
    return refused(*sh(["lr-sensitivity", "--config", p, "--lrs", "0.1,0.3", "--out", W + "/lrh"]), ["huge.json", "GiB"])


def c_sweep_of_a_huge_model():
    p = put("hugespace.json", json.dumps({"base": huge_config(), "dimensions": {"seed": {"range": [0, 3]}}}))
    rc, out = sh(["sweep", "--space", p, "--runs", "2", "--no-progress", "--out", W + "/swh"])
    return refused(rc, out, ["hugespace.json", "GiB"]) if "crashed" not in out else ("worse", "bursts said crashed")


CASES = [c for n, c in sorted(globals().items()) if n.startswith("c_")]
counts = {"clear": 0, "unclear": 0, "worse": 0}
print(f"{len(REPROS)} repro(s) from the base sweep")
for case in CASES:
    try:
        verdict, why = case()
    except Exception as e:  # noqa: BLE001 — a probe that breaks is unclear, and says how
        verdict, why = "unclear", f"the probe broke: {type(e).__name__}: {e}"
    counts[verdict] += 1
    print(f"{verdict:8} {case.__name__[2:]:38} {why}", flush=True)
print(f"{len(CASES)} cases: {counts['clear']} clear, {counts['unclear']} unclear, {counts['worse']} worse")
