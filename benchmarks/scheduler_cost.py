#!/usr/bin/env python3
"""Scheduling-only cost per pass: ``Scheduler.schedule`` + ``Scheduler.update``.

The runner is a ``NullRunner`` and its ``execute`` is not timed, so what is
measured is planning, the gate, committing and processing the sampled tokens.

(a) Queue length: 256 running decodes with 100,000 waiting against 100 waiting,
    in two states: the gate holding every pass (one slot free, the head fits,
    the admissible prefill is under-full) and a pass that admits a full batch.
    Planning is O(admitted batch), so the ratio should be about 1.
(b) A trace: ~2,000 requests with ~120 concurrent decodes on average, replayed
    with densegate's gate and, as the same-run baseline, with no gate (``LegacyPolicy``,
    same scheduler, chunked prefill on).

Figures are medians over repeats (with the minima beside them in (a)), taken
with ``time.perf_counter``; ratios are against baselines measured in the same
run, except the one reference to an external figure (a mainstream engine's
Python scheduler, ~1.4 ms per step on such a trace), which is labelled as such.
Run from the repository root: ``python benchmarks/scheduler_cost.py``
(``--quick`` for a smoke run).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import (
    EXTERNAL_STEP_US,
    ReplayResult,
    admitting_state,
    holding_state,
    median,
    replay,
)

from densegate.impl.sched.config import SchedulerConfig
from densegate.impl.traces.workload import synthetic_trace
from densegate.lab.baselines.policies import LegacyPolicy

# Trace (b): tuned so the mean number of sequences decoding per pass, over the
# whole run (ramp-up and drain included), is about 120.
TRACE_RATE = 1.05
TRACE_OUTPUT_SIGMA = 0.5
TRACE_CONFIG = SchedulerConfig(
    max_num_seqs=256,
    max_num_batched_tokens=2048,
    block_size=16,
    num_blocks=16384,
    max_model_len=4096,
)


def queue_length(running: int, small: int, large: int, repeats: int, passes: int) -> None:
    print(f"(a) {running} running decodes; {large:,} waiting vs {small:,} waiting (us per pass)")
    print(
        f"    {'state':<32}{'median @' + format(small, ','):>14}{'@' + format(large, ','):>10}"
        f"{'ratio':>7}{'min @' + format(small, ','):>13}{'@' + format(large, ','):>10}{'ratio':>7}"
    )
    for label, build in (
        ("gate holding (HOLD every pass)", holding_state),
        ("admitting a full batch (DENSE)", admitting_state),
    ):
        # Both states are built once and timed in alternation: the same pass
        # numbers and the same work, apart from the queue's length.
        a, b = build(running, small), build(running, large)
        ta, tb = [], []
        for _ in range(repeats):
            ta.append(a.time_passes(passes))
            tb.append(b.time_passes(passes))
        ma, mb, na, nb = median(ta), median(tb), min(ta), min(tb)
        print(
            f"    {label:<32}{ma:>14.1f}{mb:>10.1f}{mb / ma:>7.2f}"
            f"{na:>13.1f}{nb:>10.1f}{nb / na:>7.2f}"
        )
        del a, b
    print(
        "    (min beside median: on a shared machine bursts of other load inflate the"
        " medians;\n     the min is the cost with the least interference)"
    )


def trace_cost(n: int, repeats: int, seed: int) -> None:
    trace = synthetic_trace(
        n, seed, rate=TRACE_RATE, output_sigma=TRACE_OUTPUT_SIGMA, max_model_len=4096
    )
    gated: list[ReplayResult] = []
    plain: list[ReplayResult] = []
    for _ in range(repeats):
        gated.append(replay(trace, TRACE_CONFIG))
        plain.append(replay(trace, TRACE_CONFIG, LegacyPolicy))
    g = gated[0]
    print(
        f"\n(b) trace: {n:,} requests (seed {seed}, rate {TRACE_RATE}/pass), "
        f"max_num_seqs {TRACE_CONFIG.max_num_seqs}, "
        f"{TRACE_CONFIG.max_num_batched_tokens} tokens/pass"
    )
    print(
        f"    concurrent decodes, mean per pass: {g.mean_decodes:.1f} over all {g.passes} "
        f"passes, {g.mean_decodes_arrivals:.1f} up to the last arrival"
    )
    print(f"    {'policy':<24}{'passes':>8}{'schedule us':>13}{'update us':>11}{'us/pass':>10}")
    for name, rs in (("densegate (gate on)", gated), ("no gate (LegacyPolicy)", plain)):
        sched = median([r.schedule_us for r in rs])
        upd = median([r.update_us for r in rs])
        tot = median([r.us_per_pass for r in rs])
        print(f"    {name:<24}{rs[0].passes:>8}{sched:>13.1f}{upd:>11.1f}{tot:>10.1f}")
    gate_us = median([r.us_per_pass for r in gated])
    base_us = median([r.us_per_pass for r in plain])
    print(f"    ratio gate on / no gate, both measured in this run: {gate_us / base_us:.2f}")
    print(f"    per decoding sequence: {gate_us / g.mean_decodes:.2f} us")
    print(
        f"    reference, NOT measured in this run: a mainstream engine's Python scheduler "
        f"costs about {EXTERNAL_STEP_US:.0f} us per step on such a trace;"
    )
    print(
        f"    densegate / that external figure: {gate_us / EXTERNAL_STEP_US:.2f} "
        f"(target: under 0.33)"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1] if __doc__ else None)
    ap.add_argument("--repeats", type=int, default=101, help="repeats per figure in (a) (median)")
    ap.add_argument("--passes", type=int, default=10, help="passes per timed repeat in (a)")
    ap.add_argument("--requests", type=int, default=2000, help="requests in the trace (b)")
    ap.add_argument("--trace-repeats", type=int, default=7, help="replays of the trace (median)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run, not a measure")
    args = ap.parse_args(argv)
    if args.quick:
        queue_length(16, 100, 1000, 2, 5)
        trace_cost(50, 1, args.seed)
        return 0
    queue_length(256, 100, 100_000, args.repeats, args.passes)
    trace_cost(args.requests, args.trace_repeats, args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
