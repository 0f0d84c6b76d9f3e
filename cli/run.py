"""``densegate run``: a seeded workload (or a trace) through the engine, summarized;
with ``--model DIR --prompt TEXT`` (or ``--prompt-ids``), a checkpoint's greedy output.

Every input is checked before any work: a flag that the chosen mode would ignore
is refused, and so is a trace request no engine could admit (the same rule as
``--dp``). Exit status: 0 when every request finished, 1 when one was rejected or
aborted (the summary says how many and why), 2 for bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from densegate.cli import options
from densegate.cli.options import engine_config
from densegate.impl.settings import flagged

HELP = "run a seeded synthetic workload or a trace through the engine and summarize it"


class _UnsetInt(int):
    """A flag's default, told apart from the same value given on the command line."""


class _UnsetFloat(float):
    """A float flag's default, told apart from the same value given."""


class _UnsetStr(str):
    """A string flag's default, told apart from the same value given."""


_WORKLOAD_ONLY = ("seed", "rate")
_PROMPT_ONLY = ("max_tokens",)
_DP_ONLY = {
    "router": "--router",
    "timed_rounds": "--rounds",
    "dp_timeout": "--dp-timeout",
    "dp_startup_timeout": "--dp-startup-timeout",
}
"""dest -> flag, for the flags only a data-parallel run reads."""
_TORCH_ONLY = {"device": "--device", "dtype": "--dtype"}
"""dest -> flag, for the flags only the torch runner reads."""
_UNSET = {int: _UnsetInt, float: _UnsetFloat, str: _UnsetStr}


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags ``run`` shares with the torchrun entry point (``densegate.cli.options``);
    the defaults of flags only one mode reads are marked, so giving one is seen."""
    options.add_arguments(p)
    p.add_argument(
        "--explain",
        action="store_true",
        help="print what the gate held and why, pass by pass, then a short summary (instead "
        "of the table); e.g. densegate run --requests 12 --runner null --explain",
    )
    for dest in (*_WORKLOAD_ONLY, *_PROMPT_ONLY, *_DP_ONLY, *_TORCH_ONLY):
        value = p.get_default(dest)
        p.set_defaults(**{dest: _UNSET[type(value)](value)})


def _given(args: argparse.Namespace, dest: str) -> bool:
    return not isinstance(getattr(args, dest), (_UnsetInt, _UnsetFloat, _UnsetStr))


def conflict(args: argparse.Namespace) -> str | None:
    """A flag the chosen mode would silently ignore, named; or None."""
    prompts = args.prompt or args.prompt_ids
    if args.explain and (prompts or args.dp > 1 or args.json):
        other = "--json" if args.json else "--dp" if args.dp > 1 else "--prompt/--prompt-ids"
        return f"--explain tells one engine's gate decisions in text: not with {other}"
    if prompts:
        workload = [f"--{d}" for d in _WORKLOAD_ONLY if _given(args, d)]
        workload += ["--requests"] * (args.gen is not None) + ["--trace"] * bool(args.trace)
        workload += ["--dump-trace"] * bool(args.dump_trace)
        if args.dp > 1:
            return "--prompt/--prompt-ids run on one engine: not with --dp"
        if args.runner == "null":
            return "--prompt/--prompt-ids need the torch runner: not with --runner null"
        if workload:
            return f"--prompt/--prompt-ids generate from a checkpoint: not with {workload[0]}"
        return None
    if args.dp == 1:
        dp_only = [flag for dest, flag in _DP_ONLY.items() if _given(args, dest)]
        dp_only += [s.flag for s in flagged() if getattr(args, s.name, None) is not None]
        dp_only += ["--no-baselines"] * bool(args.no_baselines)
        if dp_only:
            return f"{dp_only[0]} is for a data-parallel run: give --dp N (N > 1) or drop it"
        if os.environ.get("DENSEGATE_DP_CRASH", "").strip():
            return (
                "DENSEGATE_DP_CRASH is set, but faults are injected only into a data-parallel "
                "run: give --dp N (N > 1) or unset it"
            )
    if args.trace and _given(args, "rate"):
        return "--rate is for a generated workload: a --trace has its own arrivals"
    if args.model and args.runner == "null":
        return "--model runs the torch runner: not with --runner null"
    if args.runner == "null":
        torch_only = [f for d, f in _TORCH_ONLY.items() if _given(args, d)]
        torch_only += ["--threads"] * (args.threads is not None)
        if torch_only:
            return f"{torch_only[0]} is for the torch runner: not with --runner null"
    generation = ["--max-tokens"] * _given(args, "max_tokens")
    generation += ["--stop-token-id"] * bool(args.stop_token_id)
    generation += ["--ignore-eos"] * bool(args.ignore_eos)
    if generation:
        return f"{generation[0]} is for --prompt/--prompt-ids (a workload has its own lengths)"
    return None


def main(args: argparse.Namespace) -> int:
    from densegate.impl.engine import Engine
    from densegate.impl.traces.workload import check_fits, dump_trace, load_trace, synthetic_trace

    why = conflict(args)
    if why is not None:
        print(f"densegate run: {why}", file=sys.stderr)
        return 2
    if args.dp > 1:
        from densegate.cli.dp import run_dp

        return run_dp(args)
    if args.prompt or args.prompt_ids:
        from densegate.cli.generate import generate

        return generate(args)
    try:
        if args.trace:
            try:
                trace = load_trace(args.trace)
            except OSError as e:
                raise ValueError(f"--trace {args.trace}: {e.strerror or e}") from None
            label, workload = f"--trace {args.trace}", f"trace {args.trace}"
        else:
            n = 500 if args.gen is None else args.gen
            # With --model the limit is the checkpoint's unless given: ask the engine config.
            limit = engine_config(args, "torch").max_model_len if args.model else args.max_model_len
            trace = synthetic_trace(n, args.seed, rate=args.rate, max_model_len=limit)
            label = "the workload"
            workload = (
                f"{n} generated (seed {args.seed}, {args.rate} per pass; lengths drawn within "
                f"max_model_len {limit})"
            )
        runner = "torch" if args.model else args.runner
        if runner == "auto":
            runner = _auto(len(trace), args.json)
        config = engine_config(args, runner)
        check_fits(trace, config, label)  # before a model loads or a prompt is built
        engine = Engine(config)
    except (ValueError, OSError) as e:
        print(f"densegate run: {e}", file=sys.stderr)
        return 2
    if args.dump_trace:
        dump_trace(trace, args.dump_trace)
    records: list[Any] = []
    summary = _run(engine, trace, args, records if args.explain else None)
    summary["workload"] = workload
    summary["runner_kind"] = runner
    summary["stall_passes"] = engine.config.stall_passes
    summary["finish_reasons"] = _finish_reasons(engine)
    if args.json:
        print(json.dumps(summary))
    elif args.explain:
        from densegate.cli.explain import explain

        print(explain(records, summary))
    else:
        _print(summary)
    return 0 if summary["finished"] == len(trace) else 1


def _run(
    engine: Any, trace: Any, args: argparse.Namespace, records: list[Any] | None = None
) -> dict[str, Any]:
    """The run, with a progress bar on a terminal; ``records`` gets every pass's record."""
    from densegate.impl.traces.replay import timed_run

    if records is not None:
        log = engine.scheduler.pass_log
        return timed_run(engine, trace, args.seed, lambda _: records.append(log[-1]))
    if args.no_progress or args.json or not _has_rich():
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


