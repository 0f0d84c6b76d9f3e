"""AlignedGate agrees with the dp spec on every tick; one rank is exactly PrefillGate;
N ranks that each compute their own vector and share one all-reduce never diverge."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import run_state_machine_as_test

from densegate.impl.dp_gate import (
    AlignedGate,
    AlignedGateConfig,
    RankObservation,
    ReducedObservation,
)
from densegate.impl.gate import GateConfig, GateInput, PrefillGate, Reason
from tests.support.dp_lockstep import AlignedLockstep

MIN_TICKS = 4_000


def test_aligned_gate_agrees_with_spec_every_tick() -> None:
    AlignedLockstep.ticks = 0
    run_state_machine_as_test(AlignedLockstep, settings=settings(stateful_step_count=30))
    print(f"{AlignedLockstep.ticks} lockstep ticks")
    assert AlignedLockstep.ticks >= MIN_TICKS, AlignedLockstep.ticks


_passes = st.lists(
    st.tuples(
        st.one_of(st.just(0), st.integers(1, 40), st.integers(0, 5000)),
        st.one_of(st.just(0), st.integers(1, 64)),
        st.booleans(),
        st.booleans(),
    ),
    min_size=1,
    max_size=120,
)


@given(
    B=st.one_of(st.integers(1, 12), st.integers(13, 4096)),
    K=st.one_of(st.integers(1, 8), st.integers(9, 40)),
    enabled=st.sampled_from([True, True, True, False]),
    passes=_passes,
    first_tick=st.integers(0, 10**6),
)
def test_one_rank_is_exactly_prefill_gate(
    B: int, K: int, enabled: bool, passes: list[tuple[int, int, bool, bool]], first_tick: int
) -> None:
    """world_size 1, target_fill 1.0, stall and KV valves off: same decision, reason, counter.

    The KV and chunk bits vary too: with the valves off they must not matter.
    """
    single = PrefillGate(GateConfig(B, K, enabled))
    aligned = AlignedGate(AlignedGateConfig(B, K, enabled), world_size=1)
    assert aligned.config.fill_tokens == B
    for i, (w, d, kv, partial) in enumerate(passes):
        want = single.decide(GateInput(w, d))
        vec = aligned.contribution(RankObservation(w, d, kv, partial))
        got = aligned.decide(ReducedObservation.from_sum(vec, 1), first_tick + i)
        assert got == want, (i, w, d)
        assert aligned.hold_passes == single.hold_passes


def _simulate(N: int, config: AlignedGateConfig, ticks: int, seed: int) -> list[list[Reason]]:
    """N ranks with their own queues; each builds its vector, one simulated all_reduce."""
    rng = random.Random(seed)
    B = config.dense_tokens
    gates = [AlignedGate(config, N) for _ in range(N)]
    queues = [[] for _ in range(N)]  # waiting prompt lengths per rank
    decoding = [rng.randint(0, 6) for _ in range(N)]
    log: list[list[Reason]] = []
    held = 0
    for tick in range(ticks):
        for r in range(N):
            if rng.random() < 0.3:
                queues[r].append(rng.randint(1, B))
            decoding[r] = max(0, decoding[r] + rng.choice([-1, 0, 0, 1]))
        obs = [
            RankObservation(sum(q), decoding[r], kv_pressure=rng.random() < 0.05)
            for r, q in enumerate(queues)
        ]
        vectors = [g.contribution(o) for g, o in zip(gates, obs, strict=True)]
        total = [sum(col) for col in zip(*vectors, strict=True)]
        decisions = [g.decide(ReducedObservation.from_sum(total, N), tick) for g in gates]
        assert len(set(decisions)) == 1, (tick, decisions)
        assert len({g.state for g in gates}) == 1, tick
        log.append([d.reason for d in decisions])
        if decisions[0].fire:
            held = 0
            for r in range(N):  # every rank admits what it can, up to B tokens
                budget, keep = B, []
                for n in queues[r]:
                    if n <= budget:
                        budget -= n
                        decoding[r] += 1
                    else:
                        keep.append(n)
                queues[r] = keep
        else:
            held += 1
            assert held < config.max_hold_passes, tick  # one budget, whatever N
    return log


@given(
    N=st.integers(1, 8),
    B=st.integers(1, 64),
    K=st.integers(1, 12),
    fill=st.sampled_from([1.0, 0.75, 0.5]),
    S=st.sampled_from([0, 0, 2, 5]),
    kv=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
@settings(max_examples=40)
def test_n_ranks_never_diverge(
    N: int, B: int, K: int, fill: float, S: int, kv: bool, seed: int
) -> None:
    log = _simulate(N, AlignedGateConfig(B, K, True, fill, S, kv), ticks=150, seed=seed)
    assert len(log) == 150
