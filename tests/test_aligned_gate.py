"""Unit tests of the aligned gate: vector layout, validation, each rule, the valves."""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import numpy as np
import pytest

from densegate.impl.dp_gate import (
    DECODE_SEQS,
    FILLED_RANKS,
    KV_PRESSURE_RANKS,
    NO_DECODE_RANKS,
    PARTIAL_PREFILL_RANKS,
    RANKS,
    VACANT_RANKS,
    VECTOR_SIZE,
    WAITING_RANKS,
    WAITING_TOKENS,
    AlignedGate,
    AlignedGateConfig,
    AlignedState,
    RankObservation,
    ReducedObservation,
)
from densegate.impl.gate import Decision, Reason

# -- the vector -----------------------------------------------------------------------


def test_vector_layout_and_cap() -> None:
    assert VECTOR_SIZE == 9
    slots = [
        RANKS,
        WAITING_RANKS,
        WAITING_TOKENS,
        DECODE_SEQS,
        KV_PRESSURE_RANKS,
        PARTIAL_PREFILL_RANKS,
        FILLED_RANKS,
        NO_DECODE_RANKS,
        VACANT_RANKS,
    ]
    assert slots == list(range(VECTOR_SIZE))
    # capped at dense_tokens; filled once the capped tokens reach fill_tokens
    assert RankObservation(500, 7, True, False).to_vector(100, 100) == [1, 1, 100, 7, 1, 0, 1, 0, 0]
    assert RankObservation(30, 0, False, True).to_vector(100, 30) == [1, 1, 30, 0, 0, 1, 1, 1, 0]
    assert RankObservation(29, 2).to_vector(100, 30) == [1, 1, 29, 2, 0, 0, 0, 0, 0]
    assert RankObservation(0, 3).to_vector(100, 1) == [1, 0, 0, 3, 0, 0, 0, 0, 0]
    assert RankObservation(0, 0).to_vector(100, 1) == [1, 0, 0, 0, 0, 0, 0, 0, 1]  # vacant
    with pytest.raises(ValueError, match="fill_tokens=101 exceeds dense_tokens=100"):
        RankObservation(0, 0).to_vector(100, 101)


def _reduce(gate: AlignedGate, *ranks: RankObservation) -> ReducedObservation:
    total = [sum(col) for col in zip(*(gate.contribution(r) for r in ranks), strict=True)]
    return ReducedObservation.from_sum(total, gate.world_size)


def test_from_sum_reads_the_all_reduced_vector() -> None:
    gate = AlignedGate(AlignedGateConfig(dense_tokens=100), world_size=3)
    reduced = _reduce(
        gate,
        RankObservation(500, 2, kv_pressure=True),
        RankObservation(40, 0, partial_prefill=True),
        RankObservation(0, 5),
    )
    assert reduced == ReducedObservation(3, 2, 140, 7, 1, 1, 1, 1, 0)
    assert reduced.to_vector() == [3, 2, 140, 7, 1, 1, 1, 1, 0]
    # what torch's tensor.tolist() or numpy gives back is accepted as is
    summed = np.array([3, 2, 140, 7, 1, 1, 1, 1, 0], dtype=np.int64)
    assert ReducedObservation.from_sum(summed, 3) == reduced


