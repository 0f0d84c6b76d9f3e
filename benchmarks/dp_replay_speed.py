#!/usr/bin/env python3
"""The modeled data-parallel replay's speed: this tree against a baseline commit's, in one run.

``densegate bench --dp N --cost P --policies ...`` replays every workload through
N real rank loops over an in-process collective (``densegate.lab.bench.dp_runs``).
This measures that replay (``run_dp_policies``, as the bench calls it) on the
baseline commit (default 458a4e7, the tree before the replay was made fast) and on
this tree, in the same run, alternating:

- the baseline's tree is exported (``git archive``) to a temporary folder and
  imported as ``densegate`` from there (a folder of symlinks maps its top-level
  folders, as its ``pyproject.toml`` does), in a subprocess that sees nothing of
  this tree's install;
- each measurement is a fresh subprocess (baseline and this tree taking turns), so
  neither warms the other's caches; the replay alone is timed, not the imports.

Rows: ``ticks``, the same trace on both trees on the tick clock (the baseline
bench's only clock); and ``seconds``, this tree's bench default (arrivals in
modeled seconds at ``--load``, the profile's default gate), which does more work
per tick (it prices every pass) than the baseline's replay did. Each prints policy
decisions per second (one per rank per tick, every policy's phase) and group ticks
per second, medians over the repeats, and the ratio of decisions per second to the
baseline's (the two trees' peers differ, so their decision counts do too: the
rate is the comparable figure). CPU seconds of the subprocess are the clock
(``--clock wall`` for wall seconds); on a machine busy with other work wall time
is noisier. The baseline's ranks are threads (its only driver) handing over at
every collective, and what that costs depends on where the OS runs them: on idle
cores the hand-overs cross cores and cost up to twice what they cost on one core,
so the ratio is printed as the bench runs (unpinned) and, with ``--pin CPU``, with
every measurement but the sweep row's on one core (this tree's replay is one thread
either way). Every repeat of a row must decide and model exactly the same on this
tree, and the script says so or exits 1. Last, the ``sweep`` row: the bench as it runs
a sweep (``bench --jobs N``, one process per CPU by default), its own ``side_by_side`` over
every workload at loads 0.3, 0.6 and 0.9, the cells in N spawned worker processes,
timed on the wall clock (capacity probes and process start-up included) against the
baseline rows' wall clock, since the cores it adds are what it measures. Run from the
repository root:
``python benchmarks/dp_replay_speed.py`` (``--quick`` for a smoke run).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BASELINE = "458a4e7"
"""The commit before the replay was made fast (issue 31, item 5)."""
POLICIES = "densegate,gate-off,vllm-cadence,sglang-delayer,atom-coalescer,trtllm-adp"
"""Policy names both trees know (this tree's ``vllm-cadence`` is ``vllm-cadence-2``)."""
JOB_LOADS = (0.3, 0.6, 0.9)
"""The sweep row's loads, the issue's: one (workload, load) cell a process."""
_FOLDERS = ("spec", "impl", "proofs", "lab", "cli", "integrations")
_MEASURED = ("wall_s", "collective_ms_per_tick")  # a report's clock readings
_ROOT = Path(__file__).resolve().parent.parent


def export(commit: str, into: Path) -> Path:
    """``commit``'s tree under ``into``, and a folder whose ``densegate`` maps it as the
    package does (``pyproject.toml``'s package-dir); returns the folder for ``sys.path``."""
    tree = into / "tree"
    tree.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(_ROOT), "archive", commit], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    pkg = into / "path" / "densegate"
    pkg.mkdir(parents=True)
    for name in _FOLDERS:
        if (tree / name).is_dir():
            (pkg / name).symlink_to(tree / name)
    (pkg / "testing").symlink_to(tree / "proofs" / "testing")
    return into / "path"


# -- the worker: one measurement in a subprocess -------------------------------------------
def _outcome(runs: dict[str, dict[str, Any]]) -> str:
    """A digest of everything the replay decided and modeled, clock readings left out."""
    out = {}
    for name, r in runs.items():
        reps = []
        for rep in r["reports"]:
            d = rep.as_dict()
            for k in _MEASURED:
                d.pop(k)
            d["figures"].pop("runner_ms_per_pass", None)
            d["timing"] = {k: d["timing"][k] for k in ("output_tokens", "work", "requests")}
            reps.append(d)
        out[name] = {"modeled": r["modeled"], "reports": reps}
    return hashlib.sha256(json.dumps(out, sort_keys=True, default=str).encode()).hexdigest()


