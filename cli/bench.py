"""``densegate bench``: the same seeded workloads through the engine once per policy."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from densegate.cli.bench_names import (
    BENCH_STALL_DEFAULT,
    DP_POLICY_NAMES,
    POLICY_NAMES,
    WORKLOAD_NAMES,
)
from densegate.cli.flag_types import count, device, output_dir
from densegate.cli.options import MAX_REQUESTS, add_alias, add_quiet, add_threads, threads

HELP = "replay seeded workloads through every policy and print one table per workload"

TORCH_REQUESTS = 60
"""Default requests per workload with the torch runner (the CPU model is slow)."""


def _names(values: list[str] | None, known: list[str]) -> list[str]:
    """``--x a b`` and ``--x a,b`` both work; none given means all."""
    if not values:
        return known
    return [n for v in values for n in v.split(",") if n]


def _loads(text: str) -> list[float]:
    """``0.3,0.5,..``: positive fractions of the modeled capacity."""
    try:
        out = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers like 0.3,0.5, got {text!r}") from None
    if not out or any(not 0 < x <= 10 for x in out):
        raise argparse.ArgumentTypeError(f"each load must be in (0, 10], got {text!r}")
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--workload",
        dest="workloads",
        nargs="+",
        metavar="NAME",
        help=f"workloads, space- or comma-separated (default all: {', '.join(WORKLOAD_NAMES)})",
    )
    add_alias(p, "--workloads", "workloads", nargs="+")
    p.add_argument(
        "--policies",
        nargs="+",
        metavar="NAME",
        help=f"policies, space- or comma-separated (default all: {', '.join(POLICY_NAMES)}); "
        f"with --dp N: any of {', '.join(DP_POLICY_NAMES)} side by side in one table per "
        "workload (without --policies, --dp prints its phase tables as before)",
    )
    p.add_argument(
        "--runner",
        choices=["null", "torch"],
        default="null",
        help="null schedules only (figures in passes); torch runs the seeded model and adds "
        "milliseconds and tokens/s",
    )
    p.add_argument(
        "--device",
        type=device,
        default=None,
        help="torch device for --runner torch: cpu, cuda or cuda:N (default cpu)",
    )
    add_threads(p)
    p.add_argument(
        "--stall-passes",
        type=count(0),
        default=BENCH_STALL_DEFAULT,
        metavar="N",
        help="the densegate-stall column's STALL valve: fire an under-full pass once the "
        f"waiting fill has not grown for N passes (default {BENCH_STALL_DEFAULT}, so the "
        "column differs from densegate's; every other policy runs with the valve off; not "
        "used with --dp)",
    )
    p.add_argument("--seed", type=int, default=0, help="workload seed (default 0)")
    p.add_argument(
        "--requests",
        type=count(1, MAX_REQUESTS),
        metavar="N",
        help=f"requests per workload (default: each workload's size with the null runner, "
        f"{TORCH_REQUESTS} with torch; at most {MAX_REQUESTS})",
    )
    p.add_argument(
        "--cost",
        metavar="PROFILE",
        help="price every pass with a profile (a `densegate profile` JSON, or roofline:H100-SXM / "
        "roofline:H200) and print modeled tokens/s, TTFT and ITL beside the pass counts",
    )
    p.add_argument(
        "--dp",
        type=count(1),
        default=1,
        metavar="N",
        help="with --cost: N data-parallel ranks (in-process, null runner), phases coordinated, "
        "local gates and gate off, modeled; with --runner torch --policies: N real gloo rank "
        "processes, the policies measured (default 1)",
    )
    p.add_argument(
        "--rounds",
        type=count(1),
        default=None,
        metavar="R",
        help="with --runner torch: run the policies R times, order reversed every other round, "
        "and pool the measured times (default 2 with torch)",
    )
    p.add_argument(
        "--load",
        type=_loads,
        metavar="L,L,..",
        help="with --dp and --policies: arrival rate as a fraction of the modeled capacity "
        "(output tokens/s gate-off sustains with every request waiting at once), e.g. "
        "0.3,0.6,0.9; one table per workload and load (default 0.6; with --clock ticks: "
        "each workload as defined, load 1)",
    )
    p.add_argument(
        "--clock",
        choices=("seconds", "ticks"),
        default=None,
        help="with --dp and --policies: arrivals in modeled seconds, a tick costing the "
        "slowest rank's pass plus the collective (default), or in ticks (the old clock)",
    )
    p.add_argument(
        "--jobs",
        type=count(1, 64),
        default=None,
        metavar="N",
        help="with --dp and --policies: worker processes for the (workload, load) cells, "
        "each a seeded run, so the tables do not depend on N (default: one per CPU; 1: "
        "this process)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--plot",
        type=output_dir,
        metavar="DIR",
        help="write TTFT CDF and prefill fill PNGs to DIR (checked before the runs)",
    )
    add_quiet(p)


def main(args: argparse.Namespace) -> int:
    from densegate.lab.bench import (
        BENCH_POLICIES,
        WORKLOADS,
        format_tables,
        run_bench,
        write_plots,
    )
    from densegate.lab.bench.time_tables import format_cost_tables, format_time_tables
    from densegate.lab.cost.profile import Profile

    profile = None
    if args.cost:
        try:
            profile = Profile.load(args.cost)
        except (ValueError, OSError) as e:
            print(f"densegate bench: --cost {args.cost}: {e}", file=sys.stderr)
            return 2
    if args.device is not None and args.runner != "torch":
        print(f"densegate bench: --device {args.device} is for --runner torch", file=sys.stderr)
        return 2
    args.device = args.device or "cpu"
    workloads = _names(args.workloads, list(WORKLOADS))
    if args.dp > 1 and args.runner == "torch" and args.policies:
        if profile is not None or args.load or args.jobs:
            flag = "--cost" if profile is not None else "--load" if args.load else "--jobs"
            print(f"densegate bench: {flag} is for the modeled side by side; --dp "
                  f"{args.dp} --runner torch --policies measures", file=sys.stderr)  # fmt: skip
            return 2
        from densegate.cli.bench_measured import dp_measured

        policies = _names(args.policies, [])
        if not _dp_names_known(workloads, policies):
            return 2
        progress = None if args.quiet else _progress
        requests = TORCH_REQUESTS if args.requests is None else args.requests
        return dp_measured(args, workloads, policies, requests, progress)
    if args.dp > 1 and profile is None:
        print(f"densegate bench: --dp {args.dp} needs --cost (or --runner torch --policies "
              "to measure)", file=sys.stderr)  # fmt: skip
        return 2
    if args.dp > 1 and args.policies:
        return _dp_policies(args, profile, workloads, None if args.quiet else _progress)
    for flag, value in (("--load", args.load), ("--clock", args.clock), ("--jobs", args.jobs)):
        if value:
            print(f"densegate bench: {flag} needs --dp N, --cost and --policies", file=sys.stderr)
            return 2
    policies = _names(args.policies, list(BENCH_POLICIES))
    for what, names, known in (
        ("workload", workloads, WORKLOADS),
        ("policy", policies, BENCH_POLICIES),
    ):
        unknown = [n for n in names if n not in known]
        if unknown:
            print(
                f"densegate bench: unknown {what} {unknown[0]!r}; choose from {', '.join(known)}",
                file=sys.stderr,
            )
            return 2
    if args.plot:
        from densegate.impl.extras import require

        require("matplotlib", "densegate bench --plot")  # before the runs, not after
    requests = args.requests
    if requests is None and args.runner == "torch":
        requests = TORCH_REQUESTS

    n_threads = threads(args)
    if args.runner == "torch" and n_threads is not None:
        import torch

        torch.set_num_threads(n_threads)

    progress = _progress

    if profile is not None and args.dp > 1:
        return _dp_cost(args, profile, workloads, requests, None if args.quiet else progress)
    rounds = args.rounds if args.rounds is not None else (2 if args.runner == "torch" else 1)
    try:
        result = run_bench(
            workloads,
            policies,
            runner=args.runner,
            seed=args.seed,
            requests=requests,
            device=args.device,
            progress=None if args.quiet else progress,
            model=profile.model if profile is not None else None,
            rounds=rounds,
            stall_passes=args.stall_passes,
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
        if args.runner != "null":
            print("\n" + format_time_tables(result))
        if profile is not None:
            print("\n" + format_cost_tables(result, profile.describe()))
        for path in plots:
            print(f"wrote {path}")
    return 0 if result.drained else 1


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _dp_names_known(workloads: list[str], policies: list[str]) -> bool:
    """With ``--dp``: every workload and policy named is one; else one line on stderr."""
    from densegate.lab.bench import WORKLOADS
    from densegate.lab.bench.dp_policies import DP_POLICIES

    for what, names, known in (("workload", workloads, list(WORKLOADS)),
                               ("policy", policies, list(DP_POLICIES))):  # fmt: skip
        unknown = [n for n in names if n not in known]
        if unknown:
            print(f"densegate bench: unknown {what} {unknown[0]!r} with --dp; choose from "
                  f"{', '.join(known)}", file=sys.stderr)  # fmt: skip
            return False
    return True


def _dp_policies(
    args: argparse.Namespace, profile: Any, workloads: list[str], progress: Any
) -> int:
    """``bench --cost P --dp N --policies ...``: densegate, gate-off and the peers side by side."""
    from densegate.lab.bench import WORKLOADS, bench_config
    from densegate.lab.bench.dp_load import write_load_plots
    from densegate.lab.bench.dp_policies import DP_POLICIES, format_policy_tables
    from densegate.lab.bench.dp_side import Sweep, default_gate, side_by_side

    policies = _names(args.policies, list(DP_POLICIES))
    if not _dp_names_known(workloads, policies):
        return 2
    if args.plot:
        from densegate.impl.extras import require

        require("matplotlib", "densegate bench --plot")  # before the runs, not after
    clock = args.clock or "seconds"
    base = bench_config()
    gate = default_gate(profile.model, base)
    sweep = Sweep(base, profile.model, args.dp, args.seed, args.requests, tuple(args.load or ()),
                  tuple(policies), clock, gate)  # fmt: skip
    jobs = args.jobs if args.jobs is not None else (os.cpu_count() or 1)
    out = side_by_side(sweep, [WORKLOADS[n] for n in workloads], jobs, progress)
    ok = all(r["finished"] == e["requests"] for e in out for r in e["policies"])
    plots = write_load_plots(out, args.plot, args.dp) if args.plot else []
    meaning = (
        "arrival rate / modeled capacity, the output tokens per modeled second gate-off "
        "sustains with every request waiting at time 0" if clock == "seconds" else
        "arrival rate / modeled capacity, the requests per tick gate-off finishes with every "
        "request waiting at tick 0" if args.load else "1 = each workload as defined"
    )  # fmt: skip
    if args.json:
        print(json.dumps({
            "dp": args.dp, "clock": clock, "load_meaning": meaning, "densegate": gate.as_dict(),
            "profile": profile.to_json() | {"samples": len(profile.samples)}, "workloads": out,
            "plots": plots,
        }))  # fmt: skip
    else:
        print(format_policy_tables(out, args.dp, [*profile.describe(), gate.describe()], meaning,
                                   clock))  # fmt: skip
        for path in plots:
            print(f"wrote {path}")
    return 0 if ok else 1


def _dp_cost(
    args: argparse.Namespace,
    profile: Any,
    workloads: list[str],
    requests: int | None,
    progress: Any,
) -> int:
    """``bench --cost P --dp N``: each workload through N in-process ranks, modeled."""

    from densegate.lab.bench import WORKLOADS, bench_config
    from densegate.lab.bench.dp_runs import dp_trace, run_dp_phases
    from densegate.lab.bench.time_tables import format_dp_cost_tables

    base = bench_config()
    runs = {}
    for name in workloads:
        trace = dp_trace(WORKLOADS[name], args.seed, args.dp, requests)
        runs[name] = (len(trace), run_dp_phases(trace, base, args.dp, profile.model, args.seed))
        if progress is not None:
            progress(f"{name}: {len(trace)} requests over {args.dp} ranks, three phases done")
    if args.json:
        print(json.dumps({
            "dp": args.dp,
            "profile": profile.to_json() | {"samples": len(profile.samples)},
            "workloads": {
                w: {"requests": n, "phases": {
                    p: {"alignment": r.alignment, "finished": r.finished,
                        "modeled": r.modeled.summary()} for p, r in ph.items()}}
                for w, (n, ph) in runs.items()
            },
        }))  # fmt: skip
    else:
        print(format_dp_cost_tables(runs, args.dp, profile.describe()))
    ok = all(r.finished == n for n, ph in runs.values() for r in ph.values())
    return 0 if ok else 1
