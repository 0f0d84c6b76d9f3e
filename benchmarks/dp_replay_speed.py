#!/usr/bin/env python3
"""The modeled data-parallel replay's speed: the greenlet driver against the threads one.

``densegate bench --dp N --cost P --policies ...`` replays every workload through
N real rank loops over an in-process collective (``densegate.lab.bench.dp_runs``).
This runs that replay (``run_dp_policies``, as the bench calls it) on both drivers
in the same run, in alternation:

- ``threads``, the older driver: a thread per rank over a ``threading.Barrier``,
  every rank drawing every request's prompt;
- ``greenlet``: every rank a greenlet of one thread, one sum per tick, one draw of
  the prompts for all ranks.

Both skip building the per-tick stream records nobody keeps (the in-process
collective says ``keeps_stream = False``), so the ratio understates the gain over
the replay before that change. Each row prints policy decisions per second (one
per rank per tick, every policy's phase) and group ticks per second, medians over
the repeats, and the ratio of the greenlet driver to the threads one; the replay's
outputs (every decision, assignment and modeled figure) must be identical on both,
and the script says so or exits 1. Run from the repository root:
``python benchmarks/dp_replay_speed.py`` (``--quick`` for a smoke run).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

from densegate.lab.bench import WORKLOADS, bench_config
from densegate.lab.bench.dp_policies import run_dp_policies
from densegate.lab.bench.dp_runs import DRIVERS, dp_trace, using_driver
from densegate.lab.cost.profile import Profile

_MEASURED = ("wall_s", "collective_ms_per_tick")  # a report's clock readings


def outcome(runs: dict[str, dict[str, Any]]) -> str:
    """Everything the replay decided and modeled, without its clock readings, as JSON."""
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
    return json.dumps(out, sort_keys=True, default=str)


def counts(runs: dict[str, dict[str, Any]]) -> tuple[int, int]:
    """Policy decisions (every rank's, every policy's) and group ticks of one replay."""
    decisions = sum(
        len(rep.decisions) + len(rep.local_decisions) for r in runs.values() for rep in r["reports"]
    )
    ticks = sum(max(rep.ticks for rep in r["reports"]) for r in runs.values())
    return decisions, ticks


def measure(
    workload: str, dp: int, requests: int, policies: Sequence[str], model: Any, repeats: int
) -> dict[str, Any]:
    trace = dp_trace(WORKLOADS[workload], 0, dp, requests)
    engine = bench_config()
    seconds: dict[str, list[float]] = {d: [] for d in DRIVERS}
    seen: dict[str, set[str]] = {d: set() for d in DRIVERS}
    work = (0, 0)
    for i in range(repeats):
        for driver in DRIVERS if i % 2 == 0 else DRIVERS[::-1]:
            with using_driver(driver):
                t0 = time.perf_counter()
                runs = run_dp_policies(trace, engine, dp, model, policies)
                seconds[driver].append(time.perf_counter() - t0)
            seen[driver].add(outcome(runs))
            work = counts(runs)
    same = len(seen["greenlet"] | seen["threads"]) == 1
    return {"workload": workload, "requests": len(trace), "work": work,
            "seconds": seconds, "identical": same}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--dp", type=int, default=8)
    ap.add_argument("--workloads", default="steady,chat")
    ap.add_argument("--policies", default="densegate,gate-off,sglang-delayer")
    ap.add_argument("--requests", type=int, default=30, help="per rank, as bench --requests")
    ap.add_argument("--cost", default="roofline:H100-SXM")
    ap.add_argument("--repeats", type=int, default=3, help="runs per driver (median)")
    ap.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run, not a measure")
    args = ap.parse_args(argv)
    dp, requests, repeats = (2, 4, 1) if args.quick else (args.dp, args.requests, args.repeats)
    policies = args.policies.split(",")
    model = Profile.load(args.cost).model
    print(f"modeled DP replay, dp={dp}, policies {', '.join(policies)}, {args.cost}; "
          f"medians of {repeats} run(s) per driver, drivers alternating")  # fmt: skip
    head = f"{'workload':>10} {'requests':>8} {'decisions':>9} {'ticks':>6}"
    for d in DRIVERS:
        head += f" | {d + ' s':>11} {'decisions/s':>11} {'ticks/s':>8}"
    print(head + " | greenlet / threads")
    ok = True
    for w in args.workloads.split(","):
        m = measure(w, dp, requests, policies, model, repeats)
        decisions, ticks = m["work"]
        row = f"{w:>10} {m['requests']:>8} {decisions:>9} {ticks:>6}"
        med = {d: statistics.median(m["seconds"][d]) for d in DRIVERS}
        for d in DRIVERS:
            row += f" | {med[d]:>11.3f} {decisions / med[d]:>11.0f} {ticks / med[d]:>8.0f}"
        ratio = med["threads"] / med["greenlet"]
        fastest = min(m["seconds"]["threads"]) / min(m["seconds"]["greenlet"])
        print(row + f" | {ratio:.2f}x (min: {fastest:.2f}x)"
              + ("" if m["identical"] else "  OUTPUTS DIFFER"))  # fmt: skip
        ok = ok and m["identical"]
    print("outputs identical on both drivers" if ok else "the drivers' outputs DIFFER")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
