"""Time per phase of a data-parallel run: recorded on each rank, pooled, side by side.

``TimingHooks`` (rank hooks, ``densegate.impl.dp.hooks``) wraps each phase's
runner in a ``densegate.lab.cost.timeline.RankTiming`` and puts its record in
the rank's report (``RankReport.timing``). ``phase_timing`` pools the ranks of
each phase, then the rounds of each phase (``densegate.lab.cost.compare``), with
the ratio to gate-off; ``print_timing`` prints it. Only phases run on the
coordinated phase's runner are timed against it, and none when that is the null
runner (its passes, like the untimed baselines', measure the scheduler alone).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from densegate.impl.dp.config import COORDINATED, Phase
from densegate.impl.dp.hooks import IdlePhase, PhaseHooks
from densegate.impl.dp.report import RankReport
from densegate.impl.engine import Engine
from densegate.impl.figures import fmt
from densegate.lab.cost.compare import compare_rounds, split_round
from densegate.lab.cost.timeline import RankTiming, TimeFigures, dp_figures
from densegate.lab.dp.phases import BASELINE

__all__ = ["TimingHooks", "phase_timing", "print_timing"]


class _PhaseTiming(IdlePhase):
    def __init__(self, engine: Engine) -> None:
        self.timing = RankTiming(engine)  # installs its timed runner on the engine

    def finish(self, report: RankReport) -> None:
        report.timing = self.timing.report()


@dataclass(frozen=True)
class TimingHooks:
    """The rank hooks that record every phase's passes, for ``phase_timing`` and the
    bench's modeled times (``densegate.lab.cost.timeline.dp_figures``)."""

    def phase(self, rank: int, index: int, phase: Phase, engine: Engine) -> PhaseHooks:
        return _PhaseTiming(engine)


def phase_timing(by_phase: Mapping[str, Mapping[int, RankReport]]) -> dict[str, Any] | None:
    """Per phase, rounds pooled: measured tokens/s, TTFT, ITL and tick ms, ratio to gate-off."""
    main = by_phase.get(COORDINATED)
    if not main or any(not r.timing for r in main.values()):
        return None
    runner = next(iter(main.values())).runner
    if runner == "null":  # a null runner's passes time the scheduler alone
        return None
    figures: dict[str, TimeFigures] = {}
    for name, reps in by_phase.items():
        if all(r.timing and r.runner == runner for r in reps.values()):
            figures[name] = dp_figures([reps[k].timing for k in sorted(reps)])
    return {"runner": runner, "phases": compare_rounds(figures, BASELINE)}


def print_timing(console: Any, s: Mapping[str, Any]) -> None:
    """The ``timing`` entry of a summary as one table, if it has one."""
    timing = s.get("timing")
    if not timing:
        return
    from rich.table import Table

    phases = timing["phases"]
    rounds = max(p["rounds"] for p in phases.values())
    t = Table(
        title=f"time per phase (measured, runner {timing['runner']}, {rounds} round(s) in "
        "alternating order, pooled)"
    )
    t.add_column("figure")
    for name in phases:
        t.add_column(split_round(name)[0].replace("_", " "))

    def pct(d: Mapping[str, Any], *qs: str) -> str:
        return " / ".join(fmt(d.get(q)) for q in qs)

    rows: tuple[tuple[str, Callable[[Mapping[str, Any]], str]], ...] = (
        ("output tokens/s", lambda p: fmt(p["output_tokens_per_s"])),
        ("  ratio to gate off (pooled)", lambda p: fmt(p["ratio_to_baseline"])),
        ("  ratio per round", lambda p: ", ".join(
            fmt(v) for v in p["ratio_to_baseline_by_round"].values())),
        ("TTFT ms p50 / p99", lambda p: pct(p["ttft_ms"], "p50", "p99")),
        ("ITL ms p50 / p99", lambda p: pct(p["itl_ms"], "p50", "p99")),
        ("tick ms p50 / p99", lambda p: pct(p["tick_ms"], "p50", "p99")),
        ("seconds (all rounds)", lambda p: fmt(p["seconds"])),
    )  # fmt: skip
    for label, cell in rows:
        t.add_row(label, *(cell(p) for p in phases.values()))
    console.print(t)
