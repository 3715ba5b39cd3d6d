#!/usr/bin/env python3
"""kill_probe.py BINARY WORKDIR [SECTION...] — kills the default sweep
(SIGKILL to its process group, as a preemption or `kill -9` would) at each
phase, resumes it with the same command, and prints what the kill lost and
what the resume trained again ("phases"); runs two sweeps on one folder 0.3 s
apart ("two"); and SIGKILLs three of a sweep's workers from outside, as the
OOM killer would ("outside"). The figures of issue 29's closing note. All
three sections (the default) take about 6 minutes on a 2-core VM.

Phases: "search" (after 8 of 24 search runs are committed), "ahead" (the
shrinks at once: after 6 bursts are held), "shrink" (the shrinks in order:
after 12 shrink runs are committed), "repro" (a repro being recorded)."""
import os, signal, sqlite3, subprocess, sys, time

binary, work = sys.argv[1], sys.argv[2]
sections = sys.argv[3:] or ["phases", "two", "outside"]
os.makedirs(work, exist_ok=True)


def counts(db):
    try:
        c = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        kinds = dict(c.execute("SELECT kind, COUNT(*) FROM runs GROUP BY kind").fetchall())
        held = c.execute("SELECT COUNT(*) FROM held").fetchone()[0] if c.execute(
            "SELECT 1 FROM sqlite_master WHERE name='held'").fetchone() else 0
        c.close()
        return kinds.get("search", 0), kinds.get("shrink", 0), held
    except sqlite3.Error:
        return 0, 0, 0


def sweep(out):
    return [binary, "sweep", "--no-progress", "--out", out]


def run_to_end(out):
    r = subprocess.run(sweep(out), capture_output=True, text=True)
    line = next((l for l in r.stdout.splitlines() if l.startswith("bursts this invocation")), "")
    return r.returncode, line


if "phases" in sections:
    clean_out = os.path.join(work, "clean")
    code, line = run_to_end(clean_out)
    clean = counts(os.path.join(clean_out, "sweep.db"))
    print(f"uninterrupted: exit {code}; {line}")

    phases = {
        "search": lambda s, k, h, repros: s >= 8,
        "ahead": lambda s, k, h, repros: h >= 6,
        "shrink": lambda s, k, h, repros: k >= 12,
        "repro": lambda s, k, h, repros: repros,
    }
    for phase, reached in phases.items():
        out = os.path.join(work, phase)
        db = os.path.join(out, "sweep.db")
        p = subprocess.Popen(sweep(out), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        killed_at = None
        while p.poll() is None:
            s, k, h = counts(db)
            repros = os.path.isdir(os.path.join(out, "work")) and any(
                n.startswith("repro-") for n in os.listdir(os.path.join(out, "work")))
            if reached(s, k, h, repros):
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
                killed_at = counts(db)  # what the kill left committed (more may have landed since the poll)
                break
            time.sleep(0.05)
        if killed_at is None:
            print(f"{phase}: the sweep ended before the phase was reached")
            continue
        code, line = run_to_end(out)
        s, k, h = counts(db)
        print(f"{phase}: killed with {killed_at[0]} search, {killed_at[1]} shrink runs and {killed_at[2]} held bursts "
              f"committed; resumed: exit {code}; {line}; database now {s} search, {k} shrink (uninterrupted: "
              f"{clean[0]}, {clean[1]})")

# Two writers on one folder: the second is refused at once.
if "two" in sections:
    out = os.path.join(work, "two")
    first = subprocess.Popen(sweep(out), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    time.sleep(0.3)
    t = time.time()
    second = subprocess.run(sweep(out), capture_output=True, text=True)
    print(f"two writers: the second exit {second.returncode} after {time.time() - t:.2f} s: "
          f"{second.stderr.strip().splitlines()[0] if second.stderr.strip() else second.stdout[-200:]}")
    first.wait()
    print(f"two writers: the first exit {first.returncode}; database {counts(os.path.join(out, 'sweep.db'))[:2]}")

# Outside kills: three of a sweep's workers SIGKILLed mid-burst (the OOM
# killer's way); none may become a finding.
if "outside" in sections:
    out = os.path.join(work, "outside")
    p = subprocess.Popen(sweep(out), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
    killed = 0
    time.sleep(4)
    while killed < 3 and p.poll() is None:
        workers = subprocess.run(["pgrep", "-P", str(p.pid), "-f", "worker"], capture_output=True, text=True)
        pids = [int(x) for x in workers.stdout.split()]
        if pids:
            os.kill(pids[0], signal.SIGKILL)
            killed += 1
        time.sleep(3)
    text = p.communicate()[0]
    wanted = [l for l in text.splitlines() if "killed by a signal" in l or l.startswith("24 runs")]
    crashed = sum(1 for l in text.splitlines() if l.split(":")[0].endswith("crashed"))
    print(f"outside: {killed} workers SIGKILLed; exit {p.returncode}; " + " / ".join(wanted) +
          f"; crashed findings: {crashed}")
