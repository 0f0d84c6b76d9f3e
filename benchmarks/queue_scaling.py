#!/usr/bin/env python3
"""Scheduler cost per pass against queue length and running count.

For each running count (16 to 1,024 decoding sequences) and queue length (100
to 100,000 waiting), the scheduler is put in a steady state and timed
(``Scheduler.schedule`` + ``Scheduler.update``, runner excluded):

- gate holding: one slot free, the head fits, the admissible prefill is
  under-full, so every pass plans an admission, asks the gate and holds;
- admitting: every pass admits a full batch of new prefills (a DENSE fire),
  which finish at once; the queue is topped up between passes, untimed.

The cost should grow with the running count (every decode is planned and
processed) and stay flat in the queue length: each row prints its ratio to the
smallest queue, measured in the same run, with the queue lengths timed in
alternation. Cells are medians over repeats; the last column gives the ratio
ranges of the medians and of the minima (the cost with the least interference
from other load on a shared machine). Run from the repository root:
``python benchmarks/queue_scaling.py`` (``--quick`` for a smoke run).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import SteadyState, admitting_state, holding_state, median


def grid(
    label: str,
    build: Callable[[int, int], SteadyState],
    running: Sequence[int],
    waiting: Sequence[int],
    repeats: int,
    passes: int,
) -> None:
    print(f"\n{label}: scheduler us per pass (ratio to {waiting[0]:,} waiting)")
    print(
        f"{'running':>8}"
        + "".join(f"{format(w, ','):>18}" for w in waiting)
        + "   ratio range (median; min)"
    )
    for r in running:
        states = [build(r, w) for w in waiting]
        times: list[list[float]] = [[] for _ in waiting]
        for _ in range(repeats):
            for i, s in enumerate(states):
                times[i].append(s.time_passes(passes))
        meds = [median(t) for t in times]
        ratios = [m / meds[0] for m in meds]
        mins = [min(t) / min(times[0]) for t in times]
        cells = [f"{m:.1f} ({q:.2f})" for m, q in zip(meds, ratios, strict=True)]
        print(
            f"{r:>8}"
            + "".join(f"{c:>18}" for c in cells)
            + f"   {min(ratios):.2f}-{max(ratios):.2f}; {min(mins):.2f}-{max(mins):.2f}"
        )
        del states


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--repeats", type=int, default=51, help="repeats per cell (median)")
    ap.add_argument("--passes", type=int, default=8, help="passes per timed repeat")
    ap.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run, not a measure")
    args = ap.parse_args(argv)
    if args.quick:
        running: Sequence[int] = (4, 16)
        waiting: Sequence[int] = (100, 300)
        repeats, passes = 2, 3
    else:
        running = (16, 64, 256, 1024)
        waiting = (100, 1_000, 10_000, 100_000)
        repeats, passes = args.repeats, args.passes
    grid("gate holding (HOLD every pass)", holding_state, running, waiting, repeats, passes)
    grid("admitting a full batch (DENSE)", admitting_state, running, waiting, repeats, passes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
