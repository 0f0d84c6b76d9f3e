"""Issue 32's goal for the engine side by sides, one verdict per bar and scenario.

In every scenario densegate's default must finish the trace in at most 1.05x plain's
steps, with TTFT p99 in steps no worse than the best reference arm's (vLLM: the best
cadence arm; SGLang: the delayer) and, where arms hold passes, a held share no larger
than the delayer's; priced by the cost model, modeled tokens/s at least 0.995x the best
other arm's and TTFT p99 and ITL p99 in ms no worse than the best other arm's; no
decision disagreement, every request finished. ``goal`` returns each bar's verdict so a
script can print the misses honestly and exit on them only when asked (``--goal``).

The bars of one scenario may be held by different arms (plain the best TTFT, a cadence the
best tokens/s), so a missed bar alone does not say whether another arm was better on all
of them. ``dominators`` says that: per scenario, the arms at least as good as densegate on
every priced figure and better on one (none: densegate is on the arms' Pareto front).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "PRICED",
    "STEPS_RATIO",
    "TOKENS_RATIO",
    "Verdict",
    "beats",
    "best",
    "dominators",
    "finish",
    "front_line",
    "goal",
    "priced",
    "summary",
]

STEPS_RATIO = 1.05
TOKENS_RATIO = 0.995
PRICED = (("tokens_per_s", True), ("ttft_ms_p99", False), ("itl_ms_p99", False))
"""The priced figures (``modeled[key]``) and whether higher is better."""


@dataclass(frozen=True)
class Verdict:
    scenario: str
    dp: int
    bar: str
    met: bool
    detail: str

    def line(self) -> str:
        verdict = "met" if self.met else "missed"
        return f"goal: {verdict} {self.scenario} dp={self.dp} {self.bar}: {self.detail}"

    def as_dict(self) -> dict[str, Any]:
        return {"scenario": self.scenario, "dp": self.dp, "bar": self.bar, "met": self.met,
                "detail": self.detail}  # fmt: skip


def best(rows: Sequence[Mapping[str, Any]], key: str, high: bool) -> tuple[float, str]:
    """The best ``modeled[key]`` among ``rows`` (highest if ``high``) and its arm's name."""
    pick = max if high else min
    row = pick(rows, key=lambda r: float(r["modeled"][key]))
    return float(row["modeled"][key]), str(row["name"])


def _by_scenario(
    rows: Sequence[Mapping[str, Any]],
) -> dict[tuple[str, int], list[Mapping[str, Any]]]:
    groups: dict[tuple[str, int], list[Mapping[str, Any]]] = {}
    for r in rows:
        groups.setdefault((str(r["scenario"]), int(r["dp"])), []).append(r)
    return groups


