"""Choosing the gate's ``dense_tokens`` (B) and ``max_hold_passes`` (K) for a workload.

B and K trade output tokens/s against time to first token, and where the
trade lands depends on the workload and on what a pass costs. So each
candidate (B, K) of a small grid is replayed, priced by a profile, and judged
against a TTFT target by two figures: the worst S6 bound (the per-request
bound ``densegate prove`` proves, checked on this replay) and the worst
observed TTFT. The proposal is the highest modeled tokens/s among the
candidates that meet the target, or none, with the reason.

The replay itself is the caller's (``Replay``): this room may not import the
benchmark that owns the replay code, and a replay passed in keeps the choice
testable against any figures.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from densegate.impl.validation import check_int, check_positive_float
from densegate.lab.cost.timeline import TimeFigures

__all__ = [
    "DEFAULT_DENSE_FRACTIONS",
    "DEFAULT_HOLDS",
    "Candidate",
    "Replay",
    "Replayed",
    "Row",
    "Target",
    "TuneError",
    "Tuning",
    "check_workloads",
    "default_grid",
    "grid",
    "propose",
    "tune",
]

DEFAULT_DENSE_FRACTIONS = (0.25, 0.5, 0.75)
"""Default B candidates as fractions of the token budget (the config's own B is added)."""

DEFAULT_HOLDS = (2, 4, 8, 16, 32)
"""Default K candidates."""

UNITS = ("passes", "ms")


class TuneError(ValueError):
    """A bad tuning input; the message names the value."""


@dataclass(frozen=True)
class Target:
    """A TTFT target: ``value`` passes, or ``value`` modeled milliseconds."""

    unit: str
    value: float

    def __post_init__(self) -> None:
        if self.unit not in UNITS:
            raise TuneError(f"TTFT target unit must be one of {UNITS}, got {self.unit!r}")
        _checked(check_positive_float, "Target", f"value ({self.unit})", self.value)

    def __str__(self) -> str:
        return f"{self.value:g} {self.unit}" + (" (modeled)" if self.unit == "ms" else "")


@dataclass(frozen=True)
class Candidate:
    dense_tokens: int
    max_hold_passes: int


@dataclass(frozen=True)
class Replayed:
    """What one replay gives: request counts, its modeled times, TTFT in passes, S6 figures.

    ``s6`` is ``densegate.impl.traces.replay.s6_figures``'s dict (``bound_max``,
    ``worst_ratio``, ``violations``, ``windows``, ``disturbed``, ``per_request``).
    """

    requests: int
    finished: int
    modeled: TimeFigures
    ttft_passes: Sequence[int]
    s6: Mapping[str, Any]


Replay = Callable[[Candidate | None], Replayed]
"""Replays the workload with a candidate's B and K, or with the gate off (None)."""


@dataclass(frozen=True)
class Row:
    """One candidate's figures; every time is modeled (priced by the profile)."""

    candidate: Candidate | None
    """None: the gate-off baseline."""
    requests: int
    finished: int
    tokens_per_s: float | None
    ratio_to_gate_off: float | None
    ttft_ms: dict[str, float | None]
    itl_ms: dict[str, float | None]
    ttft_passes_max: int | None
    bound_passes: int | None
    """The worst S6 bound over the undisturbed head windows."""
    bound_ms: float | None
    """``bound_passes`` times the longest modeled pass of this replay."""
    worst_ratio: float | None
    violations: int
    windows: int
    disturbed: int
    over_target: int
    """Undisturbed head windows whose own bound (in the target's unit) exceeds the target."""
    meets: bool
    why_not: str = ""

    def to_json(self) -> dict[str, Any]:
        c = self.candidate
        d = {k: v for k, v in self.__dict__.items() if k != "candidate"}
        return {"dense_tokens": c and c.dense_tokens, "max_hold_passes": c and c.max_hold_passes,
                **d}  # fmt: skip


@dataclass
class Tuning:
    """A workload's candidates, its gate-off baseline, and the proposal (or why none)."""

    workload: str
    target: Target | None
    baseline: Row
    rows: list[Row] = field(default_factory=list)
    proposal: Row | None = None
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        p = self.proposal
        return {
            "workload": self.workload,
            "target": None if self.target is None else self.target.__dict__,
            "gate_off": self.baseline.to_json(),
            "candidates": [r.to_json() for r in self.rows],
            "proposal": None if p is None else p.to_json(),
            "reason": self.reason,
        }


def _checked(check: Callable[..., None], *args: object) -> None:
    """The project's own field check, its error raised as a ``TuneError``."""
    try:
        check(*args)
    except ValueError as e:
        raise TuneError(str(e)) from None


def check_workloads(names: Sequence[str], known: Sequence[str]) -> None:
    if not names:
        raise TuneError("no workload given")
    for n in names:
        if n not in known:
            raise TuneError(f"unknown workload {n!r}; choose from {', '.join(known)}")


def default_grid(token_budget: int, max_num_seqs: int) -> tuple[list[int], list[int]]:
    """B: fractions of the token budget and the config's default ``T - S``; K: 2..32."""
    dense = {max(1, int(f * token_budget)) for f in DEFAULT_DENSE_FRACTIONS}
    dense.add(max(1, token_budget - max_num_seqs))
    return sorted(dense), list(DEFAULT_HOLDS)


def grid(dense: Sequence[int], holds: Sequence[int], token_budget: int) -> list[Candidate]:
    """Every (B, K) pair, each value checked; duplicates dropped, order kept."""
    if not dense or not holds:
        raise TuneError(f"empty grid: dense_tokens {list(dense)}, max_hold_passes {list(holds)}")
    for b in dense:
        _checked(check_int, "tune", "dense_tokens", b, 1)
        if b > token_budget:
            raise TuneError(
                f"dense_tokens {b} is over the token budget {token_budget}: no pass could be dense"
            )
    for k in holds:
        _checked(check_int, "tune", "max_hold_passes", k, 1)
    return [Candidate(b, k) for b in dict.fromkeys(dense) for k in dict.fromkeys(holds)]


def _row(c: Candidate | None, r: Replayed, off_tps: float | None, target: Target | None) -> Row:
    m = r.modeled.summary()
    # S6 is the gate's property: the gate-off baseline gets no bound.
    s6 = r.s6 if c is not None else {}
    bound = s6.get("bound_max")
    longest = max(r.modeled.tick_ms, default=None)
    scale = 1.0 if target is None or target.unit == "passes" else longest or math.inf
    over = [b for _, _, b in s6.get("per_request", ()) if target and b * scale > target.value]
    bound_ms = None if bound is None or longest is None else bound * longest
    tps = r.modeled.tokens_per_s
    ttft_max = max(r.ttft_passes, default=None)
    row = Row(
        candidate=c,
        requests=r.requests,
        finished=r.finished,
        tokens_per_s=tps,
        ratio_to_gate_off=None if tps is None or not off_tps else tps / off_tps,
        ttft_ms=dict(m["ttft_ms"]),
        itl_ms=dict(m["itl_ms"]),
        ttft_passes_max=ttft_max,
        bound_passes=bound,
        bound_ms=bound_ms,
        worst_ratio=s6.get("worst_ratio"),
        violations=int(s6.get("violations", 0)),
        windows=int(s6.get("windows", 0)),
        disturbed=int(s6.get("disturbed", 0)),
        over_target=len(over),
        meets=False,
    )
    why = _why_not(row, target)
    return Row(**{**row.__dict__, "meets": not why, "why_not": why})


def _why_not(row: Row, target: Target | None) -> str:
    """Empty if ``row`` meets ``target``; otherwise the first reason it does not."""
    if row.finished != row.requests:
        return f"{row.requests - row.finished} requests did not finish"
    if row.violations:
        return f"{row.violations} head windows over their S6 bound"
    if target is None:
        return ""
    if row.bound_passes is None:
        return "no undisturbed head window, so no S6 bound"
    bound: float
    observed: float | None
    if target.unit == "passes":
        bound, observed = float(row.bound_passes), row.ttft_passes_max
    else:
        bound, observed = row.bound_ms or math.inf, row.ttft_ms.get("max")
    unit = "passes" if target.unit == "passes" else "ms (modeled)"
    if bound > target.value:
        return (
            f"S6 bound {bound:.4g} {unit} > target {target.value:g} "
            f"({row.over_target} of {row.windows} head windows over)"
        )
    if observed is None or observed > target.value:
        return f"observed TTFT max {observed} {unit} > target {target.value:g}"
    return ""


def propose(rows: Sequence[Row], target: Target | None) -> tuple[Row | None, str]:
    """The highest modeled tokens/s among the rows that meet the target, or None and why."""
    ok = [r for r in rows if r.meets and r.tokens_per_s is not None]
    if ok:
        best = max(ok, key=lambda r: r.tokens_per_s or 0.0)
        what = f"meet the target {target}" if target else "finish (no TTFT target given)"
        return (
            best,
            f"highest modeled tokens/s of the {len(ok)} of {len(rows)} candidates that {what}",
        )
    if not rows:
        return None, "no candidates"
    closest = min(rows, key=lambda r: r.bound_passes if r.bound_passes is not None else math.inf)
    c = closest.candidate
    where = (
        f"; smallest S6 bound at B {c.dense_tokens}, K {c.max_hold_passes}: {closest.why_not}"
        if c
        else ""
    )
    return None, f"none of the {len(rows)} candidates meets the target {target}{where}"


def tune(
    workload: str,
    candidates: Sequence[Candidate],
    replay: Replay,
    target: Target | None = None,
    progress: Callable[[str], None] | None = None,
) -> Tuning:
    """Replay the gate-off baseline, then every candidate; rows in candidate order."""
    if not candidates:
        raise TuneError("empty grid: no candidates")
    off = replay(None)
    base = _row(None, off, off.modeled.tokens_per_s, None)
    out = Tuning(workload, target, base)
    for c in candidates:
        out.rows.append(_row(c, replay(c), base.tokens_per_s, target))
        if progress is not None:
            progress(f"{workload}: B {c.dense_tokens}, K {c.max_hold_passes} replayed")
    out.proposal, out.reason = propose(out.rows, target)
    return out
