"""Hypothesis strategies for aligned (data-parallel) gates: configs, world sizes, tick runs.

A run is a config, a world size and ticks (a ``ReducedObservation`` and the shared tick
number). Each tick is the SUM of one ``RankObservation`` per rank, built with the shipped
vector code (``RankObservation.to_vector``), so every reduced vector is one real ranks can
send. Runs are drawn as *segments* (a stretch of ticks whose ranks play given roles) stated
relative to the config (``fill_tokens - 1`` tokens, "filled"), so one drawn list of segments
makes sense for any config and world size and shrinks towards short runs of boundary
values. Use them in your own tests::

    from hypothesis import given
    from densegate.testing import aligned_runs

    @given(run=aligned_runs())
    def test_my_gate(run):
        gate = MyAlignedGate(run.config, run.world_size)
        for reduced, tick in run.passes:
            gate.decide(reduced, tick)
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from hypothesis import strategies as st

from densegate.impl.dp_gate import AlignedGateConfig, RankObservation, ReducedObservation

__all__ = [
    "MAX_WORLD",
    "STRATA",
    "AlignedKind",
    "AlignedRun",
    "AlignedSegment",
    "RankRole",
    "aligned_configs",
    "aligned_runs",
    "aligned_segments",
    "aligned_strata",
    "dense_thresholds",
    "hold_budgets",
    "one_rank_configs",
    "world_sizes",
]

MAX_WORLD = 8
"""The most ranks a drawn run has."""
MAX_SEGMENT = 24
"""Longest stretch of one kind; a few stretches spend any budget ``hold_budgets`` draws."""

Tick = tuple[ReducedObservation, int]
"""One tick: the reduced vector every rank sees, and the tick number they share."""


@dataclass(frozen=True, slots=True)
class AlignedRun:
    """A config, a world size and the ticks to feed fresh gates built from them."""

    config: AlignedGateConfig
    world_size: int
    passes: tuple[Tick, ...]


class RankRole(enum.Enum):
    """What one rank does in a tick; the first ones are what shrinking prefers."""

    THIN = "thin"
    """Waits under its fill share (1 .. fill_tokens - 1 tokens) and decodes: holdable."""
    DECODING = "decoding"
    """Only decodes: nothing waits on it."""
    VACANT = "vacant"
    """Neither waits nor decodes: ALIGNED need not wait for it."""
    FILLED = "filled"
    """Waits with at least fill_tokens and decodes: a dense pass of its own."""
    STARVED = "starved"
    """Waits and decodes nothing: no rule may hold it (NO_DECODE, or PACED)."""


class AlignedKind(enum.Enum):
    """Which roles the ranks take; the first ones are what shrinking prefers. "The others"
    are thin, decoding or vacant, as drawn."""

    THIN = "thin"
    """Every rank thin: HOLD's ground, and ALIGNED's."""
    SPARSE = "sparse"
    """Rank 0 thin, the last rank vacant, the others thin or vacant: an aligned release
    must not wait for vacant ranks."""
    HOT = "hot"
    """Rank 0 filled, the others cold: DENSE by the per-rank fill."""
    STARVING = "starving"
    """Rank 0 starved, the last rank thin (so something decodes), the others cold: a
    no-decode rank beside decoding ones."""
    MIXED = "mixed"
    """Every rank's role drawn from all five."""
    DENSE = "dense"
    """Every rank filled: the aggregate reaches fill_tokens per rank."""
    IDLE = "idle"
    """Nothing waits: ranks decode or are vacant."""


_COLD = (RankRole.THIN, RankRole.DECODING, RankRole.VACANT)
# Thin stretches thrice, sparse twice: where gates hold, and where a release must not wait.
_KINDS = (AlignedKind.THIN, AlignedKind.THIN, AlignedKind.SPARSE, *AlignedKind)
_FIRST = {
    AlignedKind.SPARSE: RankRole.THIN,
    AlignedKind.HOT: RankRole.FILLED,
    AlignedKind.STARVING: RankRole.STARVED,
}
_LAST = {AlignedKind.SPARSE: RankRole.VACANT, AlignedKind.STARVING: RankRole.THIN}


