"""``densegate tune --dp N``: the aligned gate's K, ``align_ticks``, ``pace_tokens`` (the
paced release) and ``surge_tokens`` (its surge cap) per workload, judged against the
engines' own DP rules through the same rank loops (modeled; ``densegate tune --dp`` runs
them on the seconds clock).

Each workload's peers run once; then every candidate (K, A, C, S) runs as the densegate
phase alone on the same trace (a surge cap only beside a pace cap at or under it). A paced
candidate (C set) runs once, whatever K and A: the paced release never holds, so ALIGNED
and the budget are never reached (D9), and its row has ``max_hold_passes`` and
``align_ticks`` None (they do not apply); hold-mode candidates run every (K, A). The
proposal is issue 31's goal read as a choice: among the candidates whose TTFT p99 is at
most the best peer's, the highest tokens/s (ties: lower TTFT p99); each row also says
whether it meets the whole goal (``goal``). None meets the TTFT part: then no proposal,
and the row with the lowest TTFT p99 is named instead. Modeled figures only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from densegate.impl.engine import EngineConfig
from densegate.impl.figures import fmt
from densegate.impl.traces.workload import TraceRequest
from densegate.lab.bench.dp_policies import bar_peers, goal, run_dp_policies
from densegate.lab.cost.model import PassModel

__all__ = ["DEFAULT_ALIGNS", "format_dp_tuning", "tune_dp"]

DEFAULT_ALIGNS: tuple[int | None, ...] = (None, 0, 2)
"""Default ``align_ticks`` candidates (None: the ALIGNED release off)."""
DEFAULT_PACES: tuple[int | None, ...] = (None,)
"""Default ``pace_tokens`` candidates (None: the paced release off); the CLI adds the
profile's ridge (``densegate.lab.cost.ridge``)."""
DEFAULT_SURGES: tuple[int | None, ...] = (None,)
"""Default ``surge_tokens`` candidates (None: the surge cap off); the CLI adds the profile's
surge ridge."""


def _figures(run: dict[str, Any]) -> dict[str, float]:
    m = run["modeled"]
    return {"tokens_per_s": m["output_tokens_per_s"], "itl_ms_p99": m["itl_ms"]["p99"],
            "ttft_ms_p99": m["ttft_ms"]["p99"]}  # fmt: skip


def tune_dp(
    trace: Sequence[TraceRequest],
    engine: EngineConfig,
    dp: int,
    model: PassModel,
    holds: Sequence[int],
    aligns: Sequence[int | None] = DEFAULT_ALIGNS,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
    paces: Sequence[int | None] = DEFAULT_PACES,
    clock: str = "ticks",
    surges: Sequence[int | None] = DEFAULT_SURGES,
) -> dict[str, Any]:
    """The peers' figures, every candidate's, and the proposal (or None, with why)."""
    peers = {n: _figures(r) for n, r in run_dp_policies(trace, engine, dp, model, bar_peers(),
                                                         seed, clock=clock).items()}  # fmt: skip
    best = {"tokens_per_s": max(p["tokens_per_s"] for p in peers.values()),
            "itl_ms_p99": min(p["itl_ms_p99"] for p in peers.values()),
            "ttft_ms_p99": min(p["ttft_ms_p99"] for p in peers.values())}  # fmt: skip
    rows = []
    grid: list[tuple[int | None, int | None, int | None, int | None]] = [
        (k, a, None, None) for k in holds for a in aligns if None in paces
    ]
    grid += [(None, None, c, g) for c in paces if c is not None for g in surges
             if g is None or g >= c]  # fmt: skip
    for k, a, c, g in grid:
        cfg = engine if k is None else dataclasses.replace(engine, max_hold_passes=k)
        run = run_dp_policies(trace, cfg, dp, model, ["densegate"], seed, align_ticks=a,
                              pace_tokens=c, clock=clock, surge_tokens=g)  # fmt: skip
        f = _figures(run["densegate"])
        met = goal([{"name": "densegate", **f}, *({"name": n, **p} for n, p in peers.items())])
        assert met is not None  # densegate and the peers are all there
        rows.append({"max_hold_passes": k, "align_ticks": a, "pace_tokens": c,
                     "surge_tokens": g, **f,
                     "ttft_ok": met["ttft_ms_p99"], "goal": all(met.values()),
                     "finished": run["densegate"]["finished"]})  # fmt: skip
        if progress is not None:
            progress(f"{_setting(rows[-1])}: {fmt(f['tokens_per_s'])} tokens/s")
    fits = [r for r in rows if r["ttft_ok"]]
    pick = max(fits, key=lambda r: (r["tokens_per_s"], -r["ttft_ms_p99"])) if fits else None
    why = None
    if pick is None:
        low = min(rows, key=lambda r: r["ttft_ms_p99"])
        why = (f"no candidate at or under the best peer's TTFT p99 "
               f"({fmt(best['ttft_ms_p99'])} ms); lowest: {_setting(low)} at "
               f"{fmt(low['ttft_ms_p99'])} ms")  # fmt: skip
    return {"requests": len(trace), "peers": peers, "best_peer": best, "candidates": rows,
            "proposal": pick, "why_none": why}  # fmt: skip


def format_dp_tuning(name: str, t: dict[str, Any]) -> list[str]:
    """One markdown table: the peers, then each candidate with its goal columns."""
    lines = [f"### {name} (modeled, {t['requests']} requests)", "",
             "| setting | tokens/s | ITL ms p99 | TTFT ms p99 | TTFT <= best peer | goal |",
             "|---|---:|---:|---:|---|---|"]  # fmt: skip
    for n, p in t["peers"].items():
        lines.append(f"| {n} | {fmt(p['tokens_per_s'])} | {fmt(p['itl_ms_p99'])} | "
                     f"{fmt(p['ttft_ms_p99'])} | | |")  # fmt: skip
    for r in t["candidates"]:
        lines.append(f"| densegate {_setting(r)} | "
                     f"{fmt(r['tokens_per_s'])} | {fmt(r['itl_ms_p99'])} | "
                     f"{fmt(r['ttft_ms_p99'])} | {'yes' if r['ttft_ok'] else 'no'} | "
                     f"{'met' if r['goal'] else 'not met'} |")  # fmt: skip
    p = t["proposal"]
    if p is None:
        lines += ["", f"proposal: none ({t['why_none']})"]
    else:
        best = t["best_peer"]
        tok = fmt(p["tokens_per_s"] / best["tokens_per_s"])
        ttft = fmt(p["ttft_ms_p99"] / best["ttft_ms_p99"])
        met = "met" if p["goal"] else "not met"
        lines += ["", f"proposal: {_setting(p)} (goal {met}: "
                  f"tokens/s {tok}x the best peer's, TTFT p99 {ttft}x)"]  # fmt: skip
    return lines


def _setting(r: dict[str, Any]) -> str:
    if r.get("pace_tokens") is not None:  # paced: K and align_ticks do not apply
        g = "" if r.get("surge_tokens") is None else f" surge_tokens={r['surge_tokens']}"
        return f"pace_tokens={r['pace_tokens']}{g}"
    a = "off" if r["align_ticks"] is None else r["align_ticks"]
    return f"K={r['max_hold_passes']} align_ticks={a} pace_tokens=off"