@pytest.mark.parametrize(
    ("vector", "world", "match"),
    [
        ([1, 0, 0, 0, 0, 0], 1, "9 slots, got 6"),
        ([2, 0, 0, 0, 0, 0, 0, 0, 0], 3, "ranks must equal world_size=3, got 2"),
        ([1, 0, 0, 1.5, 0, 0, 0, 0, 0], 1, r"decode_seqs must be an int, got 1\.5"),
        ([1, True, 1, 0, 0, 0, 0, 0, 0], 1, "waiting_ranks must be an int, got True"),
        ([1, 0, 0, -1, 0, 0, 0, 0, 0], 1, "decode_seqs must be >= 0, got -1"),
        ([2, 3, 9, 0, 0, 0, 0, 0, 0], 2, "waiting_ranks must be <= ranks=2, got 3"),
        ([2, 0, 0, 0, 3, 0, 0, 0, 0], 2, "kv_pressure_ranks must be <= ranks=2, got 3"),
        ([2, 2, 1, 0, 0, 0, 0, 0, 0], 2, "waiting_tokens=1 is inconsistent with waiting_ranks=2"),
        ([2, 0, 5, 0, 0, 0, 0, 0, 0], 2, "waiting_tokens=5 is inconsistent with waiting_ranks=0"),
        ([2, 1, 5, 0, 0, 0, 2, 0, 0], 2, "filled_ranks=2 is inconsistent with waiting_ranks=1"),
        ([2, 1, 5, 0, 0, 0, 0, 2, 0], 2, "no_decode_ranks=2 is inconsistent with waiting_ranks=1"),
        ([2, 1, 5, 0, 0, 0, 0, 1, 2], 2, "vacant_ranks=2 is inconsistent with waiting_ranks=1"),
        ([1, 0, 0, 0, 0, 0, 0, 0, 1], 0, "world_size must be >= 1, got 0"),
    ],
)
def test_bad_reduced_vector_names_slot_and_value(vector: list, world: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ReducedObservation.from_sum(vector, world)


@pytest.mark.parametrize(
    ("args", "field", "value"),
    [
        ((-1, 0), "waiting_tokens", "-1"),
        ((0, -2), "decode_seqs", "-2"),
        (("4", 1), "waiting_tokens", "'4'"),
        ((1, 1, 1), "kv_pressure", "1"),
        ((1, 1, False, None), "partial_prefill", "None"),
    ],
)
def test_bad_rank_observation_names_field(args: tuple, field: str, value: str) -> None:
    with pytest.raises(ValueError, match=rf"RankObservation\.{field}.*{value}"):
        RankObservation(*args)


# -- configuration ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "field", "value"),
    [
        ({"dense_tokens": 0}, "dense_tokens", "0"),
        ({"dense_tokens": True}, "dense_tokens", "True"),
        ({"max_hold_passes": 0}, "max_hold_passes", "0"),
        ({"enabled": 1}, "enabled", "1"),
        ({"target_fill": 0}, "target_fill", "0"),
        ({"target_fill": 1.5}, "target_fill", "1.5"),
        ({"target_fill": -0.25}, "target_fill", "-0.25"),
        ({"target_fill": float("nan")}, "target_fill", "nan"),
        ({"target_fill": True}, "target_fill", "True"),
        ({"target_fill": "1"}, "target_fill", "'1'"),
        ({"stall_ticks": -1}, "stall_ticks", "-1"),
        ({"stall_ticks": 2.0}, "stall_ticks", "2.0"),
        ({"kv_pressure_valve": 1}, "kv_pressure_valve", "1"),
    ],
)
def test_bad_config_names_field_and_value(kwargs: dict, field: str, value: str) -> None:
    kwargs = {"dense_tokens": 8} | kwargs
    with pytest.raises(ValueError, match=rf"AlignedGateConfig\.{field}.*{value}"):
        AlignedGateConfig(**kwargs)


def test_config_defaults_are_the_single_rank_gate() -> None:
    cfg = AlignedGateConfig(8192)
    assert (cfg.max_hold_passes, cfg.enabled, cfg.target_fill) == (30, True, 1.0)
    assert (cfg.stall_ticks, cfg.kv_pressure_valve) == (0, False)
    assert cfg.fill_tokens == 8192
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.dense_tokens = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("fill", "B", "T"),
    [
        (1.0, 10, 10),
        (0.5, 10, 5),
        (0.3, 10, 3),  # 0.3 * 10 is 3.0000000000000004 in floats; the decimal 0.3 is meant
        (0.1, 10, 1),
        (0.55, 10, 6),
        (1e-9, 10, 1),
        (Fraction(5, 6), 6, 5),
        (1, 7, 7),
    ],
)
def test_fill_tokens_is_ceil_of_the_decimal_target(fill: float, B: int, T: int) -> None:
    assert AlignedGateConfig(B, target_fill=fill).fill_tokens == T