@dataclass(frozen=True, slots=True)
class AlignedSegment:
    """``length`` ticks of one kind; per-rank fields (``MAX_WORLD`` each) place the values."""

    kind: AlignedKind
    length: int
    roles: tuple[RankRole, ...]
    """The drawn roles, as the kind narrows them."""
    levels: tuple[int, ...]
    """Picks a rank's tokens, 0 the boundary: thin fill_tokens-1 - level mod (fill_tokens-1),
    filled fill_tokens + level, starved 1 + level."""
    decodes: tuple[int, ...]
    """A decoding rank runs 1 + decodes sequences."""
    pressure: tuple[bool, ...]
    """KV over its high watermark."""
    partial: tuple[bool, ...]
    """A chunked prefill mid-flight (no rule reads it; a gate might)."""
    advance: int
    """How far the tick number moves per tick (0: a repeated tick)."""

    def role(self, rank: int, world: int) -> RankRole:
        kind, drawn = self.kind, self.roles[rank]
        if kind is AlignedKind.THIN or kind is AlignedKind.DENSE:
            return RankRole.THIN if kind is AlignedKind.THIN else RankRole.FILLED
        if kind is AlignedKind.IDLE:
            return RankRole.VACANT if drawn is RankRole.VACANT else RankRole.DECODING
        if kind is AlignedKind.MIXED:
            return drawn
        if rank == 0:
            return _FIRST[kind]
        if rank == world - 1 and kind in _LAST:
            return _LAST[kind]
        if kind is AlignedKind.SPARSE:
            return RankRole.VACANT if drawn is RankRole.VACANT else RankRole.THIN
        return drawn if drawn in _COLD else RankRole.THIN

    def rank(self, rank: int, world: int, fill_tokens: int) -> RankObservation:
        role, level, d = self.role(rank, world), self.levels[rank], 1 + self.decodes[rank]
        if role is RankRole.THIN:
            w = fill_tokens - 1 - level % (fill_tokens - 1) if fill_tokens > 1 else 1
        elif role is RankRole.FILLED:
            w = fill_tokens + level
        elif role is RankRole.STARVED:
            w, d = 1 + level, 0
        else:
            w, d = 0, (d if role is RankRole.DECODING else 0)
        return RankObservation(w, d, self.pressure[rank], self.partial[rank])

    def reduced(self, config: AlignedGateConfig, world: int) -> ReducedObservation:
        """The SUM of every rank's vector, as the all-reduce gives it."""
        B, T = config.dense_tokens, config.fill_tokens
        vectors = [self.rank(r, world, T).to_vector(B, T) for r in range(world)]
        return ReducedObservation.from_sum([sum(col) for col in zip(*vectors, strict=True)], world)


def dense_thresholds() -> st.SearchStrategy[int]:
    """B: 2-12 first (B = 1 fills every waiting rank: nothing can be held), then any."""
    return st.one_of(st.integers(2, 12), st.integers(1, 4096))


def hold_budgets() -> st.SearchStrategy[int]:
    """K: 2-8 first (K = 1 never holds), then any up to 30, so budgets are spent in short
    runs."""
    return st.one_of(st.integers(2, 8), st.integers(1, 30))


def world_sizes() -> st.SearchStrategy[int]:
    """1 .. MAX_WORLD ranks: one (the single-rank gate's ground), then small worlds first."""
    return st.one_of(st.just(1), st.integers(2, 4), st.integers(5, MAX_WORLD))


_FILLS = [Fraction(1), Fraction(1, 2), Fraction(1, 4), Fraction(3, 4), Fraction(2, 3)]


def _switch(on: bool | None, off_value: object, values: st.SearchStrategy[Any]) -> Any:
    """A valve's setting: ``values`` when forced on, ``off_value`` when forced off, else
    drawn (off more often than on: every valve pre-empts the holds where gates go wrong)."""
    if on is None:
        return st.one_of(st.just(off_value), st.just(off_value), values)
    return values if on else st.just(off_value)


def aligned_configs(
    *,
    enabled: bool | None = None,
    stall: bool | None = None,
    kv: bool | None = None,
    align: bool | None = None,
    pace: bool | None = None,
) -> st.SearchStrategy[AlignedGateConfig]:
    """Valid configs; each keyword forces the gate, the STALL valve, the KV valve, the
    aligned release or the paced mode on (True) or off (False), None draws it (the gate on
    two times in three, each valve and mode one in three); with the paced mode on, the surge
    cap is on one time in two, at ``pace_tokens`` or above."""
    flag = st.sampled_from([True, True, False]) if enabled is None else st.just(enabled)
    configs = st.builds(
        AlignedGateConfig,
        dense_tokens=dense_thresholds(),
        max_hold_passes=hold_budgets(),
        enabled=flag,
        target_fill=st.one_of(
            st.sampled_from(_FILLS), st.fractions(Fraction(1, 100), 1, max_denominator=100)
        ),
        stall_ticks=_switch(stall, 0, st.integers(1, 6)),
        kv_pressure_valve=_switch(kv, False, st.just(True)),
        align_ticks=_switch(align, None, st.one_of(st.just(0), st.integers(1, 5))),
        pace_tokens=_switch(pace, None, st.integers(1, 64)),
    )
    return configs.flatmap(_surged)