def _unfinished(s: dict[str, Any]) -> str:
    """``"2 rejected (needs 9 KV blocks, ...: 2)"``; ``-`` when every request finished."""
    parts = []
    for status, why in (("rejected", s["rejected_reasons"]), ("aborted", s["aborted_reasons"])):
        if why:
            n = sum(why.values())
            parts.append(f"{n} {status} ({'; '.join(f'{k}: {v}' for k, v in why.items())})")
    return ", ".join(parts) or "-"


def _failures(s: dict[str, Any]) -> str:
    if not s["failed_passes"]:
        return "0"
    return f"{s['failed_passes']} (first: {s['failures'][0]})"


def _auto(requests: int, quiet: bool) -> str:
    """``--runner auto``: torch up to 300 requests, else null; null, said once on stderr,
    where torch is not installed (the lean ``pip install .`` runs the null runner)."""
    from importlib.util import find_spec

    if requests > 300:
        return "null"
    if find_spec("torch") is None:
        if not quiet:
            print(
                "densegate run: torch is not installed, so --runner auto runs the null runner "
                "(it schedules, computes nothing; the model needs the 'torch' extra)",
                file=sys.stderr,
            )
        return "null"
    return "torch"


def _has_rich() -> bool:
    """rich draws the tables and the bar (the ``cli`` extra); without it, plain text."""
    from importlib.util import find_spec

    return find_spec("rich") is not None


