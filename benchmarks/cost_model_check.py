"""Does the CPU profile predict the torch runner's times? Per pass kind and for a whole run.

Times the torch runner's pass kinds (``densegate profile``'s grid, or loads
``--profile FILE``), then runs ``densegate run --gen 300``'s workload and engine
(the same defaults, one torch thread) with the gate on and off, and sets every
pass's measured time beside the time the profile predicts for its work:

- per pass kind: passes, measured and predicted total seconds, their ratio,
  and the median absolute error of a single pass;
- per run: the runner's total seconds, the run's output tokens/s and TTFT
  p50 / p99 (the prediction replays the very same passes on the modeled clock,
  with nothing between passes; the measured wall clock includes the scheduler).

A benchmark, not a test: nothing here asserts a time. Usage:
    python benchmarks/cost_model_check.py [--gen 300] [--profile FILE] [--out FILE]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

from densegate.cli.options import add_arguments, engine_config
from densegate.impl.engine import Engine
from densegate.impl.figures import fmt
from densegate.impl.traces.replay import run_trace
from densegate.impl.traces.workload import synthetic_trace
from densegate.lab.cost import (
    PassTimeline,
    Profile,
    TimedRunner,
    kind_of,
    measured_figures,
    modeled_figures,
)
from densegate.lab.cost.measure import profile_torch


def _run(gate: str, gen: int, seed: int) -> tuple[Engine, PassTimeline, float]:
    p = argparse.ArgumentParser()
    add_arguments(p)
    args = p.parse_args(["--gen", str(gen), "--seed", str(seed), "--gate", gate])
    engine = Engine(engine_config(args, "torch"))
    timeline = PassTimeline()
    engine.runner = TimedRunner(engine.runner, timeline)
    trace = synthetic_trace(gen, seed, rate=args.rate, max_model_len=args.max_model_len)
    t0 = time.perf_counter()
    run_trace(engine, trace, seed)
    return engine, timeline, time.perf_counter() - t0


def _per_kind(timeline: PassTimeline, profile: Profile) -> list[list[str]]:
    rows: dict[str, list[tuple[float, float]]] = {}
    graph_rows = profile.graph_max_rows
    for p, work in timeline.work.items():
        kind = kind_of(work, graph_rows)
        if kind is None:
            continue
        measured = 1e3 * (timeline.end_s[p] - timeline.start_s[p])
        rows.setdefault(kind, []).append((measured, profile.model.pass_ms(work)))
    out = []
    for kind, pairs in sorted(rows.items()):
        m = sum(a for a, _ in pairs) / 1e3
        q = sum(b for _, b in pairs) / 1e3
        err = statistics.median(abs(b - a) / a for a, b in pairs)
        out.append([kind, str(len(pairs)), fmt(m), fmt(q), fmt(q / m), f"{100 * err:.1f}%"])
    m_all = sum(timeline.end_s[p] - timeline.start_s[p] for p in timeline.work)
    q_all = sum(profile.model.pass_ms(w) for w in timeline.work.values()) / 1e3
    out.append(["all passes", str(len(timeline.work)), fmt(m_all), fmt(q_all),
                fmt(q_all / m_all), ""])  # fmt: skip
    return out


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gen", type=int, default=300, help="requests (default 300)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--profile", metavar="FILE", help="a saved profile (default: measure now)")
    ap.add_argument("--out", metavar="FILE", help="write the measured profile here")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    if args.profile:
        profile = Profile.load(args.profile)
    else:
        print("timing the profile grid ...", file=sys.stderr, flush=True)
        profile = profile_torch("cpu", threads=1)
        if args.out:
            profile.save(args.out)
    print("\n".join(profile.describe()))
    summary: list[list[str]] = []
    for gate in ("on", "off"):
        print(f"running --gen {args.gen} with the gate {gate} ...", file=sys.stderr, flush=True)
        engine, timeline, wall = _run(gate, args.gen, args.seed)
        print(f"\n### gate {gate}: predicted against measured, per pass kind\n")
        print(_table(["pass kind", "passes", "measured s", "predicted s", "predicted / measured",
                      "median error of one pass"], _per_kind(timeline, profile)))  # fmt: skip
        meas = measured_figures(engine, timeline).summary()
        pred = modeled_figures(engine, timeline, profile.model).summary()

        def cells(d: dict[str, Any]) -> list[str]:
            return [fmt(d["seconds"]), fmt(d["output_tokens_per_s"]),
                    f"{fmt(d['ttft_ms']['p50'])} / {fmt(d['ttft_ms']['p99'])}",
                    f"{fmt(d['itl_ms']['p50'])} / {fmt(d['itl_ms']['p99'])}"]  # fmt: skip

        summary.append([f"gate {gate}, measured", *cells(meas)])
        summary.append([f"gate {gate}, predicted (modeled)", *cells(pred)])
        summary.append(
            [
                f"gate {gate}, predicted / measured",
                fmt(pred["seconds"] / meas["seconds"]),
                fmt(pred["output_tokens_per_s"] / meas["output_tokens_per_s"]),
                "",
                "",
            ]
        )
        print(f"(the run's wall clock: {wall:.1f} s)")
    print(f"\n### whole --gen {args.gen} runs\n")
    print(_table(["run", "seconds", "output tokens/s", "TTFT ms p50 / p99", "ITL ms p50 / p99"],
                 summary))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
