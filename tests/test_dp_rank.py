"""The DP rank loop with N ranks as threads (tests/support/dp_threads.py): agreement, accounting.

Faults and re-admission are in test_dp_faults; real gloo processes in
test_dp_processes and test_dp_fault_injection.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from densegate.impl.dp.config import DPConfig, Phase
from densegate.impl.dp.rank import run_rank
from densegate.impl.dp.report import AlignmentStats, RankReport
from densegate.impl.dp.router import ROUTERS
from densegate.impl.dp.summary import merge_reports
from densegate.impl.dp_gate import LOADS, PREV_REASONS, vector_size
from densegate.impl.engine import Engine, EngineConfig
from densegate.impl.gate import Reason
from densegate.impl.traces.replay import run_trace, summarize
from densegate.impl.traces.workload import synthetic_trace
from densegate.lab.dp.inject import Fault
from densegate.lab.dp.phases import bench_phases
from tests.support.dp_small import ENGINE, MIXED_REASONS, small_trace
from tests.support.dp_threads import ThreadGroup, run_group


def phase(results: dict[int, list[RankReport]], name: str) -> dict[int, RankReport]:
    return {r: rep for r, reps in results.items() for rep in reps if rep.phase == name}


def check_healthy(results: dict[int, list[RankReport]], world: int, n: int) -> None:
    assert sorted(results) == list(range(world))
    for name in ("coordinated", "uncoordinated_gate_off", "uncoordinated_local_gate"):
        reps = phase(results, name)
        assert len(reps) == world
        first = reps[0]
        for rep in reps.values():
            assert rep.faults == [] and rep.kv_blocks == [ENGINE.num_blocks] * 2
            assert rep.unfinished == []
            assert rep.assignment == first.assignment
            assert rep.alignment == first.alignment
            if name == "coordinated":
                assert rep.decisions == first.decisions  # D1, at run time
            assert sorted(rep.finished, key=int) == sorted(rep.assigned, key=int)
        done = [rid for rep in reps.values() for rid in rep.finished]
        assert sorted(done, key=int) == [str(i) for i in range(n)]  # each exactly once
    # Only MIXED_REASONS can make a coordinated tick mixed (see there why).
    mixed = phase(results, "coordinated")[0].alignment["mixed_by_reason"]
    assert set(mixed) <= MIXED_REASONS


@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("router", ROUTERS)
def test_every_rank_logs_the_same_decisions_and_every_request_finishes_once(
    world: int, router: str
) -> None:
    trace = small_trace(40, seed=world)
    config = DPConfig(ENGINE, router=router, phases=bench_phases(ENGINE))
    results = run_group(world, trace, config).reports
    check_healthy(results, world, len(trace))


@given(
    world=st.integers(1, 4),
    seed=st.integers(0, 2**16),
    n=st.integers(0, 30),
    rate=st.sampled_from([0.3, 1.0, 4.0]),
    router=st.sampled_from(ROUTERS),
    target_fill=st.sampled_from([1.0, 0.5, 0.25]),
    stall=st.integers(0, 4),
    kv_valve=st.booleans(),
    hold=st.integers(1, 8),
    gate=st.booleans(),
)
@settings(max_examples=25)
def test_random_runs_never_diverge(
    world: int,
    seed: int,
    n: int,
    rate: float,
    router: str,
    target_fill: float,
    stall: int,
    kv_valve: bool,
    hold: int,
    gate: bool,
) -> None:
    engine = dataclasses.replace(ENGINE, max_hold_passes=hold, gate_enabled=gate)
    config = DPConfig(
        engine,
        router=router,
        target_fill=target_fill,
        stall_ticks=stall,
        kv_pressure_valve=kv_valve,
        kv_high_watermark=0.5,
        phases=bench_phases(engine),
    )
    trace = small_trace(n, seed, rate)
    check_healthy(run_group(world, trace, config).reports, world, n)


def test_one_rank_is_the_single_rank_engine() -> None:
    """With one rank and the defaults the aligned gate is PrefillGate (D6), and the loop
    replays arrivals as run_trace does, so the pass logs must match pass for pass."""
    trace = small_trace(60, seed=7)
    config = DPConfig(ENGINE)
    (rep,) = run_group(1, trace, config).reports[0]
    engine = Engine(ENGINE)
    stats = run_trace(engine, trace, seed=config.seed)
    ref = [(p.index, p.fire, p.reason.name) for p in engine.scheduler.pass_log]
    assert rep.decisions == ref
    full = summarize(engine, stats, 0.0)
    for key in ("passes", "prefill_passes", "decode_only_passes", "ttft_passes", "output_tokens"):
        assert rep.figures[key] == full[key], key


def test_alignment_stats_count_mixed_ticks_and_their_reasons() -> None:
    a = AlignmentStats()
    reasons = [0] * len(Reason)
    budget = list(Reason).index(Reason.BUDGET)
    a.observe(3, 0, 3, reasons)  # decode only
    a.observe(3, 3, 0, reasons)  # every rank prefilled
    a.observe(3, 2, 0, reasons)  # two prefilled, one idle: together
    mixed = reasons.copy()
    mixed[budget] = 1
    a.observe(3, 1, 2, mixed)  # one prefilled under BUDGET while two only decoded
    assert a.ticks == 4
    assert a.prefill_ticks == 3
    assert a.all_ranks_prefill_ticks == 1
    assert a.aligned_prefill_ticks == 2
    assert a.mixed_ticks == 1
    assert a.stalled_rank_ticks == 2
    assert a.as_dict()["mixed_by_reason"] == {"BUDGET": 1}


def test_vector_layout() -> None:
    assert PREV_REASONS + len(Reason) == LOADS
    assert vector_size(4) == LOADS + 4


def test_merge_reports_flags_a_request_nobody_accounts_for() -> None:
    trace = small_trace(10, seed=1)
    results = run_group(2, trace, DPConfig(ENGINE)).reports
    dicts = {r: [x.as_dict() for x in v] for r, v in results.items()}
    victim = dicts[0][0]["finished"].pop()
    summary = merge_reports(2, dicts, 10, 0.0)
    assert summary["unaccounted"] == [victim]
    assert summary["decisions_agree"]


def test_config_rejects_bad_values() -> None:
    with pytest.raises(ValueError):
        DPConfig(ENGINE, router="random")
    with pytest.raises(ValueError):
        DPConfig(ENGINE, timeout_s=0)
    with pytest.raises(ValueError):
        DPConfig(ENGINE, target_fill=1.5)
    with pytest.raises(ValueError, match=r"DPConfig\.kv_high_watermark"):
        DPConfig(ENGINE, kv_high_watermark=0)
    with pytest.raises(ValueError, match=r"DPConfig\.grace_s"):
        DPConfig(ENGINE, grace_s=-1.0)
    with pytest.raises(ValueError, match=r"Fault\.mode"):
        Fault(0, 1, "explode")
    with pytest.raises(ValueError, match=r"Fault\.tick"):
        Fault(0, -1)
    with pytest.raises(ValueError, match=r"Phase\.coordination"):
        Phase("coordinated", "global", ENGINE)
    with pytest.raises(ValueError, match=r"DPConfig\.phases\[0\] must be the aligned"):
        DPConfig(ENGINE, phases=(Phase("coordinated", "local", ENGINE),))
    with pytest.raises(ValueError, match=r"two phases named 'coordinated'"):
        DPConfig(ENGINE, phases=bench_phases(ENGINE, baselines=False) * 2)
    with pytest.raises(TypeError, match=r"DPConfig\.phases\[1\]"):
        DPConfig(ENGINE, phases=(*bench_phases(ENGINE, baselines=False), "local"))  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        run_rank(2, 2, [], DPConfig(ENGINE), ThreadGroup(2, 1.0).member(0))


def test_least_loaded_balances_prompt_tokens_across_ranks() -> None:
    engine = EngineConfig(max_num_seqs=128, num_blocks=4096)
    trace = synthetic_trace(200, 0)
    config = DPConfig(engine, router="least-loaded")
    reps = phase(run_group(4, trace, config).reports, "coordinated")
    prompts = [rep.figures["prompt_tokens"] for rep in reps.values()]
    requests = [rep.figures["requests"] for rep in reps.values()]
    # The router balances the backlog it reads each tick, not the run's total: a filled
    # rank, or one with nothing to decode, is released on its own, so backlogs drain at
    # different ticks and the totals spread (measured: 14276-26327 prompt tokens, 49-51
    # requests; under the world-wide fill target, since replaced, 20185-21178).
    assert max(requests) - min(requests) <= 2
    assert max(prompts) < 2 * min(prompts)
    assert set(reps[0].alignment["mixed_by_reason"]) <= {"DENSE", "NO_DECODE"}