def worker(args: argparse.Namespace) -> dict[str, Any]:
    """Import ``densegate`` (from ``args.tree`` if given), replay once, say what it took."""
    if args.pin is not None:  # before any thread starts: the baseline's ranks are threads
        os.sched_setaffinity(0, {args.pin})
    if args.tree:  # the export, and nothing of this tree's install
        sys.path[:] = [args.tree] + [p for p in sys.path if "__editable__" not in p]
    if args.replay != "jobs":
        shared = (args.dp, args.requests, args.cost, args.policies)
        return replay(args.workload, *shared, args.replay, args.load)
    # the bench as run (``bench --jobs``): its sweep function, every (workload, load) cell,
    # the wall clock of them all, capacity probes and process start-up included
    from densegate.lab.bench import WORKLOADS, bench_config
    from densegate.lab.bench.dp_side import Sweep, default_gate, side_by_side
    from densegate.lab.cost.profile import Profile

    model, engine = Profile.load(args.cost).model, bench_config()
    policies, gate = tuple(args.policies.split(",")), default_gate(model, engine)
    sweep = Sweep(engine, model, args.dp, 0, args.requests, JOB_LOADS, policies, "seconds", gate)
    c0, w0 = time.process_time(), time.perf_counter()
    out = side_by_side(sweep, [WORKLOADS[n] for n in args.workload.split(",")], args.jobs)
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    rows = [r for e in out for r in e["policies"]]
    digest = hashlib.sha256(json.dumps(out, sort_keys=True).encode()).hexdigest()
    return {"cpu_s": cpu, "wall_s": wall, "decisions": sum(r["decisions"] for r in rows),
            "ticks": sum(r["ticks"] for r in rows), "requests": sum(e["requests"] for e in out),
            "outcome": digest}  # fmt: skip


def replay(
    name: str, dp: int, requests: int, cost: str, policies: str, clock: str, load: float
) -> dict[str, Any]:
    """One replay of every policy on one workload (``ticks``: the trace as is; ``seconds``:
    arrivals at ``load``, as the bench builds one cell), and what it took."""
    from densegate.lab.bench import WORKLOADS, bench_config
    from densegate.lab.bench.dp_policies import run_dp_policies
    from densegate.lab.bench.dp_runs import dp_trace
    from densegate.lab.cost.profile import Profile

    workload = WORKLOADS[name]
    model = Profile.load(cost).model
    engine = bench_config()
    kw: dict[str, Any] = {}
    if clock == "ticks":
        trace = dp_trace(workload, 0, dp, requests)
    else:  # as densegate.lab.bench.dp_side.side_by_side builds it for one load
        from densegate.lab.bench.dp_seconds import (
            arrival_rate,
            capacity_tokens_per_s,
            seconds_trace,
        )
        from densegate.lab.bench.dp_side import default_gate

        probe = seconds_trace(workload, 0, dp, requests, 1.0)
        cap = capacity_tokens_per_s(probe, engine, dp, model, 0)
        trace = seconds_trace(workload, 0, dp, requests, arrival_rate(probe, load, cap))
        gate = default_gate(model, engine)
        kw = {"clock": "seconds", "pace_tokens": gate.pace_tokens,
              "surge_tokens": gate.surge_tokens}  # fmt: skip
    c0, w0 = time.process_time(), time.perf_counter()
    runs = run_dp_policies(trace, engine, dp, model, policies.split(","), 0, **kw)
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    decisions = sum(
        len(rep.decisions) + len(rep.local_decisions) for r in runs.values() for rep in r["reports"]
    )
    ticks = sum(max(rep.ticks for rep in r["reports"]) for r in runs.values())
    return {"cpu_s": cpu, "wall_s": wall, "decisions": decisions, "ticks": ticks,
            "requests": len(trace), "outcome": _outcome(runs)}  # fmt: skip


# -- the driver -----------------------------------------------------------------------------
def _measure(args: argparse.Namespace, tree: str, workload: str, replay: str) -> dict[str, Any]:
    # The sweep row is never pinned: the cores it adds are what it measures.
    pin = () if args.pin is None or replay == "jobs" else ("--pin", str(args.pin))
    cmd = [sys.executable, __file__, "--worker", "--tree", tree, "--workload", workload,
           "--replay", replay, "--dp", str(args.dp), "--requests", str(args.requests),
           "--policies", args.policies, "--cost", args.cost, "--load", str(args.load),
           "--jobs", str(args.jobs),
           *pin]  # fmt: skip
    env = dict(os.environ, PYTHONPATH="")  # the worker chooses its densegate itself
    done = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
    got: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return got


