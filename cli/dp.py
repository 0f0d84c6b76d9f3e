"""Data-parallel runs on torch.distributed: the command lines.

Two ways to start the same ranks, with the same code in each rank:

- ``densegate run --dp N ...`` (``run_dp``) starts N processes on 127.0.0.1
  (``densegate.impl.dp.launch``) and prints the merged summary.
- ``torchrun --nproc-per-node N -m densegate.cli.dp [densegate run
  options]`` (``main``) on one or many machines; rank 0 prints the summary.
  Without torchrun, set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT by hand
  and start ``python -m densegate.cli.dp`` once per rank (rank 0 then
  hosts the store).

The backend and the collectives' timeouts are ``densegate.impl.dp.collective``'s
(``--dp-backend`` in this module's own command line overrides the backend): a
rank that dies or hangs is noticed, and the survivors agree through the store,
take over its requests and go on aligned (``densegate.impl.dp.rank``). Under
torchrun the elastic agent itself stops every worker when one fails, so
survivor behaviour needs ``densegate run --dp N`` (the store lives in the
launcher) or hand-started ranks; the README says what torchrun does.

``DENSEGATE_DP_CRASH=RANK:TICK[:MODE[:SECONDS]][,...]`` injects faults (MODE:
exit, collective, hang, slow; see ``densegate.impl.dp.config.Fault``);
``DENSEGATE_DP_OUT=DIR`` keeps the launcher's per-rank reports (decision logs
included) in DIR.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from densegate.cli.options import add_arguments, engine_config
from densegate.impl.dp.collective import TorchCollective
from densegate.impl.dp.config import DPConfig, Fault
from densegate.impl.dp.launch import DPResult, launch, rank_main
from densegate.impl.dp.summary import merge_reports, print_summary
from densegate.impl.traces.workload import TraceRequest

__all__ = [
    "DPResult",
    "TorchCollective",
    "launch",
    "main",
    "merge_reports",
    "rank_main",
    "run_dp",
]


def parse_faults(spec: str) -> tuple[Fault, ...]:
    """``RANK:TICK[:MODE[:SECONDS]]``, comma-separated; ValueError naming a bad one."""
    faults = []
    for item in filter(None, (x.strip() for x in spec.split(","))):
        parts = item.split(":")
        if not 2 <= len(parts) <= 4:
            raise ValueError(f"DENSEGATE_DP_CRASH: {item!r} is not RANK:TICK[:MODE[:SECONDS]]")
        try:
            rank, tick = int(parts[0]), int(parts[1])
            secs = float(parts[3]) if len(parts) > 3 else 0.0
        except ValueError:
            raise ValueError(f"DENSEGATE_DP_CRASH: {item!r} has a bad number") from None
        faults.append(Fault(rank, tick, parts[2] if len(parts) > 2 else "exit", secs))
    return tuple(faults)


def _dp_config(args: argparse.Namespace, runner: str) -> DPConfig:
    faults = parse_faults(os.environ.get("DENSEGATE_DP_CRASH", ""))
    if os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0":
        faults = ()  # an injected fault is a one-time crash: torchrun's restart runs clean
    return DPConfig(
        engine_config(args, runner),
        router=getattr(args, "router", "round-robin"),
        timeout_s=getattr(args, "dp_timeout", 30.0),
        target_fill=getattr(args, "target_fill", 1.0),
        stall_ticks=getattr(args, "stall_ticks", 0),
        kv_pressure_valve=getattr(args, "kv_valve", False),
        seed=args.seed,
        baselines=not getattr(args, "no_baselines", False),
        timed_rounds=getattr(args, "timed_rounds", 0),
        faults=faults,
    )


def _trace(args: argparse.Namespace) -> list[TraceRequest]:
    from densegate.impl.traces.workload import load_trace, synthetic_trace

    if args.trace:
        return load_trace(args.trace)
    n = 500 if args.gen is None else args.gen
    return synthetic_trace(n, args.seed, rate=args.rate, max_model_len=args.max_model_len)


def _runner(args: argparse.Namespace, n: int) -> str:
    """``auto``: as without --dp, torch up to 300 requests (ranks run one thread each)."""
    if args.runner != "auto":
        return str(args.runner)
    return "torch" if n <= 300 else "null"


def _inputs(args: argparse.Namespace) -> tuple[list[TraceRequest], DPConfig]:
    """The trace and the config both entry points run; ValueError or OSError if bad."""
    trace = _trace(args)
    return trace, _dp_config(args, _runner(args, len(trace)))


def _show(args: argparse.Namespace, s: dict[str, Any]) -> int:
    """Print the summary (JSON or tables); exit status 0 only if every request ended
    exactly once and the reporting ranks agree (a survived fault is not an error)."""
    if args.json:
        print(json.dumps(s))
    else:
        print_summary(s)
    ok = "error" not in s and s.get("decisions_agree")
    return 0 if ok and not (s.get("unaccounted") or s.get("lost") or s.get("duplicated")) else 1


def run_dp(args: argparse.Namespace) -> int:
    """``densegate run --dp N``: launch N local ranks, print the merged summary."""
    try:
        trace, config = _inputs(args)
    except (ValueError, OSError) as e:
        print(f"densegate run: {e}", file=sys.stderr)
        return 2
    if args.dump_trace:
        from densegate.impl.traces.workload import dump_trace

        dump_trace(trace, args.dump_trace)
    result = launch(trace, config, args.dp, out_dir=os.environ.get("DENSEGATE_DP_OUT"))
    return _show(args, result.summary())


def build_parser() -> argparse.ArgumentParser:
    """``densegate run``'s options plus the DP knobs only this entry point has."""
    p = argparse.ArgumentParser(
        prog="python -m densegate.cli.dp",
        description="one data-parallel rank (env:// rendezvous, e.g. under torchrun)",
    )
    add_arguments(p)
    g = p.add_argument_group("data parallel (this entry point only)")
    g.add_argument("--dp-out", metavar="DIR", help="write each rank's report to DIR/rankR.json")
    g.add_argument("--dp-backend", choices=["auto", "gloo", "nccl"], default="auto")
    g.add_argument("--target-fill", type=float, default=1.0)
    g.add_argument("--stall-ticks", type=int, default=0)
    g.add_argument("--kv-valve", action="store_true", help="fire while any rank's KV is >90%%")
    g.add_argument("--no-baselines", action="store_true", help="skip the uncoordinated runs")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """One rank under torchrun (or hand-set env vars); rank 0 prints the merged summary."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    try:
        trace, config = _inputs(args)
    except (ValueError, OSError) as e:
        print(f"densegate.cli.dp: {e}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    rank, reports, everyone = rank_main(
        trace, config, args.dp_out, gather=True, backend=args.dp_backend
    )
    wall = time.perf_counter() - t0
    world = reports[0].world_size
    if everyone is not None:
        summary = merge_reports(world, dict(enumerate(everyone)), len(trace), wall)
    elif any(r.faults for r in reports):
        # The group is broken: each survivor reports what it knows.
        summary = merge_reports(world, {rank: [r.as_dict() for r in reports]}, len(trace), wall)
        summary["reported_by_rank"] = rank
    else:
        return 0
    return _show(args, summary)


if __name__ == "__main__":
    sys.exit(main())
