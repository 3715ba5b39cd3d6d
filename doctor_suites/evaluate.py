"""The one evaluation harness of the doctor's suites: runs the doctor on every case of a suite in
this process and reports as the field's anchors (DeepFD, TrainCheck) report: per bug, whether a
sign fired (detected) and whether the top-ranked cause is the expected one (diagnosed); per healthy
program, over seeds and learning rates, any failed sign (a false alarm).

A suite is its expectations and its healthy programs. An expectation is either
(source, sign, phrase): the top sign must be `sign` and its cause contain `phrase` (the public and
unseen suites), or (part, regex): the top cause must match `regex` (case-insensitive; the
development suite, whose expectations name a faulty part and a mechanism, not a sign).

    suite.main(description)   # [--bugs | --healthy] [--only CASE ...] [--json FILE]

Exit code 0 when every bug is diagnosed and no healthy run raised an alarm, 1 otherwise."""
import argparse
import json
import os
import re
import sys
import tempfile
import time

import spikehunt

DOCTOR_FLAGS = ["--steps", "40", "--overfit-steps", "300", "--json"]


def doctor(config, scenario, *sets, flags=DOCTOR_FLAGS):
    """The doctor's JSON report on one case, run in this process (its stdout captured at the fd)."""
    argv = ["suite", "doctor", "--config", config, "--set", f'scenario="{scenario}"', *flags]
    for s in sets:
        argv += ["--set", s]
    sys.stdout.flush()
    saved = os.dup(1)
    with tempfile.TemporaryFile() as out:
        os.dup2(out.fileno(), 1)
        try:
            rc = spikehunt.main(argv, exit=False)
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)
        out.seek(0)
        return rc, json.loads(out.read().decode())


def failed(report):
    return [s["name"] for s in report["signs"] if not s["passed"]]


def swaps_of(report):
    """The parts the doctor swapped and what each did: [(swap, learned)] from faulty_part's trials."""
    for s in report.get("signs", []):
        if s["name"] == "faulty_part":
            return [(t["swap"], t["learned"]) for t in (s.get("data") or {}).get("trials", [])]
    return []


def judge(expectation, top):
    """Whether the top cause {sign, cause} is the expected diagnosis, and the expectation's columns."""
    cause = top.get("cause") or ""
    if len(expectation) == 3:
        source, sign, phrase = expectation
        return top.get("sign") == sign and phrase in cause, {"source": source, "expected": sign,
                                                             "expected_phrase": phrase}
    part, pattern = expectation
    return re.search(pattern, cause, re.IGNORECASE) is not None, {"expected_part": part, "expected": pattern}


class Suite:
    """One suite: its expectations, its healthy programs, its config, seeds and learning rates."""

    def __init__(self, expected, healthy, config, lrs=None, default_lrs=(0.01, 0.03, 0.1), seeds=(0, 1, 2),
                 flags=DOCTOR_FLAGS):
        self.expected, self.healthy, self.config = expected, healthy, config
        self.lrs, self.default_lrs, self.seeds, self.flags = lrs or {}, list(default_lrs), list(seeds), flags
        self.full = False

    def doctor(self, scenario, *sets):
        return doctor(self.config, scenario, *sets, flags=self.flags)

    def run_bugs(self, only=None):
        rows = []
        for case, expectation in self.expected.items():
            if only and case not in only:
                continue
            start = time.time()
            rc, report = self.doctor(case)
            top = report["most_likely_cause"] or {}
            diagnosed, columns = judge(expectation, top)
            rows.append({"case": case, **columns, "top": top.get("sign"), "cause": top.get("cause"),
                         "part": top.get("part"), "other_signs": [n for n in failed(report) if n != top.get("sign")],
                         "detected": rc == 1 and bool(failed(report)), "diagnosed": diagnosed,
                         "contradictions": report.get("contradictions", []), "corrections": report.get("corrections", []),
                         "swaps": swaps_of(report), "seconds": round(time.time() - start, 1),
                         **({"report": report} if self.full else {})})
        return rows

    def run_healthy(self, only=None):
        rows = []
        for case in self.healthy:
            if only and case not in only:
                continue
            for lr in self.lrs.get(case, self.default_lrs):
                for seed in self.seeds:
                    start = time.time()
                    rc, report = self.doctor(case, f"seed={seed}", f"optimizer.lr={lr}")
                    causes = {s["name"]: s.get("cause") for s in report["signs"] if not s["passed"]}
                    rows.append({"case": case, "seed": seed, "lr": lr, "alarms": list(causes), "causes": causes,
                                 "rc": rc, "contradictions": report.get("contradictions", []),
                                 "seconds": round(time.time() - start, 1), **({"report": report} if self.full else {})})
        return rows

    def main(self, description):
        parser = argparse.ArgumentParser(description=description)
        parser.add_argument("--bugs", action="store_true", help="only the publicly reported bugs")
        parser.add_argument("--healthy", action="store_true", help="only the healthy programs")
        parser.add_argument("--only", nargs="*", help="these cases only")
        parser.add_argument("--json", help="write the rows to this file")
        parser.add_argument("--full", action="store_true", help="with each case's whole report in its row")
        args = parser.parse_args()
        self.full = args.full
        both = not args.bugs and not args.healthy
        bugs = self.run_bugs(args.only) if args.bugs or both else []
        healthy = self.run_healthy(args.only) if args.healthy or both else []
        if bugs:
            print("| case | expected | top cause | other signs |")
            print("| --- | --- | --- | --- |")
            for r in bugs:
                mark = "" if r["diagnosed"] else " **(wrong)**"
                print(f"| {r['case']} | {r.get('expected_part') or r['expected']} | {r['top']}{mark}: {r['cause']} | "
                      f"{', '.join(r['other_signs']) or '-'} |")
            print(f"\nbugs: {len(bugs)}, detected {sum(r['detected'] for r in bugs)}, "
                  f"diagnosed (right top cause) {sum(r['diagnosed'] for r in bugs)}")
        if healthy:
            alarms = [r for r in healthy if r["alarms"]]
            for r in alarms:
                print(f"false alarm: {r['case']} seed {r['seed']} lr {r['lr']}: "
                      + "; ".join(f"{k}: {v}" for k, v in r["causes"].items()))
            programs = len({r["case"] for r in healthy})
            print(f"healthy runs: {len(healthy)} ({programs} programs x {len(self.seeds)} seeds x learning rates), "
                  f"false alarms {len(alarms)}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"bugs": bugs, "healthy": healthy}, f, indent=1)
        ok = all(r["diagnosed"] for r in bugs) and not any(r["alarms"] for r in healthy)
        sys.exit(0 if ok else 1)
