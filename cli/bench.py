"""``densegate bench``: the same seeded workloads through the engine once per policy."""

from __future__ import annotations

import argparse
import json
import sys

HELP = "replay seeded workloads through every policy and print one table per workload"

TORCH_REQUESTS = 60
"""Default requests per workload with the torch runner (the CPU model is slow)."""


def _names(values: list[str] | None, known: list[str]) -> list[str]:
    """``--x a b`` and ``--x a,b`` both work; none given means all."""
    if not values:
        return known
    return [n for v in values for n in v.split(",") if n]


def add_arguments(p: argparse.ArgumentParser) -> None:
    from densegate.impl.bench import BENCH_POLICIES, WORKLOADS

    p.add_argument(
        "--workloads",
        nargs="+",
        metavar="NAME",
        help=f"workloads, space- or comma-separated (default all: {', '.join(WORKLOADS)})",
    )
    p.add_argument(
        "--policies",
        nargs="+",
        metavar="NAME",
        help=f"policies (default all: {', '.join(BENCH_POLICIES)})",
    )
    p.add_argument(
        "--runner",
        choices=["null", "torch"],
        default="null",
        help="null schedules only (figures in passes); torch runs the seeded model and adds "
        "milliseconds and tokens/s",
    )
    p.add_argument("--device", default="cpu", help="torch device (default cpu)")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        metavar="N",
        help="torch CPU threads with the torch runner (default 1: the tiny model gains nothing "
        "from more, and on a shared CPU thread contention swamps the step times; 0: torch's "
        "default)",
    )
    p.add_argument("--seed", type=int, default=0, help="workload seed (default 0)")
    p.add_argument(
        "--requests",
        type=int,
        metavar="N",
        help=f"requests per workload (default: each workload's size with the null runner, "
        f"{TORCH_REQUESTS} with torch)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--plot", metavar="DIR", help="write TTFT CDF and prefill fill PNGs to DIR")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")


def main(args: argparse.Namespace) -> int:
    from densegate.impl.bench import (
        BENCH_POLICIES,
        WORKLOADS,
        format_tables,
        run_bench,
        write_plots,
    )

    workloads = _names(args.workloads, list(WORKLOADS))
    policies = _names(args.policies, list(BENCH_POLICIES))
    requests = args.requests
    if requests is None and args.runner == "torch":
        requests = TORCH_REQUESTS

    if args.runner == "torch" and args.threads > 0:
        import torch

        torch.set_num_threads(args.threads)

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        result = run_bench(
            workloads,
            policies,
            runner=args.runner,
            seed=args.seed,
            requests=requests,
            device=args.device,
            progress=None if args.quiet else progress,
        )
    except ValueError as e:
        print(f"densegate bench: {e}", file=sys.stderr)
        return 2
    plots = write_plots(result, args.plot) if args.plot else []
    if args.json:
        out = result.to_json()
        out["plots"] = [str(p) for p in plots]
        print(json.dumps(out))
    else:
        print(format_tables(result))
        for path in plots:
            print(f"wrote {path}")
    return 0 if result.drained else 1