def test_gate_construction_errors() -> None:
    with pytest.raises(ValueError, match=r"AlignedGate\.world_size.*0"):
        AlignedGate(AlignedGateConfig(8), 0)
    with pytest.raises(TypeError, match="AlignedGateConfig"):
        AlignedGate({"dense_tokens": 8}, 2)  # type: ignore[arg-type]


def test_decide_rejects_foreign_or_uncapped_vectors_and_keeps_its_state() -> None:
    gate = AlignedGate(AlignedGateConfig(dense_tokens=10, max_hold_passes=5), world_size=2)
    gate.decide(ReducedObservation(2, 1, 3, 4), tick=1)
    before = gate.state
    with pytest.raises(ValueError, match="ranks must equal world_size=2, got 3"):
        gate.decide(ReducedObservation(3, 1, 3, 4), tick=2)
    with pytest.raises(ValueError, match="did not cap"):
        gate.decide(ReducedObservation(2, 1, 11, 4), tick=2)
    with pytest.raises(ValueError, match=r"tick must be >= 0, got -1"):
        gate.decide(ReducedObservation(2, 1, 3, 4), tick=-1)
    with pytest.raises(ValueError, match=r"tick must be an int, got True"):
        gate.decide(ReducedObservation(2, 1, 3, 4), tick=True)
    assert gate.state == before == AlignedState(1, 3, 1)


# -- the rules ---------------------------------------------------------------------------


def _run(gate: AlignedGate, *ticks: tuple[RankObservation, ...], start: int = 0) -> list:
    out = []
    for i, ranks in enumerate(ticks):
        dec = gate.decide(_reduce(gate, *ranks), start + i)
        assert isinstance(dec, Decision) and dec.fire == (dec.reason is not Reason.HOLD)
        out.append((dec.reason, gate.hold_passes))
    return out


R = RankObservation


def test_each_rule_in_order_on_two_ranks() -> None:
    cfg = AlignedGateConfig(dense_tokens=10, max_hold_passes=3, kv_pressure_valve=True)
    gate = AlignedGate(cfg, world_size=2)
    assert _run(
        gate,
        (R(0, 5), R(0, 0)),  # nothing waits anywhere
        (R(4, 0), R(0, 0)),  # nobody decodes: global tail escape
        (R(4, 0), R(0, 1)),  # rank 0 waits with nothing to decode: never held
        (R(4, 1), R(0, 1, kv_pressure=True)),  # KV valve
        (R(10, 1), R(12, 1)),  # every rank has a full batch
        (R(4, 1), R(3, 1)),  # under-full everywhere: held
        (R(9, 1), R(3, 1)),  # still no rank filled
        (R(4, 1), R(3, 1)),  # budget
        (R(10, 1), R(0, 1)),  # rank 0 is filled on its own: not held for rank 1
    ) == [
        (Reason.EMPTY, 0),
        (Reason.NO_DECODE, 0),
        (Reason.NO_DECODE, 0),
        (Reason.KV_PRESSURE, 0),
        (Reason.DENSE, 0),
        (Reason.HOLD, 1),
        (Reason.HOLD, 2),
        (Reason.BUDGET, 0),
        (Reason.DENSE, 0),
    ]
    off = AlignedGate(dataclasses.replace(cfg, enabled=False), world_size=2)
    assert _run(off, (R(0, 5), R(0, 5)), (R(3, 5), R(0, 5))) == [
        (Reason.EMPTY, 0),
        (Reason.DISABLED, 0),
    ]