def goal(
    rows: Sequence[Mapping[str, Any]],
    *,
    ours: str = "densegate",
    plain: str = "plain",
    ttft_refs: Sequence[str],
    held_ref: str | None = None,
) -> list[Verdict]:
    """Every bar's verdict per (scenario, dp). A row has ``scenario``, ``dp``, ``name``
    (the arm), ``steps``, ``ttft_steps_p99``, ``disagreements``, ``finished``,
    ``submitted``, ``modeled`` (``tokens_per_s``, ``ttft_ms_p99``, ``itl_ms_p99``) and,
    with ``held_ref``, ``held_share``."""
    out: list[Verdict] = []
    for (sc, dp), at in _by_scenario(rows).items():
        by = {str(r["name"]): r for r in at}
        us, base = by[ours], by[plain]
        others = [r for r in at if r["name"] != ours]

        def add(bar: str, met: bool, detail: str, sc: str = sc, dp: int = dp) -> None:
            out.append(Verdict(sc, dp, bar, met, detail))

        s, p = us["steps"], base["steps"]
        add("steps", s <= STEPS_RATIO * p, f"{s} vs plain {p} ({s / max(p, 1):.2f}x, bar 1.05x)")
        refs = [by[n] for n in ttft_refs]
        ref = min(refs, key=lambda r: float(r["ttft_steps_p99"]))
        t, rt = float(us["ttft_steps_p99"]), float(ref["ttft_steps_p99"])
        add("ttft-steps", t <= rt, f"p99 {t:.0f} vs {ref['name']} {rt:.0f} steps")
        if held_ref is not None:
            h, rh = float(us["held_share"]), float(by[held_ref]["held_share"])
            add("held-share", h <= rh, f"{100 * h:.1f}% vs {held_ref} {100 * rh:.1f}%")
        m = us["modeled"]
        top, name = best(others, "tokens_per_s", high=True)
        add("modeled-tokens/s", m["tokens_per_s"] >= TOKENS_RATIO * top,
            f"{m['tokens_per_s']:.0f} vs {name} {top:.0f} (bar 0.995x)")  # fmt: skip
        for key, label in (("ttft_ms_p99", "modeled-ttft-p99"), ("itl_ms_p99", "modeled-itl-p99")):
            top, name = best(others, key, high=False)
            add(label, m[key] <= top, f"{m[key]:.2f} ms vs {name} {top:.2f} ms")
        add("disagreements", us["disagreements"] == 0, f"{us['disagreements']}")
        unfinished = [f"{r['name']} {r['finished']}/{r['submitted']}" for r in at
                      if r["finished"] != r["submitted"]]  # fmt: skip
        add("finished", not unfinished, ", ".join(unfinished) or "every arm finished every request")
    return out


def beats(theirs: Sequence[float], ours: Sequence[float]) -> bool:
    """Whether figures ``theirs`` beat ``ours`` outright, both in ``PRICED``'s order
    (tokens/s, TTFT p99, ITL p99): no worse on each, and not equal on all. Exact."""
    no_worse = all(
        t >= o if high else t <= o for t, o, (_, high) in zip(theirs, ours, PRICED, strict=True)
    )
    return no_worse and tuple(theirs) != tuple(ours)


def priced(figures: Mapping[str, Any]) -> tuple[float, ...] | None:
    """``figures``' values in ``PRICED``'s order (a side by side row's ``modeled``, or a DP
    bench row); None if one is missing."""
    got = [figures.get(key) for key, _ in PRICED]
    return None if None in got else tuple(float(v) for v in got if v is not None)


def dominators(
    rows: Sequence[Mapping[str, Any]], *, ours: str = "densegate"
) -> dict[tuple[str, int], list[str]]:
    """Per (scenario, dp), in row order, the arms that beat ``ours`` outright there on
    modeled tokens/s, TTFT p99 and ITL p99 (``beats``; no 0.995 allowance)."""
    out: dict[tuple[str, int], list[str]] = {}
    for key, at in _by_scenario(rows).items():
        us = priced(next(r for r in at if r["name"] == ours)["modeled"])
        out[key] = [
            str(r["name"]) for r in at
            if r["name"] != ours and us is not None
            and (f := priced(r["modeled"])) is not None and beats(f, us)
        ]  # fmt: skip
    return out


def front_line(scenario: str, dp: int, by: Sequence[str], ours: str = "densegate") -> str:
    """``dominators``' word on one scenario, as the scripts print it."""
    if not by:
        return f"front: {ours} not beaten outright {scenario} dp={dp}"
    return f"front: {ours} beaten outright {scenario} dp={dp} by {', '.join(by)}"


