#!/usr/bin/env python3
"""The cost of `spikehunt run -- COMMAND` (docs/benchmarks.md): the same plain script
(bench/python/command_workload.py) run as it is and under the injected monitor, in alternating
processes, `--rounds` times. Reports, as ratios measured in this run:
  - step: the median over rounds of (median watched step / median plain step) within one process of
    the script under the monitor, its even steps watched and its odd ones not (the hooks registered,
    returning at once: the Watch's and the callbacks' measure, immune to the drift between runs), each
    step timed by the script itself;
  - start-up: the median over rounds of (the wall time of `spikehunt run --steps 1 -- python script`
    minus that of `python script --steps 1`), in seconds: what the launcher and the attach add.

    PYTHONPATH=build/python .venv/bin/python bench/python/command_bench.py [--rounds 5] [--steps 60]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOAD = os.path.join(HERE, "command_workload.py")


def steps_of(output):
    line = next(l for l in reversed(output.splitlines()) if l.startswith('{"step_ms"'))
    return json.loads(line)["step_ms"]


def timed(command):
    start = time.perf_counter()
    p = subprocess.run(command, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(command)}: exit {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return time.perf_counter() - start, p.stdout


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    import torch
    blas = "MKL" if "MKL" in torch.__config__.show() else "OpenBLAS" if "OpenBLAS" in torch.__config__.show() else "?"
    print(f"torch {torch.__version__}, {args.threads} threads, BLAS {blas} (picked at run time), "
          f"{os.cpu_count()} CPUs; {args.rounds} rounds of {args.steps} steps")
    plain = [sys.executable, WORKLOAD, "--steps", str(args.steps), "--threads", str(args.threads)]
    ratios, startups = [], []
    with tempfile.TemporaryDirectory() as out:
        watched = [sys.executable, "-m", "spikehunt", "run", "--out", out, "--"] + plain
        from spikehunt import _command
        work = tempfile.mkdtemp(dir=out)
        env = _command._environment({"out": out, "steps": 0, "rules": {}, "alternate": True}, work)
        for r in range(args.rounds):
            p = subprocess.run(plain + ["--warmup", "4"], capture_output=True, text=True, env=env)
            if p.returncode != 0:
                sys.exit(f"the alternating run: exit {p.returncode}\n{p.stderr[-2000:]}")
            times = steps_of(p.stdout)  # from step 4: even steps watched, odd ones not
            medians = {True: statistics.median(times[0::2]), False: statistics.median(times[1::2])}
            ratios.append(medians[True] / medians[False])
            t_plain, _ = timed(plain[:2] + ["--steps", "1", "--warmup", "0"])
            t_watched, _ = timed(watched[:7] + plain[:2] + ["--steps", "1", "--warmup", "0"])
            startups.append(t_watched - t_plain)
            print(f"round {r}: plain {medians[False]:.2f} ms, watched {medians[True]:.2f} ms a step "
                  f"(x{ratios[-1]:.3f}); start-up {t_plain:.2f} s plain, {t_watched:.2f} s watched")
    print(f"step: watched / plain, median over rounds: x{statistics.median(ratios):.3f}")
    print(f"start-up added by spikehunt run --, median over rounds: {statistics.median(startups):.2f} s")


if __name__ == "__main__":
    main()
