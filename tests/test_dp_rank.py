"""The DP rank loop with N ranks as threads: agreement, accounting, failure fallback.

Threads sum their vectors through a barrier, which is all the loop asks of a
``Collective``; aborting the barrier stands in for a dead rank's closed socket,
its timeout for a hung rank. The real gloo processes are in test_dp_processes.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from densegate.cli.dp import merge_reports
from densegate.impl.dp.rank import (
    LOADS,
    PREV_REASONS,
    AlignmentStats,
    CollectiveError,
    DPConfig,
    RankReport,
    run_rank,
    vector_size,
)
from densegate.impl.dp.router import ROUTERS
from densegate.impl.engine import Engine, EngineConfig
from densegate.impl.gate import Reason
from densegate.impl.traces.replay import run_trace, summarize
from densegate.impl.traces.workload import TraceRequest, synthetic_trace
from tests.dp_small import ENGINE, small_trace


class _Crash(BaseException):
    """Ends a crashed rank's thread (BaseException: the loop must not catch it)."""


class _Broken(Exception):
    pass


class _Meet:
    """A reusable barrier whose completed rounds stay completed even if it breaks right
    after (``threading.Barrier.abort`` can fail threads not yet woken from a done round)."""

    def __init__(self, parties: int) -> None:
        self.parties = parties
        self.cond = threading.Condition()
        self.count = 0
        self.round = 0
        self.broken = False

    def wait(self, timeout: float) -> None:
        with self.cond:
            mine = self.round
            if self.broken:
                raise _Broken
            self.count += 1
            if self.count == self.parties:
                self.count = 0
                self.round += 1
                self.cond.notify_all()
                return
            self.cond.wait_for(lambda: self.round != mine or self.broken, timeout)
            if self.round != mine:
                return
            self.broken = True
            self.cond.notify_all()
            raise _Broken

    def abort(self) -> None:
        with self.cond:
            self.broken = True
            self.cond.notify_all()


class ThreadGroup:
    """An in-process ``Collective`` group: N threads meeting at a barrier.

    ``late_failure`` = ``(rank, call)`` makes that rank's ``call``-th collective
    fail after it completed everywhere, as a rank dying inside a collective can
    leave some survivors with a result and others with an error.
    """

    def __init__(
        self, world: int, timeout_s: float, late_failure: tuple[int, int] | None = None
    ) -> None:
        self.world = world
        self.timeout_s = timeout_s
        self.late_failure = late_failure
        self.barrier = _Meet(world)
        self.bufs: list[list[list[int]]] = [[[] for _ in range(world)] for _ in range(2)]
        self.dead: set[int] = set()
        self.routed: dict[int, int] = {}
        self.lock = threading.Lock()

    def member(self, rank: int) -> ThreadCollective:
        return ThreadCollective(self, rank)


class ThreadCollective:
    def __init__(self, group: ThreadGroup, rank: int) -> None:
        self.group = group
        self.rank = rank
        self.calls = 0

    def all_reduce_sum(self, vector: Sequence[int], *, first: bool = False) -> list[int]:
        g = self.group
        # Two buffers alternate: nobody can write call k + 2 before all have read call k.
        buf = g.bufs[self.calls % 2]
        buf[self.rank] = list(vector)
        try:
            g.barrier.wait(g.timeout_s)
        except _Broken:
            raise CollectiveError("barrier broken: a rank is gone") from None
        total = [sum(col) for col in zip(*buf, strict=True)]
        if g.late_failure == (self.rank, self.calls):
            raise CollectiveError("late failure (injected)")
        self.calls += 1
        return total

    def survivors(self, routed: int) -> dict[int, int]:
        g = self.group
        with g.lock:
            g.routed[self.rank] = routed
        deadline = time.monotonic() + g.timeout_s
        while time.monotonic() < deadline:
            with g.lock:
                pending = [r for r in range(g.world) if r not in g.dead and r not in g.routed]
            if not pending:
                break
            time.sleep(0.002)
        with g.lock:
            return {r: n for r, n in g.routed.items() if r not in g.dead}


