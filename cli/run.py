"""``densegate run``: a seeded workload (or a trace) through the engine, summarized;
with ``--model DIR --prompt TEXT`` (or ``--prompt-ids``), a checkpoint's greedy output."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from densegate.cli.options import add_arguments as add_arguments
from densegate.cli.options import engine_config
from densegate.impl.figures import fmt

HELP = "run a seeded synthetic workload or a trace through the engine and summarize it"


def main(args: argparse.Namespace) -> int:
    from densegate.impl.engine import Engine
    from densegate.impl.traces.workload import dump_trace, load_trace, synthetic_trace

    if args.dp < 1:
        print(f"densegate run: --dp must be >= 1, got {args.dp}", file=sys.stderr)
        return 2
    if args.dp > 1:
        from densegate.cli.dp import run_dp

        return run_dp(args)
    if args.prompt or args.prompt_ids:
        from densegate.cli.generate import generate

        return generate(args)
    try:
        if args.trace:
            trace = load_trace(args.trace)
        else:
            n = 500 if args.gen is None else args.gen
            # With --model the limit is the checkpoint's unless given: ask the engine config.
            limit = engine_config(args, "torch").max_model_len if args.model else args.max_model_len
            trace = synthetic_trace(n, args.seed, rate=args.rate, max_model_len=limit)
        runner = "torch" if args.model else args.runner
        if runner == "auto":
            runner = "torch" if len(trace) <= 300 else "null"
        engine = Engine(engine_config(args, runner))
    except (ValueError, OSError) as e:
        print(f"densegate run: {e}", file=sys.stderr)
        return 2
    if args.dump_trace:
        dump_trace(trace, args.dump_trace)
    summary = _run(engine, trace, args)
    summary["runner_kind"] = runner
    summary["stall_passes"] = engine.config.stall_passes
    summary["finish_reasons"] = _finish_reasons(engine)
    if args.json:
        print(json.dumps(summary))
    else:
        _print(summary)
    return 0 if summary["finished"] + sum(summary["ended_otherwise"].values()) == len(trace) else 1


def _run(engine: Any, trace: Any, args: argparse.Namespace) -> dict[str, Any]:
    from densegate.impl.traces.replay import timed_run

    if args.no_progress or args.json:
        return timed_run(engine, trace, args.seed)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    total = len(trace)
    with Progress(
        TextColumn("passes {task.fields[passes]}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("requests done"),
        transient=True,
    ) as bar:
        task = bar.add_task("run", total=total, passes=0)
        sched = engine.scheduler

        def tick(passes: int) -> None:
            if passes % 16 == 0:
                done = sched.counters.finished + sched.counters.aborted
                bar.update(task, completed=done, passes=passes)

        return timed_run(engine, trace, args.seed, tick)


def _s6(s6: dict[str, Any]) -> str:
    """The worst head window against its own bound, and how many windows were checked."""
    w = s6["worst"]
    if w is None:
        return "-"
    return (
        f"{w['wait']} / {w['bound']} = {s6['worst_ratio']:.2f} ({s6['windows']} windows, "
        f"{s6['violations']} over, {s6['disturbed']} preempted: not covered)"
    )


def _finish_reasons(engine: Any) -> dict[str, int]:
    """Finished requests per reason ("stop" or "length")."""
    from densegate.impl.sched.request import RequestStatus

    out: dict[str, int] = {}
    for m in engine.all_metrics():
        r = engine.request(m.request_id)
        if r.status is RequestStatus.FINISHED:
            out[r.finish_reason] = out.get(r.finish_reason, 0) + 1
    return out


def _print(s: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    from densegate.impl.traces.replay import S6_SCOPE

    t = Table(
        title=f"densegate run (gate {s['gate']}, runner {s['runner_kind']})", show_header=False
    )
    t.add_column("figure")
    t.add_column("value")
    rows = [
        ("requests finished", f"{s['finished']} / {s['requests']}"),
        ("finish reasons (stop: EOS or stop id)",
         ", ".join(f"{k} {v}" for k, v in sorted(s["finish_reasons"].items())) or "-"),
        ("passes", s["passes"]),
        ("prompt / output tokens", f"{s['prompt_tokens']} / {s['output_tokens']}"),
        ("output tokens per pass", s["output_tokens_per_pass"]),
        ("TTFT passes p50 / p99 / max", "{p50} / {p99} / {max}".format(
            **{k: fmt(v) for k, v in s["ttft_passes"].items()})),
        ("TTFT ms p50 / p99", "{p50} / {p99}".format(
            **{k: fmt(v) for k, v in s["ttft_ms"].items()})),
        ("TPOT passes p50 / p99", "{p50} / {p99}".format(
            **{k: fmt(v) for k, v in s["tpot_passes"].items()})),
        ("TPOT ms p50 / p99", "{p50} / {p99}".format(
            **{k: fmt(v) for k, v in s["tpot_ms"].items()})),
        (f"head TTFT / its S6 bound, worst ratio (S6 proved for {S6_SCOPE}; checked here)",
         _s6(s["s6"])),
        ("dense_tokens / max_hold_passes / stall_passes (0: valve off)",
         f"{s['dense_tokens']} / {s['max_hold_passes']} / {s['stall_passes']}"),
        ("prefill passes (mean fill)", f"{s['prefill_passes']} ({fmt(s['mean_prefill_fill'])})"),
        ("decode-only passes", s["decode_only_passes"]),
        ("prefill passes interrupting decode", s["prefill_passes_interrupting_decode"]),
        ("  of which under-full", f"{s['underfull_interrupting']} "
         f"{s['underfull_interrupting_by_reason'] or ''}"),
        ("gate reasons", ", ".join(f"{k} {v}" for k, v in sorted(s["reasons"].items()))),
        ("preemptions", s["preemptions"]),
        ("scheduler us per pass", s["scheduler_us_per_pass"]),
        ("runner ms per pass", s["runner_ms_per_pass"]),
        ("wall seconds", s["wall_s"]),
    ]  # fmt: skip
    for k, v in rows:
        t.add_row(k, fmt(v) if not isinstance(v, str) else v)
    runner = s.get("runner")
    console = Console()
    console.print(t)
    if runner:
        _print_runner(console, runner)


def _print_runner(console: Any, runner: dict[str, Any]) -> None:
    from rich.table import Table

    kinds = runner.get("kinds", {})
    if not kinds:
        return
    t = Table(title="runner steps (real tokens only)")
    for col in ("kind", "steps", "tokens", "tokens/s", "p50 ms", "p99 ms"):
        t.add_column(col)
    for kind, k in kinds.items():
        t.add_row(
            kind,
            fmt(k.get("steps")),
            fmt(k.get("tokens")),
            fmt(k.get("tokens_per_s")),
            fmt(k.get("p50_ms")),
            fmt(k.get("p99_ms")),
        )
    console.print(t)
    counters = {k: v for k, v in runner.items() if k != "kinds"}
    console.print("runner counters: " + ", ".join(f"{k}={v}" for k, v in counters.items()))