def test_a_filled_rank_is_not_held_for_cold_ones() -> None:
    """Skewed routing: the hot rank fills a pass of its own while the cold ones only decode
    or have nothing at all; a world-wide fill target would hold it until the budget."""
    gate = AlignedGate(AlignedGateConfig(dense_tokens=10, max_hold_passes=4), world_size=3)
    assert _run(gate, *[(R(50, 3), R(0, 3), R(1, 0))] * 2) == [(Reason.NO_DECODE, 0)] * 2
    assert _run(gate, *[(R(50, 3), R(0, 3), R(0, 0))] * 2) == [(Reason.DENSE, 0)] * 2
    assert _run(gate, (R(9, 3), R(0, 3), R(0, 0))) == [(Reason.HOLD, 1)]  # none filled


def test_paced_mode_keeps_uncapped_releases_for_every_rank_dense() -> None:
    """With the paced mode on, a filled rank or one without decodes fires PACED (capped on
    every rank), not DENSE or NO_DECODE: an uncapped tick needs every rank dense."""
    cfg = AlignedGateConfig(dense_tokens=10, pace_tokens=4)
    gate = AlignedGate(cfg, world_size=2)
    got = [gate.decide(_reduce(gate, *t), i) for i, t in enumerate(
        [(R(50, 3), R(0, 3)), (R(4, 0), R(0, 1)), (R(10, 1), R(10, 1)), (R(4, 0), R(0, 0))]
    )]  # fmt: skip
    assert [(d.reason, d.cap) for d in got] == [
        (Reason.PACED, 4),
        (Reason.PACED, 4),
        (Reason.DENSE, None),
        (Reason.NO_DECODE, None),
    ]


def test_target_fill_is_per_rank() -> None:
    cfg = AlignedGateConfig(dense_tokens=10, max_hold_passes=30, target_fill=0.5)
    gate = AlignedGate(cfg, world_size=3)
    # a rank with 5 = 0.5 * 10 tokens is filled on its own
    assert _run(gate, (R(5, 1), R(0, 1), R(0, 1))) == [(Reason.DENSE, 0)]
    assert _run(gate, (R(4, 1), R(4, 1), R(4, 1))) == [(Reason.HOLD, 1)]
    assert _run(gate, (R(10, 1), R(10, 1), R(0, 1))) == [(Reason.DENSE, 0)]


def test_kv_valve_is_opt_in() -> None:
    obs = (R(4, 2, kv_pressure=True), R(4, 2))
    off = AlignedGate(AlignedGateConfig(dense_tokens=10), world_size=2)
    on = AlignedGate(AlignedGateConfig(dense_tokens=10, kv_pressure_valve=True), world_size=2)
    assert _run(off, obs) == [(Reason.HOLD, 1)]
    assert _run(on, obs) == [(Reason.KV_PRESSURE, 0)]


def test_stall_valve_fires_once_the_fill_stops_growing() -> None:
    cfg = AlignedGateConfig(dense_tokens=100, max_hold_passes=30, stall_ticks=3)
    gate = AlignedGate(cfg, world_size=2)
    growing = [(R(5 + i, 1), R(5, 1)) for i in range(5)]
    assert [r for r, _ in _run(gate, *growing)] == [Reason.HOLD] * 5
    assert gate.state == AlignedState(5, 14, 4)
    flat = (R(9, 1), R(5, 1))
    assert _run(gate, flat, flat, flat, start=5) == [
        (Reason.HOLD, 6),
        (Reason.HOLD, 7),
        (Reason.STALL, 0),  # tick 7: no growth since tick 4
    ]
    # a shrinking fill is no growth either; new growth postpones the valve again
    assert _run(gate, (R(8, 1), R(5, 1)), (R(9, 1), R(5, 1)), start=8) == [
        (Reason.STALL, 0),
        (Reason.HOLD, 1),
    ]
    assert gate.state == AlignedState(1, 14, 9)
    gate.reset()
    assert gate.state == AlignedState(0, 0, 0)


