"""The benchmark's time tables: modeled (from a profile) and measured (pooled rounds).

Every modeled table starts with the profile's inputs, so each figure in it
traces back to them; every measured table says how its rounds were ordered.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from densegate.impl.figures import fmt
from densegate.lab.bench.dp_runs import DP_PHASES, DPPhaseRun
from densegate.lab.bench.runs import TIME_BASELINE, BenchResult

__all__ = ["format_cost_tables", "format_dp_cost_tables", "format_time_tables"]

_Row = tuple[str, Callable[[Mapping[str, Any]], str]]


def _pcts(d: Mapping[str, Any] | None, *qs: str) -> str:
    return "-" if d is None else " / ".join(fmt(d.get(q)) for q in qs)


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or not b else f"{a / b:.3f}"


def _table(title: str, columns: Sequence[str], cells: Sequence[Mapping[str, Any]],
           rows: Sequence[_Row]) -> list[str]:  # fmt: skip
    lines = ["", title, "", "| figure | " + " | ".join(columns) + " |"]
    lines.append("|---|" + "---:|" * len(columns))
    for label, cell in rows:
        lines.append(f"| {label} | " + " | ".join(cell(c) for c in cells) + " |")
    return lines


def format_cost_tables(result: BenchResult, profile: Sequence[str]) -> str:
    """Per workload, per policy: pass counts beside modeled tokens/s, TTFT, ITL and pass ms,
    and densegate's modeled tokens/s over each policy's."""
    lines = ["modeled times (each pass priced by the profile below; arrivals on the pass clock)"]
    lines += [f"  {x}" for x in profile]
    for w in result.workloads.values():
        names = list(w.runs)
        ours = w.runs["densegate"].figures["modeled_time"] if "densegate" in w.runs else None
        ours_tps = ours["output_tokens_per_s"] if ours else None
        cells = [
            {**w.runs[p].figures, "ratio": _ratio(ours_tps, w.runs[p].figures["modeled_time"][
                "output_tokens_per_s"])}
            for p in names
        ]  # fmt: skip
        rows: list[_Row] = [
            ("passes", lambda f: fmt(f["passes"])),
            ("prefill passes (mean fill)",
             lambda f: f"{f['prefill_passes']} ({fmt(f['mean_prefill_fill'])})"),
            ("under-full prefill passes interrupting decode",
             lambda f: fmt(f["underfull_interrupting"])),
            ("modeled output tokens/s", lambda f: fmt(f["modeled_time"]["output_tokens_per_s"])),
            ("modeled: densegate tokens/s / this column's",
             lambda f: str(f["ratio"])),
            ("modeled TTFT ms p50 / p99 / max",
             lambda f: _pcts(f["modeled_time"]["ttft_ms"], "p50", "p99", "max")),
            ("modeled ITL ms p50 / p99",
             lambda f: _pcts(f["modeled_time"]["itl_ms"], "p50", "p99")),
            ("modeled pass ms p50 / p99",
             lambda f: _pcts(f["modeled_time"]["tick_ms"], "p50", "p99")),
        ]  # fmt: skip
        title = f"### {w.workload} (modeled, one rank): {w.description} ({w.requests} requests)"
        lines += _table(title, names, cells, rows)
    return "\n".join(lines)


def format_time_tables(result: BenchResult) -> str:
    """Per workload, per policy: measured tokens/s, TTFT, ITL and pass ms, rounds pooled."""
    rounds = result.config.get("rounds", 1)
    lines = [
        f"measured times (runner {result.runner}; {rounds} round(s), the policy order reversed "
        f"every other round, rounds pooled; ratio: tokens/s over {TIME_BASELINE}'s in the same "
        "run)"
    ]
    for w in result.workloads.values():
        if not w.time:
            continue
        names = list(w.time)
        cells = [w.time[p] for p in names]
        rows: list[_Row] = [
            ("output tokens/s", lambda t: fmt(t["output_tokens_per_s"])),
            (f"  ratio to {TIME_BASELINE} (pooled)", lambda t: fmt(t["ratio_to_baseline"])),
            ("  ratio per round", lambda t: ", ".join(
                fmt(v) for v in t["ratio_to_baseline_by_round"].values())),
            ("TTFT ms p50 / p99", lambda t: _pcts(t["ttft_ms"], "p50", "p99")),
            ("ITL ms p50 / p99", lambda t: _pcts(t["itl_ms"], "p50", "p99")),
            ("pass ms p50 / p99", lambda t: _pcts(t["tick_ms"], "p50", "p99")),
        ]  # fmt: skip
        title = f"### {w.workload} (measured): {w.description} ({w.requests} requests)"
        lines += _table(title, names, cells, rows)
    return "\n".join(lines)


def format_dp_cost_tables(
    runs: Mapping[str, tuple[int, Mapping[str, DPPhaseRun]]], dp: int, profile: Sequence[str]
) -> str:
    """Per workload: the DP phases' modeled tokens/s, TTFT, ITL and tick ms, and ratios."""
    lines = [
        f"modeled times at dp={dp} (a tick: the slowest rank's pass plus the collective, "
        "each pass priced by the profile below; each rank sees the one-rank workload's load)"
    ]
    lines += [f"  {x}" for x in profile]
    off, local = DP_PHASES[2], DP_PHASES[1]
    for wname, (requests, phases) in runs.items():
        tps = {p: phases[p].modeled.tokens_per_s for p in DP_PHASES}
        cells = [
            {"run": phases[p], "t": phases[p].modeled.summary(), "requests": requests,
             "vs_off": _ratio(tps[p], tps[off]), "vs_local": _ratio(tps[p], tps[local])}
            for p in DP_PHASES
        ]  # fmt: skip
        rows: list[_Row] = [
            ("requests finished", lambda c: f"{c['run'].finished} / {c['requests']}"),
            ("ticks", lambda c: fmt(c["run"].alignment.get("ticks"))),
            ("mixed ticks (a rank prefills, another only decodes)",
             lambda c: fmt(c["run"].alignment.get("mixed_ticks"))),
            ("modeled output tokens/s", lambda c: fmt(c["t"]["output_tokens_per_s"])),
            ("modeled: tokens/s / gate off's",
             lambda c: str(c["vs_off"])),
            ("modeled: tokens/s / local gates'",
             lambda c: str(c["vs_local"])),
            ("modeled TTFT ms p50 / p99 / max", lambda c: _pcts(c["t"]["ttft_ms"], "p50", "p99",
                                                                "max")),
            ("modeled ITL ms p50 / p99", lambda c: _pcts(c["t"]["itl_ms"], "p50", "p99")),
            ("modeled tick ms p50 / p99", lambda c: _pcts(c["t"]["tick_ms"], "p50", "p99")),
        ]  # fmt: skip
        names = [p.replace("_", " ") for p in DP_PHASES]
        lines += _table(f"### {wname} (modeled, dp={dp}, {requests} requests)", names, cells, rows)
    return "\n".join(lines)
