"""``densegate bench --dp N --runner torch --policies ...``: the DP policies side by side,
measured on N real gloo rank processes (``densegate.lab.bench.dp_measured``)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

__all__ = ["dp_measured"]


def dp_measured(
    args: argparse.Namespace,
    workloads: list[str],
    policies: list[str],
    requests: int,
    progress: Callable[[str], None] | None,
) -> int:
    """Each workload through every policy in ``args.rounds`` (default 2) timed rounds
    (names already checked by ``densegate.cli.bench``)."""
    from densegate.lab.bench import WORKLOADS, bench_config
    from densegate.lab.bench.dp_measured import (
        format_measured_tables,
        measured_rows,
        run_measured_policies,
    )
    from densegate.lab.bench.dp_policies import goal
    from densegate.lab.bench.dp_runs import dp_trace

    rounds = args.rounds if args.rounds is not None else 2
    engine = bench_config(runner="torch", device=args.device)
    out = []
    ok = True
    for name in workloads:
        trace = dp_trace(WORKLOADS[name], args.seed, args.dp, requests)
        try:
            runs = run_measured_policies(trace, engine, args.dp, policies, rounds, args.seed)
        except RuntimeError as e:  # a rank process failed: its own output said why
            print(f"densegate bench: {name}: {e}", file=sys.stderr)
            return 1
        rows = measured_rows(runs)
        ok = ok and all(r["finished"] == len(trace) for r in rows)
        out.append({"name": name, "load": 1.0, "requests": len(trace), "policies": rows,
                    "goal": goal(rows)})  # fmt: skip
        if progress is not None:
            progress(f"{name}: {len(trace)} requests over {args.dp} rank processes, "
                     f"{len(policies)} policies x {rounds} rounds done")  # fmt: skip
    if args.json:
        print(json.dumps({"dp": args.dp, "measured": True, "runner": "torch",
                          "device": args.device, "rounds": rounds, "workloads": out}))  # fmt: skip
    else:
        print(format_measured_tables(out, args.dp, f"torch on {args.device}"))
    return 0 if ok else 1
