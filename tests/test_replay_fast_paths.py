"""The replay's fast paths decide and build exactly what the checked public paths do.

``RuntimeGate`` (``densegate.impl.dp.slots``) is the aligned gate the rank loop runs
without re-checking the vector it built; ``fast_init`` (``densegate.impl.sched.fast_init``)
builds the frozen per-pass records without ``object.__setattr__``. Speed is measured in
benchmarks/dp_replay_speed.py, never here.
"""

from __future__ import annotations

import dataclasses
import pickle
import random

import pytest

from densegate.impl.dp.slots import IDLE, RuntimeGate, prev_slots
from densegate.impl.dp_gate import (
    REASONS,
    AlignedGate,
    AlignedGateConfig,
    RankObservation,
    ReducedObservation,
)
from densegate.impl.engine import Engine, EngineConfig
from densegate.impl.gate import Decision, Reason
from densegate.impl.sched.fast_init import fast_init
from densegate.impl.sched.plan import PassRecord
from densegate.lab.cost.model import PassWork

CONFIGS = [
    AlignedGateConfig(64, max_hold_passes=4),
    AlignedGateConfig(64, max_hold_passes=6, stall_ticks=2, kv_pressure_valve=True),
    AlignedGateConfig(64, max_hold_passes=5, align_ticks=1, target_fill=0.5),
    AlignedGateConfig(64, pace_tokens=16),
]


@pytest.mark.parametrize("config", CONFIGS)
def test_runtime_gate_decides_as_the_checked_gate(config: AlignedGateConfig) -> None:
    rng = random.Random(7)
    world = 3
    checked, fast = AlignedGate(config, world), RuntimeGate(config, world)
    for tick in range(400):
        ranks = [
            RankObservation(rng.choice([0, 0, rng.randrange(1, 200)]), rng.randrange(3),
                            rng.random() < 0.1, rng.random() < 0.2)
            for _ in range(world)
        ]  # fmt: skip
        total = [sum(col) for col in zip(*(checked.contribution(r) for r in ranks), strict=True)]
        want = checked.decide(ReducedObservation.from_sum(total, world), tick)
        assert fast.decide_sum([*total, 9, 9], tick) == want  # runtime slots follow
        assert fast.state == checked.state
    with pytest.raises(ValueError, match="ranks must equal world_size=3, got 2"):
        fast.decide_sum([2, 0, 0, 0, 0, 0], 400)


def test_runtime_gate_vector_is_the_contribution_then_the_runtime_slots() -> None:
    engine = Engine(EngineConfig(max_num_batched_tokens=64, num_blocks=64, block_size=4))
    for n in (30, 50):
        engine.add_request(list(range(1, n + 1)), 4)
    gate = RuntimeGate(AlignedGateConfig(48), 2)
    plan = engine.plan()
    sched = engine.scheduler
    used = sched.config.num_blocks - sched.blocks.num_free
    prev = prev_slots(5, 2, Reason.DENSE)
    vec = gate.vector(plan, sched, 0.0, prev, [3, 4])
    obs = RankObservation(plan.waiting_tokens, plan.decode_seqs, used >= 0.0, bool(plan.partials))
    assert vec == [*gate.contribution(obs), 1, *prev, 3, 4]


def test_prev_slots_are_the_one_hot_of_a_prefilling_pass() -> None:
    assert prev_slots(0, 0, Reason.HOLD) == IDLE == (0, 0, *(0 for _ in REASONS))
    assert prev_slots(0, 3, Reason.HOLD) == (0, 1, *(0 for _ in REASONS))
    for r in REASONS:
        assert prev_slots(7, 3, r) == (1, 0, *(int(q is r) for q in REASONS))


def test_fast_init_builds_the_same_frozen_records() -> None:
    rec = PassRecord(3, True, Reason.DENSE, 10, 1, 2, 0, 4, 2, 100, 10)
    assert rec.failed is False and dataclasses.replace(rec, failed=True).failed
    again = PassRecord(*dataclasses.astuple(rec))
    assert rec == again and hash(rec) == hash(again) == hash(dataclasses.replace(rec))
    assert pickle.loads(pickle.dumps(rec)) == rec
    with pytest.raises(dataclasses.FrozenInstanceError):
        rec.index = 4  # type: ignore[misc]
    assert PassWork(decode_seqs=2, decode_context=9) == PassWork(0, 0, 0, 0, 2, 9)
    assert PassWork().as_list() == [0] * 6
    with pytest.raises(TypeError, match="missing"):
        PassRecord(1)  # type: ignore[call-arg]


def test_fast_init_refuses_what_it_cannot_build_alike() -> None:
    @dataclasses.dataclass(slots=True)
    class Open:
        x: int

    @dataclasses.dataclass(frozen=True, slots=True)
    class Checked:
        x: int

        def __post_init__(self) -> None:
            pass

    @dataclasses.dataclass(frozen=True)
    class NoSlots:
        x: int

    for cls in (Open, Checked, NoSlots, Decision, int):
        with pytest.raises(TypeError, match="fast_init needs"):
            fast_init(cls)