def _sweep(args: argparse.Namespace, base_rate: float) -> bool:
    """The sweep row: every workload at every ``JOB_LOADS`` cell in ``--jobs`` processes,
    as ``bench --jobs`` runs them, wall seconds against the baseline's wall seconds (the
    cores it adds are what it measures; CPU seconds would not show them)."""
    got = [_measure(args, "", args.workloads, "jobs") for _ in range(args.repeats)]
    s = statistics.median(g["wall_s"] for g in got)
    decisions, ticks = got[0]["decisions"], got[0]["ticks"]
    loads = ",".join(map(str, JOB_LOADS))
    print(f"sweep of {args.workloads} at loads {loads}, seconds clock, {args.jobs} process(es), "
          f"wall seconds (the baseline's too: its rows' decisions over their wall seconds, "
          f"{base_rate:.0f} decisions/s)")  # fmt: skip
    same = len({g["outcome"] for g in got}) == 1
    print(f"{'sweep':>11} {'jobs=' + str(args.jobs):>7} {'this':>8} {decisions:>9} {ticks:>6} "
          f"{s:>7.3f} {decisions / s:>11.0f} {ticks / s:>8.0f} | {decisions / s / base_rate:.2f}x"
          + ("" if same else "  REPEATS DIFFER"))  # fmt: skip
    return same


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--baseline", default=BASELINE, help="the commit to compare against")
    ap.add_argument("--dp", type=int, default=8)
    ap.add_argument("--workloads", default="steady,bursty,long-prompt,chat")
    ap.add_argument("--policies", default=POLICIES)
    ap.add_argument("--requests", type=int, default=30, help="per rank, as bench --requests")
    ap.add_argument("--cost", default="roofline:H100-SXM")
    ap.add_argument("--load", type=float, default=0.9, help="the seconds row's --load")
    ap.add_argument("--repeats", type=int, default=3, help="runs per tree and row (median)")
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    ap.add_argument("--pin", type=int, default=None, metavar="CPU",
                    help="run every measurement on this one CPU (Linux): the baseline's "
                    "rank threads then hand over on one core")  # fmt: skip
    ap.add_argument(
        "--jobs",
        type=int,
        default=os.cpu_count() or 1,
        help="the jobs row's worker processes (bench --jobs; default one per CPU)",
    )
    ap.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run, not a measure")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--tree", default="", help=argparse.SUPPRESS)
    ap.add_argument("--workload", default="chat", help=argparse.SUPPRESS)
    ap.add_argument("--replay", default="ticks", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args)))
        return 0
    if args.quick:
        args.dp, args.requests, args.repeats = 2, 4, 1
    key = f"{args.clock}_s"
    print(f"modeled DP replay, dp={args.dp}, {args.requests} requests per rank, policies "
          f"{args.policies}, {args.cost}; medians of {args.repeats} run(s) per tree, "
          f"{args.clock} seconds, trees alternating; baseline {args.baseline}"
          + ("" if args.pin is None else f"; pinned to CPU {args.pin}"))  # fmt: skip
    head = f"{'workload':>11} {'replay':>7} {'tree':>8} {'decisions':>9} {'ticks':>6} "
    print(head + f"{'s':>7} {'decisions/s':>11} {'ticks/s':>8} | to baseline")
    ok = True
    with tempfile.TemporaryDirectory(prefix="dp_replay_speed.") as tmp:
        base = str(export(args.baseline, Path(tmp)))
        base_wall = [0.0, 0.0]  # the baseline's decisions and wall seconds, every workload
        for w in args.workloads.split(","):
            rows = ("base", "ticks", "seconds")
            runs: dict[str, list[dict[str, Any]]] = {r: [] for r in rows}
            for i in range(args.repeats):
                for which in rows if i % 2 == 0 else rows[::-1]:
                    tree, replay = (base, "ticks") if which == "base" else ("", which)
                    runs[which].append(_measure(args, tree, w, replay))
            rate = {}
            for which in rows:
                got = runs[which]
                s = statistics.median(g[key] for g in got)
                decisions, ticks = got[0]["decisions"], got[0]["ticks"]
                rate[which] = decisions / s
                same = len({g["outcome"] for g in got}) == 1
                ok = ok and (same or which == "base")
                ratio = "" if which == "base" else f"{rate[which] / rate['base']:.2f}x"
                replay = "ticks" if which == "base" else which
                label = args.baseline if which == "base" else "this"
                print(f"{w:>11} {replay:>7} {label:>8} {decisions:>9} {ticks:>6} {s:>7.3f} "
                      f"{rate[which]:>11.0f} {ticks / s:>8.0f} | {ratio}"
                      + ("" if same else "  REPEATS DIFFER"))  # fmt: skip
            base_wall[0] += runs["base"][0]["decisions"]
            base_wall[1] += statistics.median(g["wall_s"] for g in runs["base"])
        ok = _sweep(args, base_wall[0] / base_wall[1]) and ok
    print("every repeat identical" if ok else "repeats of this tree DIFFER")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
