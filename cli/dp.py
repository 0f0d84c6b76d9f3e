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
rank that dies is noticed at once and one that hangs within ``--dp-timeout``
plus 0.5 s (``DETECTION_MARGIN_S``), in every phase and at every tick, a
phase's first collective included; ``--dp-startup-timeout`` bounds only the
rendezvous and building each phase's engine. The survivors agree through the
store, take over its requests and go on aligned (``densegate.impl.dp.rank``),
finish the phase and stop; every rank reports each phase as it ends. Under
torchrun the elastic agent itself stops every worker when one fails, so
survivor behaviour needs ``densegate run --dp N`` (the store lives in the
launcher) or hand-started ranks; the README says what torchrun does.

The runtime runs what this module assembles from the lab (``densegate.lab.dp``):
the coordinated phase plus the uncoordinated baselines (``--no-baselines``:
none) in ``--timed-rounds`` rounds, the timing hook behind the time table, and
the faults of ``DENSEGATE_DP_CRASH=RANK:TICK[:MODE[:SECONDS]][@PHASE][,...]``
(MODE: exit, collective, hang, slow; PHASE: the phase's number in run order,
default 0, the coordinated run; with baselines 1 is gate-off and 2 the local
gate; see ``densegate.lab.dp.inject.Fault``). A fault naming a rank or phase
the run does not have is refused, as is a trace request no engine could admit
(prompt_len + output_len over max_model_len): one line, exit 2, before any
rank starts. ``DENSEGATE_DP_OUT=DIR`` keeps the launcher's per-rank reports
(decision logs included) in DIR.

Ctrl-C stops every rank and prints one line, then the summary of the phases the
ranks had finished, and exits 130 (as a shell reports a SIGINT).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from densegate.cli.options import add_arguments, engine_config
from densegate.impl.dp.config import DPConfig, check_trace
from densegate.impl.dp.hooks import RankHooks, chain
from densegate.impl.dp.launch import DPResult, Interrupted, launch, rank_main
from densegate.impl.dp.report import RankReport
from densegate.impl.dp.summary import by_phase, merge_reports
from densegate.impl.settings import flagged, pairing, setting
from densegate.impl.traces.workload import TraceRequest
from densegate.lab.dp.inject import Fault, FaultHooks, check_faults
from densegate.lab.dp.phases import bench_phases
from densegate.lab.dp.tables import print_summary
from densegate.lab.dp.timing import TimingHooks, phase_timing

__all__ = ["main", "parse_faults", "run_dp", "summarize_dp"]


CRASH_FORMAT = "RANK:TICK[:MODE[:SECONDS]][@PHASE]"
INTERRUPTED = 130
"""Exit status after Ctrl-C: 128 + SIGINT, as a shell reports it."""


def parse_faults(spec: str) -> tuple[Fault, ...]:
    """``RANK:TICK[:MODE[:SECONDS]][@PHASE]``, comma-separated; ValueError naming a bad one."""
    faults = []
    for item in filter(None, (x.strip() for x in spec.split(","))):
        body, at, phase = item.partition("@")
        parts = body.split(":")
        if not 2 <= len(parts) <= 4 or (at and not phase):
            raise ValueError(f"DENSEGATE_DP_CRASH: {item!r} is not {CRASH_FORMAT}")
        try:
            rank, tick = int(parts[0]), int(parts[1])
            secs = float(parts[3]) if len(parts) > 3 else 0.0
            index = int(phase) if at else 0
        except ValueError:
            raise ValueError(f"DENSEGATE_DP_CRASH: {item!r} has a bad number") from None
        try:
            faults.append(Fault(rank, tick, parts[2] if len(parts) > 2 else "exit", secs, index))
        except ValueError as e:
            raise ValueError(f"DENSEGATE_DP_CRASH: {item!r}: {e}") from None
    return tuple(faults)


def _dp_config(args: argparse.Namespace, runner: str) -> DPConfig:
    engine = engine_config(args, runner)
    phases = bench_phases(
        engine,
        baselines=not getattr(args, "no_baselines", False),
        timed_rounds=getattr(args, "timed_rounds", 0),
    )
    flags: dict[str, Any] = {s.name: getattr(args, s.name, None) for s in flagged()}
    why = pairing(flags, lambda name: setting(name).flag)
    if why is not None:
        raise ValueError(why)
    return DPConfig(
        engine,
        router=getattr(args, "router", "round-robin"),
        timeout_s=getattr(args, "dp_timeout", 30.0),
        startup_timeout_s=getattr(args, "dp_startup_timeout", 300.0),
        target_fill=getattr(args, "target_fill", 1.0),
        stall_ticks=getattr(args, "stall_ticks", 0),
        kv_pressure_valve=getattr(args, "kv_valve", False),
        **flags,
        seed=args.seed,
        phases=phases,
    )


def _hooks(world: int, phases: int) -> RankHooks:
    """Every phase timed, and the faults of ``DENSEGATE_DP_CRASH`` injected (checked
    against the run's ``world`` ranks and ``phases`` phases)."""
    faults = parse_faults(os.environ.get("DENSEGATE_DP_CRASH", ""))
    check_faults(faults, world, phases)
    if os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0":
        faults = ()  # an injected fault is a one-time crash: torchrun's restart runs clean
    return chain(TimingHooks(), FaultHooks(faults))


