#!/usr/bin/env python3
"""How long ``densegate prove`` takes, and where the time goes: a benchmark, never a test.

Runs ``densegate prove --json`` (the default run, or the ``--level`` options given) as
a user does, in a fresh subprocess per repeat, and prints the median wall seconds, the
CPU seconds of the run (its workers included), and the seconds each level and the
slowest obligations report (an obligation's seconds are its own proof and, for a code
obligation, its mutants; a model obligation's mutants run as tasks of their own). The
goal the project keeps is a default run under 10 s wall on an idle 2-core machine:
the script prints the median beside it and says whether the run was idle (the load
average before it started), since a busy machine's figure says little. Run from the
repository root: ``python benchmarks/prove_time.py [--repeats N] [--level L ...]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from typing import Any

GOAL_S = 10.0


def _run(levels: list[str]) -> tuple[float, float, dict[str, Any]]:
    """One ``densegate prove --json`` run: wall seconds, CPU seconds, its report."""
    argv = [sys.executable, "-m", "densegate.cli.main", "prove", "--json"]
    for lv in levels:
        argv += ["--level", lv]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"densegate prove exited {done.returncode}: {done.stdout[-500:]}{done.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, json.loads(done.stdout)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3, help="runs to take the median of")
    ap.add_argument("--level", action="append", default=[], help="only this level; repeatable")
    ap.add_argument("--top", type=int, default=6, help="slowest obligations to list")
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error(f"--repeats must be >= 1, got {args.repeats}")
    load = os.getloadavg()[0]
    runs = [_run(args.level) for _ in range(args.repeats)]
    walls, cpus = [r[0] for r in runs], [r[1] for r in runs]
    report = runs[-1][2]
    per_level: dict[str, float] = defaultdict(float)
    for ob in report["obligations"]:
        per_level[ob["level"]] += ob["seconds"]
    wall = statistics.median(walls)
    cores = os.cpu_count() or 1
    what = "the default run" if not args.level else "levels " + ", ".join(args.level)
    print(f"densegate prove ({what}), {args.repeats} runs on {cores} cores, load {load:.2f}")
    print(f"  wall s: median {wall:.2f} (runs {', '.join(f'{w:.2f}' for w in walls)})")
    print(f"  CPU s:  median {statistics.median(cpus):.2f} (workers included)")
    print("  seconds by level (the obligations' own, last run):")
    for name, s in per_level.items():
        print(f"    {name:<22} {s:6.2f}")
    slow = sorted(report["obligations"], key=lambda o: -o["seconds"])[: args.top]
    print("  slowest obligations: " + ", ".join(f"{o['id']} {o['seconds']:.2f}" for o in slow))
    idle = "idle" if load < 0.5 else "NOT idle: the figure is an upper bound"
    verdict = "under" if wall < GOAL_S else "NOT under"
    print(f"  goal: default run < {GOAL_S:.0f} s wall on an idle 2-core machine: {verdict} "
          f"({wall:.2f} s; machine {idle})")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