def _counts(counts: dict[str, int]) -> str:
    """``{"BUDGET": 2, "DENSE": 5}`` -> ``"BUDGET 2, DENSE 5"`` (``-`` when empty)."""
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "-"


def _rows(s: dict[str, Any]) -> list[tuple[str, str]]:
    from densegate.impl.figures import fmt

    rows = [
        ("workload", s["workload"]),
        ("requests finished", f"{s['finished']} / {s['requests']}"),
        ("not finished (why)", _unfinished(s)),
        ("failed passes (runner errors)", _failures(s)),
        ("finish reasons (stop: EOS or stop id)", _counts(s["finish_reasons"])),
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
        ("head TTFT / its S6 bound, worst [S6]", _s6(s["s6"])),
        ("dense_tokens / max_hold_passes / stall_passes",
         f"{s['dense_tokens']} / {s['max_hold_passes']} / {s['stall_passes']}"
         + (" (STALL valve off)" if not s["stall_passes"] else "")),
        ("prefill passes (mean fill)", f"{s['prefill_passes']} ({fmt(s['mean_prefill_fill'])})"),
        ("decode-only passes", s["decode_only_passes"]),
        ("prefill passes interrupting decode", s["prefill_passes_interrupting_decode"]),
        ("  of which under-full (by gate reason)", f"{s['underfull_interrupting']}"
         + (f" ({_counts(by)})" if (by := s["underfull_interrupting_by_reason"]) else "")),
        ("gate reasons", _counts(s["reasons"])),
        ("preemptions", s["preemptions"]),
        ("scheduler us per pass", s["scheduler_us_per_pass"]),
        ("runner ms per pass", s["runner_ms_per_pass"]),
        ("wall seconds", s["wall_s"]),
    ]  # fmt: skip
    return [(k, v if isinstance(v, str) else fmt(v)) for k, v in rows]


def _runner_rows(runner: dict[str, Any]) -> list[list[str]]:
    from densegate.impl.figures import fmt

    keys = ("steps", "tokens", "tokens_per_s", "p50_ms", "p99_ms")
    return [[kind, *(fmt(k.get(x)) for x in keys)] for kind, k in runner.get("kinds", {}).items()]


RUNNER_COLUMNS = ("kind", "steps", "tokens", "tokens/s", "p50 ms", "p99 ms")


def _legend(s: dict[str, Any]) -> str:
    """The S6 row's scope, a sentence: under the table, not in its label."""
    from densegate.impl.traces.replay import S6_SCOPE

    valve = " The STALL valve is on here: not proved, only checked." if s["stall_passes"] else ""
    return f"[S6] proved for {S6_SCOPE}; checked on this run.{valve}"


def _print(s: dict[str, Any]) -> None:
    title = f"densegate run (gate {s['gate']}, runner {s['runner_kind']})"
    rows = _rows(s)
    runner = s.get("runner") or {}
    steps = _runner_rows(runner)
    counters = ", ".join(f"{k}={v}" for k, v in runner.items() if k != "kinds")
    if not _has_rich():
        width = max(len(k) for k, _ in rows)
        print("\n".join([title, *(f"{k.ljust(width)}  {v}" for k, v in rows), _legend(s)]))
        if steps:
            print("\nrunner steps (real tokens only)")
            print("\n".join("  ".join(r) for r in [list(RUNNER_COLUMNS), *steps]))
        if runner:
            print(f"runner counters: {counters}")
        return
    from rich.console import Console
    from rich.table import Table

    t = Table(title=title, show_header=False)
    t.add_column("figure")
    t.add_column("value")
    for k, v in rows:
        t.add_row(k, v)
    console = Console()
    console.print(t)
    console.print(_legend(s))
    if steps:
        t = Table(title="runner steps (real tokens only)")
        for col in RUNNER_COLUMNS:
            t.add_column(col)
        for r in steps:
            t.add_row(*r)
        console.print(t)
    if runner:
        console.print(f"runner counters: {counters}")
