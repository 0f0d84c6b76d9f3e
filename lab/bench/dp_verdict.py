"""The DP side by side's verdict, one row per workload and load: densegate against the
best engine rule on each column, beside the physical floors, and the count of cells
where issue 31's goal (and its stretch: ITL and TTFT p99 within 2x the floors) is met.

The share of inter-token gaps that end in a tick where some rank prefilled says why an
ITL column is lost: once it passes 1%, ITL p99 is a mixed pass's cost; a rule whose
share stays under 1% (by holding, at a TTFT cost) has ITL p99 at the decode-only floor.
A missed cell whose ``"bound"`` (``densegate.lab.bench.dp_bound``) is unreachable is one no
rule the bench can run meets: its goal column says so. The last line counts the cells where
one engine rule beats densegate outright: no worse on tokens/s, TTFT p99 and ITL p99, better
on one (``densegate.lab.bench.side_goal.beats``, as the engine side by sides judge it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from densegate.impl.figures import fmt
from densegate.lab.bench.side_goal import beats, priced

__all__ = ["STRETCH", "beaten_by", "format_verdicts"]

STRETCH = 2.0
"""Issue 31's stretch: densegate's ITL p99 and TTFT p99 at most this times their floors."""


def _best(rows: Sequence[dict[str, Any]], bar: Sequence[str], col: str, high: bool) -> Any:
    peers = [x for x in rows if x["name"] in bar and x[col] is not None]
    return (max if high else min)(peers, key=lambda x: x[col]) if peers else None


def _pct(share: float | None) -> str:
    return "-" if share is None else f"{100 * share:.1f}%"


def beaten_by(rows: Sequence[dict[str, Any]], bar: Sequence[str]) -> list[str]:
    """The engine rules (``bar``) that beat densegate outright in one cell's ``rows``."""
    ours = next((priced(x) for x in rows if x["name"] == "densegate"), None)
    if ours is None:
        return []
    return [
        str(x["name"]) for x in rows
        if x["name"] in bar and (f := priced(x)) is not None and beats(f, ours)
    ]  # fmt: skip


def format_verdicts(by_workload: Sequence[dict[str, Any]], bar: Sequence[str]) -> list[str]:
    """The verdict table (markdown lines) for entries ``{"name", "load", "policies", "goal"}``."""
    lines = [
        "| workload | load | tokens/s ÷ best | ITL p99 ÷ best (best) | TTFT p99 ÷ best (best) "
        "| ITL / TTFT p99 ÷ floor | gaps in prefill ticks: densegate / best ITL | goal |",
        "|---|---:|---:|---|---|---:|---:|---|",
    ]
    met = stretch = cells = 0
    beyond: list[str] = []
    beaten: list[str] = []
    for w in by_workload:
        rows, goal = w["policies"], w.get("goal")
        ours = next((x for x in rows if x["name"] == "densegate"), None)
        if ours is None or goal is None:
            continue
        cells += 1
        tok = _best(rows, bar, "tokens_per_s", True)
        itl = _best(rows, bar, "itl_ms_p99", False)
        ttft = _best(rows, bar, "ttft_ms_p99", False)
        ok = all(goal.values())
        met += ok
        out_of_reach = bool(w.get("bound", {}).get("unreachable"))
        if out_of_reach:
            beyond.append(f"{w['name']} {fmt(w['load'])}")
        by = beaten_by(rows, bar)
        if by:
            beaten.append(f"{w['name']} {fmt(w['load'])} by {', '.join(by)}")
        floors = (ours.get("itl_p99_to_floor"), ours.get("ttft_p99_to_floor"))
        stretch += all(f is not None and f <= STRETCH for f in floors)
        lines.append(
            f"| {w['name']} | {fmt(w['load'])} | "
            f"{fmt(ours['tokens_per_s'] / tok['tokens_per_s'])} | "
            f"{fmt(ours['itl_ms_p99'] / itl['itl_ms_p99'])} ({itl['name']}) | "
            f"{fmt(ours['ttft_ms_p99'] / ttft['ttft_ms_p99'])} ({ttft['name']}) | "
            f"{fmt(floors[0])} / {fmt(floors[1])} | {_pct(ours.get('gaps_in_prefill_ticks'))} / "
            f"{_pct(itl.get('gaps_in_prefill_ticks'))} | {'met' if ok else 'NOT met'}"
            f"{' (no rule can)' if out_of_reach else ''} |"
        )
    lines += ["", f"goal met in {met} of {cells} cells; stretch (ITL and TTFT p99 <= "
              f"{STRETCH:g}x their floors) met in {stretch} of {cells}"]  # fmt: skip
    if beyond:
        lines.append(f"no rule can meet the best peers' TTFT and ITL p99 together in "
                     f"{len(beyond)} of the missed cells ({', '.join(beyond)}): "
                     "densegate.lab.bench.dp_bound")  # fmt: skip
    lines.append(
        f"an engine rule beats densegate on tokens/s, TTFT p99 and ITL p99 at once in "
        f"{len(beaten)} of {cells} cells" + (f" ({'; '.join(beaten)})" if beaten else "")
    )
    return lines