def summarize_dp(
    world: int,
    reports: dict[int, list[RankReport]],
    trace_len: int,
    wall_s: float,
    exitcodes: Sequence[int | None] | None = None,
    streams: Mapping[str, Mapping[int, bytes]] | None = None,
) -> dict[str, Any]:
    """``merge_reports``, plus the time per phase (``densegate.lab.dp.timing``)."""
    dicts = {r: [x.as_dict() for x in reps] for r, reps in reports.items()}
    s = merge_reports(world, dicts, trace_len, wall_s, exitcodes, streams)
    if "error" not in s:
        s["timing"] = phase_timing(by_phase(reports))
    return s


def _trace(args: argparse.Namespace) -> list[TraceRequest]:
    """The run's trace; a generated one drawn within the engine's max_model_len, as on one
    rank (a checkpoint's own limit under ``--model``)."""
    from densegate.impl.traces.workload import load_trace, synthetic_trace

    if args.trace:
        return load_trace(args.trace)
    n = 500 if args.gen is None else args.gen
    limit = engine_config(args, "torch").max_model_len if args.model else args.max_model_len
    return synthetic_trace(n, args.seed, rate=args.rate, max_model_len=limit)


def _runner(args: argparse.Namespace, n: int) -> str:
    """``auto``: as without --dp, torch up to 300 requests (ranks run one thread each)."""
    if args.runner != "auto":
        return str(args.runner)
    return "torch" if n <= 300 else "null"


def _inputs(args: argparse.Namespace, world: int) -> tuple[list[TraceRequest], DPConfig, RankHooks]:
    """The trace, config and hooks both entry points run, every one checked against the
    others (a fault's rank and phase, each request against the engine's max_model_len)
    before any work; ValueError or OSError if bad."""
    trace = _trace(args)
    config = _dp_config(args, _runner(args, len(trace)))
    check_trace(trace, config, f"--trace {args.trace}" if args.trace else "the workload")
    if config.engine.runner == "torch" and config.engine.device.startswith("cuda"):
        from densegate.impl.runners.torch_runner import check_cuda

        check_cuda(config.engine.device)  # here, not as a traceback from every rank
    return trace, config, _hooks(world, len(config.run_phases))


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
        return _run_dp(args)
    except Interrupted as e:
        return _interrupted(args, e.result)
    except KeyboardInterrupt:
        print("densegate run: interrupted (Ctrl-C) before any rank started", file=sys.stderr)
        return INTERRUPTED


def _run_dp(args: argparse.Namespace) -> int:
    try:
        trace, config, hooks = _inputs(args, args.dp)
    except (ValueError, OSError) as e:
        print(f"densegate run: {e}", file=sys.stderr)
        return 2
    if args.dump_trace:
        from densegate.impl.traces.workload import dump_trace

        dump_trace(trace, args.dump_trace)
    out_dir = os.environ.get("DENSEGATE_DP_OUT")
    r = launch(trace, config, args.dp, out_dir=out_dir, hooks=hooks)
    s = summarize_dp(r.world_size, r.reports, r.trace_len, r.wall_s, r.exitcodes, r.streams)
    return _show(args, s)


def _interrupted(args: argparse.Namespace, r: DPResult) -> int:
    """Ctrl-C: one line, then the phases every rank had finished (the stopped ranks are not
    faults, so no exit codes), exit 130."""
    done = min((len(reps) for reps in r.reports.values()), default=0)
    if len(r.reports) < r.world_size:
        done = 0
    stopped = f"densegate run: interrupted (Ctrl-C): {r.world_size} ranks stopped"
    if not done:
        print(f"{stopped} before any phase ended", file=sys.stderr)
    else:
        which = "that one" if done == 1 else "those"
        line = f"{stopped} after {done} of {len(r.streams)} phases; the summary covers {which}"
        print(line, file=sys.stderr)
    reports = {rank: reps[:done] for rank, reps in r.reports.items()} if done else {}
    s = summarize_dp(r.world_size, reports, r.trace_len, r.wall_s, None, r.streams)
    s["interrupted"] = True
    if "error" in s:
        s["error"] = "interrupted before the ranks had finished a phase"
    _show(args, s)
    return INTERRUPTED


def build_parser() -> argparse.ArgumentParser:
    """``densegate run``'s options plus the DP knobs only this entry point has."""
    from densegate.cli.main import OneLineParser

    p = OneLineParser(
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
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """One rank under torchrun (or hand-set env vars); rank 0 prints the merged summary."""
    from densegate.cli.main import UsageError

    try:
        args = build_parser().parse_args(argv)
    except UsageError as e:
        print(e, file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    try:
        trace, config, hooks = _inputs(args, int(os.environ.get("WORLD_SIZE", "1")))
    except (ValueError, OSError) as e:
        print(f"densegate.cli.dp: {e}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    rank, reports, everyone = rank_main(
        trace, config, args.dp_out, gather=True, backend=args.dp_backend, hooks=hooks
    )
    wall = time.perf_counter() - t0
    world = reports[0].world_size
    if everyone is not None:
        gathered = {r: [RankReport.from_dict(d) for d in reps] for r, reps in enumerate(everyone)}
        summary = summarize_dp(world, gathered, len(trace), wall)
    elif any(r.faults for r in reports):
        # The group is broken: each survivor reports what it knows.
        summary = summarize_dp(world, {rank: reports}, len(trace), wall)
        summary["reported_by_rank"] = rank
    else:
        return 0
    return _show(args, summary)


if __name__ == "__main__":
    sys.exit(main())