def _surged(config: AlignedGateConfig) -> st.SearchStrategy[AlignedGateConfig]:
    """``config`` as drawn, or (paced mode on) with a surge cap of ``pace_tokens`` plus 0-64."""
    pace = config.pace_tokens
    if pace is None:
        return st.just(config)
    surged = st.integers(0, 64).map(lambda k: dataclasses.replace(config, surge_tokens=pace + k))
    return st.one_of(st.just(config), surged)


def one_rank_configs() -> st.SearchStrategy[AlignedGateConfig]:
    """The single-rank gate's configs (T = B, every valve and mode off): D6's class."""
    return st.builds(
        AlignedGateConfig,
        dense_tokens=dense_thresholds(),
        max_hold_passes=hold_budgets(),
        enabled=st.sampled_from([True, True, False]),
    )


def aligned_segments() -> st.SearchStrategy[AlignedSegment]:
    """One stretch of ticks, independent of the config and world it will be expanded for."""

    def per_rank(values: st.SearchStrategy[object]) -> st.SearchStrategy[tuple[object, ...]]:
        return st.tuples(*[values] * MAX_WORLD)

    small_or_any = st.one_of(st.just(0), st.integers(0, 3), st.integers(0, 5000))
    # A KV-pressured rank pre-empts every later rule: most stretches have none.
    none = st.just((False,) * MAX_WORLD)
    rare = st.one_of(none, none, per_rank(st.sampled_from([False, False, False, True])))
    return st.builds(
        AlignedSegment,
        kind=st.sampled_from(_KINDS),
        length=st.one_of(st.integers(1, 3), st.integers(1, MAX_SEGMENT)),
        roles=per_rank(st.sampled_from(list(RankRole))),
        levels=per_rank(small_or_any),
        decodes=per_rank(st.one_of(st.just(0), st.integers(0, 64))),
        pressure=rare,
        partial=rare,
        advance=st.sampled_from([1, 1, 1, 0, 3]),
    )


def _expand(config: AlignedGateConfig, world: int, segs: list[AlignedSegment]) -> AlignedRun:
    ticks: list[Tick] = []
    t = 0
    for seg in segs:
        reduced = seg.reduced(config, world)
        for _ in range(seg.length):
            ticks.append((reduced, t))
            t += seg.advance
    return AlignedRun(config, world, tuple(ticks))


def aligned_runs(
    configs: st.SearchStrategy[AlignedGateConfig] | None = None,
    worlds: st.SearchStrategy[int] | None = None,
    *,
    max_segments: int = 12,
) -> st.SearchStrategy[AlignedRun]:
    """A config, a world size and ticks for them, drawn together so all three shrink."""
    return st.builds(
        _expand,
        aligned_configs() if configs is None else configs,
        world_sizes() if worlds is None else worlds,
        st.lists(aligned_segments(), min_size=1, max_size=max_segments),
    )


_ON = {"enabled": True}
STRATA: tuple[tuple[str, int, Callable[[], st.SearchStrategy[AlignedRun]]], ...] = (
    ("anything", 2, aligned_runs),
    ("gate on, valves and modes off: HOLD and BUDGET", 2,
     lambda: aligned_runs(aligned_configs(**_ON, stall=False, kv=False, align=False,
                                          pace=False))),
    ("one rank, T = B, valves and modes off", 1,
     lambda: aligned_runs(one_rank_configs(), st.just(1))),
    ("STALL valve on", 1, lambda: aligned_runs(aligned_configs(**_ON, stall=True, pace=False))),
    ("aligned release on", 2,
     lambda: aligned_runs(aligned_configs(**_ON, align=True, pace=False))),
    ("KV valve on", 1, lambda: aligned_runs(aligned_configs(**_ON, kv=True))),
    ("paced mode on", 1, lambda: aligned_runs(aligned_configs(**_ON, pace=True))),
    ("gate off", 1, lambda: aligned_runs(aligned_configs(enabled=False))),
)  # fmt: skip
"""The survey's strata (name, share, runs): each valve and mode gets runs of its own, so no
draw of the others can starve it."""


def aligned_strata(max_examples: int) -> list[tuple[st.SearchStrategy[AlignedRun], int]]:
    """``STRATA``'s strategies, each with its share of ``max_examples`` runs (at least one)."""
    total = sum(share for _, share, _ in STRATA)
    return [(make(), max(1, max_examples * share // total)) for _, share, make in STRATA]
