"""Phases measured in rounds, pooled, and each one's ratio to a baseline of the same run.

A noisy neighbour can slow one phase and not another. So phases run in
rounds whose order alternates (A B C, then C B A, ...: a palindrome, so a
drift in the machine's speed weighs every phase alike), each phase's rounds
are pooled (tokens and seconds summed, latency samples merged), and the ratio
to the baseline is taken on the pooled figures; the per-round ratios are kept
to show their spread.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from densegate.impl.validation import check_int
from densegate.lab.cost.timeline import TimeFigures

__all__ = ["ROUND_SEP", "compare_rounds", "round_name", "round_order", "split_round"]

ROUND_SEP = "@"
"""A repeated phase is named ``<phase>@<round>`` from round 2 on."""

T = TypeVar("T")


def round_name(name: str, k: int) -> str:
    return name if k == 1 else f"{name}{ROUND_SEP}{k}"


def split_round(name: str) -> tuple[str, int]:
    base, _, k = name.partition(ROUND_SEP)
    return base, int(k) if k else 1


def round_order(items: Sequence[T], rounds: int) -> list[tuple[int, T]]:
    """``(round, item)`` for ``rounds`` rounds, every even round reversed."""
    check_int("round_order", "rounds", rounds, 1)
    out: list[tuple[int, T]] = []
    for k in range(1, rounds + 1):
        out.extend((k, x) for x in (items if k % 2 else list(reversed(items))))
    return out


def compare_rounds(figures: Mapping[str, TimeFigures], baseline: str) -> dict[str, dict[str, Any]]:
    """Per phase (rounds pooled, first-seen order): the pooled summary, tokens/s per round,
    and the pooled and per-round ratios of tokens/s to ``baseline``'s."""
    groups: dict[str, dict[int, TimeFigures]] = {}
    for name, f in figures.items():
        base, k = split_round(name)
        groups.setdefault(base, {})[k] = f
    ref = groups.get(baseline)
    ref_pooled = TimeFigures.pooled(list(ref.values())).tokens_per_s if ref else None
    out: dict[str, dict[str, Any]] = {}
    for base, rounds in groups.items():
        pooled = TimeFigures.pooled([rounds[k] for k in sorted(rounds)])
        per_round = {k: rounds[k].tokens_per_s for k in sorted(rounds)}
        tps = pooled.tokens_per_s
        ratios: dict[int, float | None] = {}
        for k, v in per_round.items():
            r = ref.get(k) if ref else None
            rv = r.tokens_per_s if r else None
            ratios[k] = v / rv if v is not None and rv else None
        out[base] = {
            **pooled.summary(),
            "rounds": len(rounds),
            "tokens_per_s_by_round": per_round,
            "ratio_to_baseline": tps / ref_pooled if tps is not None and ref_pooled else None,
            "ratio_to_baseline_by_round": ratios,
            "baseline": baseline,
        }
    return out
