"""`spikehunt doctor [--steps N] [--overfit-steps N] [--heldout N] [--json] [--out DIR] [--env K=V]
-- COMMAND`: the doctor on the user's training command, unmodified (docs/commands.md).

The command runs under the monitor as with `run -- COMMAND`; its process also captures the model
before its first step, the optimizer, the loss call and the first N steps' batches plus held-out
ones (_capture.py), ends the script there and runs the doctor in itself on a scenario built from
them. This launcher prints the command's output (to stderr with --json), then the report. Where the
hooks cannot replay the training (several optimizers, accumulation, a loss computed by code of the
script's own), the doctor says why and reads the signs the hooks can read on the script's own steps
(_hook_signs.py).
Exit codes: the doctor's (0 every sign passed, 1 a finding), 2 bad input, 130 interrupted.
"""
import json
import os
import shutil
import sys
import tempfile

from . import _command

USAGE = ("usage: spikehunt doctor [--steps N] [--overfit-steps N] [--heldout N] [--json] [--out DIR] "
         "[--env NAME=VALUE] -- COMMAND [ARGS...]")
_NUMBERS = {"--steps": 100, "--overfit-steps": 1000, "--heldout": 1000}


def _flags(argv):
    flags, command = argv[:argv.index("--")], argv[argv.index("--") + 1:]
    settings = {"out": "results", "rules": {}, "steps": 0, "json": False,
                **{k[2:].replace("-", "_"): v for k, v in _NUMBERS.items()}}
    i = 0
    while i < len(flags):
        flag, value = flags[i], None
        if flag == "--json":
            settings["json"], i = True, i + 1
            continue
        if "=" in flag and flag.startswith("--"):
            flag, value = flag.split("=", 1)
        if flag not in (*_NUMBERS, "--out", "--env"):
            raise _command._BadInput(f"doctor -- COMMAND: {flags[i]!r} is not a flag of doctor on a command (it "
                                     f"takes --steps, --overfit-steps, --heldout, --json, --out, --env)\n{USAGE}")
        if value is None:
            if i + 1 == len(flags):
                raise _command._BadInput(f"doctor: {flag} needs a value\n{USAGE}")
            value, i = flags[i + 1], i + 1
        i += 1
        if flag in _NUMBERS:
            if not value.isdigit() or int(value) < 1:
                raise _command._BadInput(f"doctor: {flag} = {value!r}: a whole number, 1 or more")
            settings[flag[2:].replace("-", "_")] = int(value)
        elif flag == "--out":
            settings["out"] = value
        else:
            settings.setdefault("env", []).append(_command._env_pair(value, "doctor"))
    if not command:
        raise _command._BadInput(f"doctor: nothing after `--`: give the training command to examine\n{USAGE}")
    return settings, command


def run(argv):
    """`doctor -- COMMAND`: returns the exit code."""
    try:
        settings, command = _flags(argv)
    except _command._BadInput as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    os.makedirs(settings["out"], exist_ok=True)
    work = tempfile.mkdtemp(prefix=".spikehunt-command-", dir=settings["out"])
    report = os.path.join(work, "doctor.report")
    settings["doctor"] = {"steps": settings["steps"], "heldout": settings["heldout"], "json": settings["json"],
                          "overfit_steps": settings["overfit_steps"], "report": report}
    settings["steps"] = 0  # the capture ends the script
    try:
        return _doctor(settings, command, " ".join(command), report, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _doctor(settings, command, shown, report, work):
    echo = sys.stderr if settings["json"] else sys.stdout
    try:
        code, last, statuses = _command.execute_under("doctor", command, shown, settings, work, echo=echo)
    except _command.Stopped as s:
        return s.code
    main = _command.watched(statuses)
    if main is None or not main.get("doctor"):
        why = _command.nothing_watched(statuses, code)
        print(f"error: doctor -- {shown}: {why} (exit {code}); its last lines:\n{last}", file=sys.stderr)
        return 2 if not any(s.get("abrupt") for s in statuses) else 1
    d = main["doctor"]
    if d.get("error"):
        print(f"error: doctor -- {shown}: the doctor failed on the captured training (a bug of spikehunt's):\n"
              f"{d['error']}", file=sys.stderr)
        return 3
    if d["rc"] is None or not os.path.exists(report):
        reasons = d["reasons"] or ["the command ended before its first step could be captured"]
        print(f"error: doctor -- {shown}: nothing to examine: " + "; ".join(reasons), file=sys.stderr)
        return 1
    with open(report, "rb") as f:
        text = f.read().decode(errors="replace")
    if d.get("read"):
        return _read(settings, command, shown, d, main, text)
    if settings["json"]:
        document = json.loads(text)
        document["title"] = f"{shown}: {d['model']}"
        document["command"] = {"argv": command, "captured_steps": d["train"], "heldout_samples": d["heldout"],
                               "heldout_from": d["heldout_from"], "notes": d["notes"]}
        print(json.dumps(document, indent=2))
    else:
        print(f"\ncaptured   {d['train']} training step(s) of {shown}; held-out: {d['heldout']} sample(s)"
              + (f" ({'; '.join(d['heldout_from'])})" if d["heldout_from"] else ""))
        for n in d["notes"]:
            print(f"note       {n}")
        # The report's header names the command and its model, not the scenario the capture built.
        head, captured, rest = text.partition('scenario "captured" (_Captured)')
        if captured and head.startswith("spikehunt doctor: ") and "\n" not in head:
            text = f"spikehunt doctor: {shown}: {d['model']}" + rest
        sys.stdout.write(text)
    return d["rc"]


def _read(settings, command, shown, d, main, text):
    """Training the copies cannot replay: the report of the signs the hooks read (_hook_signs.py)."""
    why = ("they train copies of the script's model, optimizer and loss, or probe its model with batches of their "
           "own: a spikehunt.Scenario (docs/python.md) gives them those")
    if settings["json"]:
        document = json.loads(text)
        document["title"] = f"{shown}: read through the hooks"
        document["command"] = {"argv": command, "not_run": d["reasons"], "needs_scenario": document.pop("needs_scenario"),
                               "needs_scenario_why": why, "watched": [w["verdict"] for w in main["watches"]]}
        print(json.dumps(document, indent=2))
    else:
        watched = "; ".join(f"{w['optimizer']}: {w['verdict']['outcome']} ({w['verdict'].get('steps_run', 0)} steps)"
                            for w in main["watches"])
        print(f"\ndoctor -- {shown}: the hooks cannot replay its training, so the doctor's copies do not run: "
              + "; ".join(d["reasons"]) + ".\n  The signs below are read through the hooks on the script's own "
              f"steps; the others are not run: {why}.")
        print(f"watched    {watched}")
        print(f"spikehunt doctor: {shown}: read through the hooks")
        sys.stdout.write(text)
    return d["rc"]