def summary(
    rows: Sequence[Mapping[str, Any]],
    ver: Sequence[Verdict],
    front: Mapping[tuple[str, int], Sequence[str]],
    *,
    unit: str,
    ttft_refs: Sequence[str],
    ref_label: str,
    held_ref: str | None = None,
    ours: str = "densegate",
    plain: str = "plain",
) -> str:
    """One line per scenario (``goal``'s rows): densegate against plain's ``unit``, the
    TTFT reference arms' best p99 in ``unit`` (``ref_label``), ``held_ref``'s held share,
    the best other arm's priced figures, the bars missed and ``front``'s arms; then the
    counts. The docs' engine tables are this text (checked by the scripts' ``--doc``)."""
    held = held_ref is not None
    head = (
        f"| scenario | dp | {unit}: {ours} / {plain} | TTFT p99 {unit}: {ours} / {ref_label} | "
        + (f"held: {ours} / {held_ref} | " if held else "")
        + f"modeled tok/s: {ours} / best | modeled TTFT p99 ms: {ours} / best | "
        f"modeled ITL p99 ms: {ours} / best | goal bars missed | beaten outright by |"
    )
    lines = [head, "|" + "---|" * (10 if held else 9)]
    for (sc, dp), at in _by_scenario(rows).items():
        by = {str(r["name"]): r for r in at}
        us, base = by[ours], by[plain]
        others = [r for r in at if r["name"] != ours]
        tps, ttft, itl = (best(others, key, high)[0] for key, high in PRICED)
        ref = min(float(by[n]["ttft_steps_p99"]) for n in ttft_refs)
        mine = [v for v in ver if (v.scenario, v.dp) == (sc, dp)]
        m = us["modeled"]
        share = (
            f"{100 * us['held_share']:.1f}% / {100 * by[held_ref]['held_share']:.1f}% | "
            if held_ref is not None
            else ""
        )
        lines.append(
            f"| {sc} | {dp} | {us['steps']} / {base['steps']} | "
            f"{us['ttft_steps_p99']:.0f} / {ref:.0f} | {share}"
            f"{m['tokens_per_s']:.0f} / {tps:.0f} | {m['ttft_ms_p99']:.0f} / {ttft:.0f} | "
            f"{m['itl_ms_p99']:.2f} / {itl:.2f} | "
            f"{sum(not v.met for v in mine)} of {len(mine)} | "
            f"{', '.join(front[(sc, dp)]) or 'none'} |"
        )
    beaten = sum(bool(by) for by in front.values())
    lines.append(f"\ngoal bars met: {sum(v.met for v in ver)} of {len(ver)}")
    lines.append(
        f"{ours} beaten outright (another arm no worse on modeled tokens/s, TTFT p99 and ITL "
        f"p99, better on one) in {beaten} of {len(front)} scenarios"
    )
    return "\n".join(lines)


def finish(failed: Sequence[str], ver: Sequence[Verdict], *, goal_bars: bool) -> int:
    """A side by side's exit status: each of ``failed`` (its hard bars, a drifted doc) and,
    with ``goal_bars`` (``--goal``), each missed goal bar as a ``FAIL:`` line on stderr;
    1 if there was any."""
    missed = [v.line() for v in ver if not v.met] if goal_bars else []
    for line in [*failed, *missed]:
        print(f"FAIL: {line}", file=sys.stderr)
    return 1 if failed or missed else 0


def add_output_args(ap: argparse.ArgumentParser, *, json_help: str) -> None:
    """The flags every side by side has: ``--json``, ``--goal``, ``--doc MD``, ``--write-doc``."""
    ap.add_argument("--json", action="store_true", help=json_help)
    ap.add_argument("--goal", action="store_true", help="also exit 1 when a goal bar is missed")
    ap.add_argument("--doc", type=Path, default=None, metavar="MD",
                    help="exit 1 if MD's engine block for these arguments differs from the "
                         "summary table (its diff on stderr)")  # fmt: skip
    ap.add_argument("--write-doc", action="store_true", help="with --doc: rewrite the block")


def check_output_args(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Before any run: ``--write-doc`` needs ``--doc``, which must name a file (exit 2)."""
    if args.write_doc and args.doc is None:
        ap.error("--write-doc needs --doc MD")
    if args.doc is not None and not args.doc.is_file():
        ap.error(f"--doc: no file {str(args.doc)!r}")