def run_group(
    world: int,
    trace: Sequence[TraceRequest],
    config: DPConfig,
    timeout_s: float = 10.0,
    late_failure: tuple[int, int] | None = None,
) -> dict[int, list[RankReport]]:
    group = ThreadGroup(world, timeout_s, late_failure)
    results: dict[int, list[RankReport]] = {}
    errors: list[BaseException] = []

    def body(rank: int) -> None:
        def crash(mode: str) -> None:
            with group.lock:
                group.dead.add(rank)
            if mode == "exit":
                group.barrier.abort()  # like a closed socket: peers fail at once
            raise _Crash

        try:
            results[rank] = run_rank(rank, world, trace, config, group.member(rank), on_crash=crash)
        except _Crash:
            pass
        except BaseException as e:
            errors.append(e)
            group.barrier.abort()

    threads = [threading.Thread(target=body, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
        assert not t.is_alive(), "a rank thread hung"
    if errors:
        raise errors[0]
    return results


def phase(results: dict[int, list[RankReport]], name: str) -> dict[int, RankReport]:
    return {r: rep for r, reps in results.items() for rep in reps if rep.phase == name}


def check_healthy(results: dict[int, list[RankReport]], world: int, n: int) -> None:
    assert sorted(results) == list(range(world))
    for name in ("coordinated", "uncoordinated_gate_off", "uncoordinated_local_gate"):
        reps = phase(results, name)
        assert len(reps) == world
        first = reps[0]
        for rep in reps.values():
            assert rep.failure is None
            assert rep.unfinished == []
            assert rep.assignment == first.assignment
            assert rep.alignment == first.alignment
            if name == "coordinated":
                assert rep.decisions == first.decisions  # D1, at run time
            assert sorted(rep.finished, key=int) == sorted(rep.assigned, key=int)
        done = [rid for rep in reps.values() for rid in rep.finished]
        assert sorted(done, key=int) == [str(i) for i in range(n)]  # each exactly once
    # Under one decision a DENSE tick has every rank waiting, and NO_DECODE / EMPTY
    # leave nobody only decoding, so only the valves (or the gate being off) can make
    # a coordinated tick mixed.
    mixed = phase(results, "coordinated")[0].alignment["mixed_by_reason"]
    assert set(mixed) <= {"BUDGET", "STALL", "KV_PRESSURE", "DISABLED"}


@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("router", ROUTERS)
def test_every_rank_logs_the_same_decisions_and_every_request_finishes_once(
    world: int, router: str
) -> None:
    trace = small_trace(40, seed=world)
    results = run_group(world, trace, DPConfig(ENGINE, router=router))
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
    )
    trace = small_trace(n, seed, rate)
    check_healthy(run_group(world, trace, config), world, n)


def test_one_rank_is_the_single_rank_engine() -> None:
    """With one rank and the defaults the aligned gate is PrefillGate (D6), and the loop
    replays arrivals as run_trace does, so the pass logs must match pass for pass."""
    trace = small_trace(60, seed=7)
    config = DPConfig(ENGINE, baselines=False)
    (rep,) = run_group(1, trace, config)[0]
    engine = Engine(ENGINE)
    stats = run_trace(engine, trace, seed=config.seed)
    ref = [(p.index, p.fire, p.reason.name) for p in engine.scheduler.pass_log]
    assert rep.decisions == ref
    full = summarize(engine, stats, 0.0)
    for key in ("passes", "prefill_passes", "decode_only_passes", "ttft_passes", "output_tokens"):
        assert rep.figures[key] == full[key], key


def test_a_dead_rank_is_reported_and_the_survivors_finish_their_requests() -> None:
    trace = small_trace(40, seed=3, rate=0.5)  # arrivals keep coming after the crash
    config = DPConfig(ENGINE, crash=(1, 12))
    results = run_group(3, trace, config)
    assert sorted(results) == [0, 2]
    reps = phase(results, "coordinated")
    assert all(len(results[r]) == 1 for r in results)  # no baselines after a failure
    lost = reps[0].failure["lost_requests"] if reps[0].failure else None
    for rep in reps.values():
        f = rep.failure
        assert f is not None
        assert f["tick"] == 12
        assert f["dead_ranks"] == [1] and f["survivors"] == [0, 2]
        assert f["lost_requests"] == lost
        assert rep.unfinished == []
        assert sorted(rep.finished, key=int) == sorted(rep.assigned, key=int)
        assert rep.local_decisions, "finished alone with the local gate"
        assert rep.decisions == reps[0].decisions  # agreed up to the failure
        assert [t for t, _, _ in rep.decisions] == list(range(12))
        # routed after the failure: only to survivors
        late = [rid for rid, r in rep.assignment.items() if int(rid) > int(max(lost, key=int))]
        assert all(rep.assignment[rid] != 1 for rid in late)
    assert lost == sorted((rid for rid, r in reps[0].assignment.items() if r == 1), key=int)
    assert lost
    summary = merge_reports(3, {r: [x.as_dict() for x in v] for r, v in results.items()}, 40, 0.0)
    assert summary["unaccounted"] == []
    assert summary["finished"] + summary["lost"] == 40
    assert summary["failure"]["dead_ranks"] == [1]


def test_survivors_that_disagree_on_the_failure_tick_still_place_every_request_once() -> None:
    """Rank 2 loses the group one tick before rank 0 does; arrivals rank 0 routed in
    that extra tick are routed again by both, so none is served twice or dropped."""
    n = 60
    trace = small_trace(n, seed=11, rate=2.0)
    config = DPConfig(ENGINE, crash=(1, 13), baselines=False)
    results = run_group(3, trace, config, late_failure=(2, 12))
    reps = phase(results, "coordinated")
    f0, f2 = reps[0].failure, reps[2].failure
    assert f0 is not None and f2 is not None
    assert (f0["tick"], f2["tick"]) == (13, 12)
    assert f0["rerouted_from"] == f2["rerouted_from"] < n
    assert f0["withdrawn"] and not f2["withdrawn"]  # rank 0 gave back what rank 2 now serves
    assert f0["lost_requests"] == f2["lost_requests"]
    assert reps[0].decisions[:12] == reps[2].decisions
    assert reps[0].assignment == reps[2].assignment
    done = [rid for rep in reps.values() for rid in rep.finished]
    assert len(done) == len(set(done))
    summary = merge_reports(3, {r: [x.as_dict() for x in v] for r, v in results.items()}, n, 0.0)
    assert summary["unaccounted"] == []
    assert summary["finished"] + summary["lost"] == n


def test_a_hung_rank_is_noticed_at_the_timeout() -> None:
    trace = small_trace(20, seed=5)
    config = DPConfig(ENGINE, crash=(1, 4), crash_mode="hang")
    results = run_group(2, trace, config, timeout_s=0.3)
    (rep,) = results[0]
    assert rep.failure is not None
    assert 0.25 <= rep.failure["detected_after_s"] < 5
    assert rep.failure["dead_ranks"] == [1]
    assert rep.unfinished == []


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
    results = run_group(2, trace, DPConfig(ENGINE, baselines=False))
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
    with pytest.raises(ValueError):
        DPConfig(ENGINE, crash_mode="explode")
    with pytest.raises(ValueError):
        run_rank(2, 2, [], DPConfig(ENGINE), ThreadGroup(2, 1.0).member(0))


def test_least_loaded_balances_prompt_tokens_across_ranks() -> None:
    engine = EngineConfig(max_num_seqs=128, num_blocks=4096)
    trace = synthetic_trace(200, 0)
    config = DPConfig(engine, router="least-loaded", baselines=False)
    reps = phase(run_group(4, trace, config), "coordinated")
    prompts = [rep.figures["prompt_tokens"] for rep in reps.values()]
    assert max(prompts) < 1.1 * min(prompts)
    assert reps[0].alignment["mixed_ticks"] == 0
