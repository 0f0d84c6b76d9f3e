"""``densegate run``: a seeded workload (or a trace) through the engine, summarized."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

HELP = "run a seeded synthetic workload or a trace through the engine and summarize it"


def add_arguments(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group()
    src.add_argument("--gen", type=int, metavar="N", help="generate N requests (default 500)")
    src.add_argument("--trace", metavar="FILE", help="replay a JSON trace")
    p.add_argument("--seed", type=int, default=0, help="workload seed (default 0)")
    p.add_argument("--rate", type=float, default=0.8, help="mean arrivals per pass (default 0.8)")
    p.add_argument("--gate", choices=["on", "off"], default="on")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--dump-trace", metavar="FILE", help="write the workload as a JSON trace")
    p.add_argument(
        "--runner",
        choices=["auto", "null", "torch"],
        default="auto",
        help="torch runs the seeded model; null schedules only (auto: torch up to 300 "
        "requests, else null)",
    )
    p.add_argument("--device", default="cpu", help="torch device: cpu or cuda (default cpu)")
    p.add_argument("--dtype", default="float32", help="torch dtype (default float32)")
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        metavar="N",
        help="torch threads per pass (default: 1 on cpu, where the tiny model gains nothing "
        "from more and a busy core stalls every op; torch's own default on cuda)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    dp = p.add_argument_group("data parallel")
    dp.add_argument(
        "--dp",
        type=int,
        default=1,
        metavar="N",
        help="run N data-parallel ranks as local processes (gloo) with one aligned gate, "
        "then the same workload uncoordinated for comparison (default 1: no DP; under "
        "torchrun use python -m densegate.impl.dp_run)",
    )
    dp.add_argument(
        "--router",
        choices=["round-robin", "least-loaded"],
        default="round-robin",
        help="how requests are assigned to ranks (default round-robin)",
    )
    dp.add_argument(
        "--dp-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="a collective slower than this means a rank is gone (default 30)",
    )
    g = p.add_argument_group("scheduler")
    g.add_argument("--max-num-seqs", type=int, default=128)
    g.add_argument("--max-num-batched-tokens", type=int, default=2048)
    g.add_argument("--block-size", type=int, default=16)
    g.add_argument("--num-blocks", type=int, default=4096)
    g.add_argument("--max-model-len", type=int, default=4096)
    g.add_argument("--no-chunked-prefill", action="store_true")
    g.add_argument("--long-prefill-token-threshold", type=int, default=None)
    g.add_argument("--dense-tokens", type=int, default=None)
    g.add_argument("--max-hold-passes", type=int, default=30)


def _config(args: argparse.Namespace, runner: str) -> Any:
    from densegate.impl.engine import EngineConfig

    return EngineConfig(
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        block_size=args.block_size,
        num_blocks=args.num_blocks,
        max_model_len=args.max_model_len,
        enable_chunked_prefill=not args.no_chunked_prefill,
        long_prefill_token_threshold=args.long_prefill_token_threshold,
        dense_tokens=args.dense_tokens,
        max_hold_passes=args.max_hold_passes,
        gate_enabled=args.gate == "on",
        runner=runner,
        device=args.device,
        dtype=args.dtype,
        num_threads=_threads(args) if runner == "torch" else None,
    )


def _threads(args: argparse.Namespace) -> int | None:
    if args.threads is not None:
        return int(args.threads)
    return 1 if args.device == "cpu" else None


def main(args: argparse.Namespace) -> int:
    from densegate.impl.engine import Engine
    from densegate.impl.workload import dump_trace, load_trace, synthetic_trace

    if args.dp < 1:
        print(f"densegate run: --dp must be >= 1, got {args.dp}", file=sys.stderr)
        return 2
    if args.dp > 1:
        from densegate.impl.dp_run import run_dp

        return run_dp(args)
    try:
        if args.trace:
            trace = load_trace(args.trace)
        else:
            n = 500 if args.gen is None else args.gen
            trace = synthetic_trace(n, args.seed, rate=args.rate, max_model_len=args.max_model_len)
        runner = args.runner
        if runner == "auto":
            runner = "torch" if len(trace) <= 300 else "null"
        engine = Engine(_config(args, runner))
    except (ValueError, OSError) as e:
        print(f"densegate run: {e}", file=sys.stderr)
        return 2
    if args.dump_trace:
        dump_trace(trace, args.dump_trace)
    summary = _run(engine, trace, args)
    summary["runner_kind"] = runner
    if args.json:
        print(json.dumps(summary))
    else:
        _print(summary)
    return 0 if summary["finished"] + sum(summary["ended_otherwise"].values()) == len(trace) else 1


def _run(engine: Any, trace: Any, args: argparse.Namespace) -> dict[str, Any]:
    from densegate.impl.run import timed_run

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


def _fmt(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.3g}" if abs(x) < 1000 else f"{x:.0f}"
    return str(x)


def _print(s: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(
        title=f"densegate run (gate {s['gate']}, runner {s['runner_kind']})", show_header=False
    )
    t.add_column("figure")
    t.add_column("value")
    rows = [
        ("requests finished", f"{s['finished']} / {s['requests']}"),
        ("passes", s["passes"]),
        ("prompt / output tokens", f"{s['prompt_tokens']} / {s['output_tokens']}"),
        ("output tokens per pass", s["output_tokens_per_pass"]),
        ("TTFT passes p50 / p99 / max", "{p50} / {p99} / {max}".format(
            **{k: _fmt(v) for k, v in s["ttft_passes"].items()})),
        ("TTFT ms p50 / p99", "{p50} / {p99}".format(
            **{k: _fmt(v) for k, v in s["ttft_ms"].items()})),
        ("TPOT passes p50 / p99", "{p50} / {p99}".format(
            **{k: _fmt(v) for k, v in s["tpot_passes"].items()})),
        ("TPOT ms p50 / p99", "{p50} / {p99}".format(
            **{k: _fmt(v) for k, v in s["tpot_ms"].items()})),
        ("head-of-queue TTFT max / proved bound (passes)",
         f"{_fmt(s['head_ttft_passes_max'])} / {s['head_ttft_bound_passes']}"),
        ("dense_tokens / max_hold_passes", f"{s['dense_tokens']} / {s['max_hold_passes']}"),
        ("prefill passes (mean fill)", f"{s['prefill_passes']} ({_fmt(s['mean_prefill_fill'])})"),
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
        t.add_row(k, _fmt(v) if not isinstance(v, str) else v)
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
            _fmt(k.get("steps")),
            _fmt(k.get("tokens")),
            _fmt(k.get("tokens_per_s")),
            _fmt(k.get("p50_ms")),
            _fmt(k.get("p99_ms")),
        )
    console.print(t)
    counters = {k: v for k, v in runner.items() if k != "kinds"}
    console.print("runner counters: " + ", ".join(f"{k}={v}" for k, v in counters.items()))