def test_stall_ticks_zero_means_off() -> None:
    gate = AlignedGate(AlignedGateConfig(dense_tokens=100, max_hold_passes=6), world_size=2)
    flat = (R(9, 1), R(5, 1))
    assert [r for r, _ in _run(gate, *[flat] * 6)] == [Reason.HOLD] * 5 + [Reason.BUDGET]


def test_one_budget_whatever_the_rank_count() -> None:
    """Flaw 4: the original's worst case was K + K held passes; here K - 1, then BUDGET."""
    for n in (1, 2, 4, 8):
        gate = AlignedGate(AlignedGateConfig(dense_tokens=100, max_hold_passes=30), n)
        reasons = [r for r, _ in _run(gate, *[tuple(R(1, 1) for _ in range(n))] * 30)]
        assert reasons == [Reason.HOLD] * 29 + [Reason.BUDGET], n


def test_an_idle_stretch_does_not_spend_the_budget() -> None:
    """Flaw 1 at DP level: ticks with nothing waiting anywhere leave the counter at 0."""
    gate = AlignedGate(AlignedGateConfig(dense_tokens=100, max_hold_passes=4), world_size=2)
    _run(gate, *[(R(0, 8), R(0, 8))] * 50)
    assert gate.hold_passes == 0
    assert [r for r, _ in _run(gate, *[(R(5, 8), R(5, 8))] * 4)] == [Reason.HOLD] * 3 + [
        Reason.BUDGET
    ]


def test_decisions_are_shared_and_partial_prefill_does_not_decide() -> None:
    gate = AlignedGate(AlignedGateConfig(dense_tokens=10, max_hold_passes=100), world_size=2)
    a = gate.decide(_reduce(gate, R(3, 5), R(3, 5)), 0)
    b = gate.decide(_reduce(gate, R(3, 5, partial_prefill=True), R(3, 5)), 1)
    assert a is b and a.reason is Reason.HOLD
    assert "world_size=2" in repr(gate)


def test_aligned_release_fires_once_every_rank_waits_and_the_episode_is_old_enough() -> None:
    """align_ticks A: HOLD while some rank is idle; ALIGNED at the first tick with every rank
    waiting and h >= A (under-full, so DENSE would not fire); off (None) keeps holding."""
    on = AlignedGate(AlignedGateConfig(dense_tokens=100, max_hold_passes=10, align_ticks=2), 2)
    off = AlignedGate(AlignedGateConfig(dense_tokens=100, max_hold_passes=10), 2)
    some = ReducedObservation(ranks=2, waiting_ranks=1, waiting_tokens=5, decode_seqs=3)
    both = ReducedObservation(ranks=2, waiting_ranks=2, waiting_tokens=10, decode_seqs=3)
    ticks = [some, both, both, both]
    got = [(d.reason, on.hold_passes) for d in (on.decide(o, t) for t, o in enumerate(ticks))]
    assert got == [(Reason.HOLD, 1), (Reason.HOLD, 2), (Reason.ALIGNED, 0), (Reason.HOLD, 1)]
    assert [off.decide(o, t).reason for t, o in enumerate(ticks)] == [Reason.HOLD] * 4


def test_aligned_release_does_not_wait_for_a_vacant_rank() -> None:
    """A rank with nothing waiting and nothing decoding has no pass to align: ALIGNED fires
    once every other rank waits; a rank only decoding still holds it (it would be mixed)."""
    gate = AlignedGate(AlignedGateConfig(dense_tokens=100, align_ticks=0), 3)
    ticks = [(R(5, 1), R(5, 1), R(0, 0)), (R(5, 1), R(5, 1), R(0, 2))]
    assert _run(gate, *ticks) == [(Reason.ALIGNED, 0), (Reason.HOLD, 1)]


@pytest.mark.parametrize("bad", [-1, True, 1.5])
def test_align_ticks_validated(bad: object) -> None:
    with pytest.raises((TypeError, ValueError), match="align_ticks"):
        AlignedGateConfig(dense_tokens=8, align_ticks=bad)  # type: ignore[arg-type]
