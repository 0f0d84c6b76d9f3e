"""The in-process DP replay's drivers (lab/bench/dp_runs.py): greenlet and threads alike.

Same reports on both, the group's rendezvous, a failing rank aborting the group,
the prompts drawn once for every rank, and no stream records for a collective
that keeps none. Speed is measured in benchmarks/dp_replay_speed.py, never here.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

import pytest

from densegate.impl.dp.collective import Collective, CollectiveError
from densegate.impl.dp.config import DPConfig, Phase, make_prompts, shared_prompts
from densegate.impl.dp.hooks import PhaseHooks, chain
from densegate.impl.dp.report import RankReport
from densegate.impl.engine import Engine
from densegate.impl.traces.replay import run_trace
from densegate.lab.bench.dp_runs import (
    DRIVERS,
    InProcessCollective,
    dp_trace,
    make_group,
    run_dp_phases,
    run_rank_threads,
    using_driver,
)
from densegate.lab.bench.workloads import WORKLOADS
from densegate.lab.cost import LinearPassModel
from densegate.lab.cost.model import FEATURES
from densegate.lab.dp.phases import bench_phases
from densegate.lab.dp.timing import TimingHooks
from tests.support.dp_small import ENGINE, small_trace

pytest.importorskip("greenlet")

MODEL = LinearPassModel(
    {k: [1.0] + [0.01] * (len(FEATURES) - 1) for k in ("prefill", "mixed", "decode_eager")},
    collective_ms=0.2,
)
_CLOCK = ("wall_s", "collective_ms_per_tick")


def decided(reports: dict[int, list[RankReport]]) -> str:
    """Every report without its clock readings, as JSON."""
    out = []
    for rank in sorted(reports):
        for rep in reports[rank]:
            d = rep.as_dict()
            for k in _CLOCK:
                d.pop(k)
            d["figures"].pop("runner_ms_per_pass")
            d["timing"] = {k: d["timing"][k] for k in ("output_tokens", "work", "requests")}
            out.append(d)
    return json.dumps(out, sort_keys=True, default=str)


@pytest.mark.parametrize("world", [2, 3])
def test_greenlet_and_threads_give_identical_reports(world: int) -> None:
    trace = small_trace(30, seed=world)
    config = DPConfig(ENGINE, phases=bench_phases(ENGINE))
    got = {
        d: decided(run_rank_threads(world, trace, config, TimingHooks(), driver=d)) for d in DRIVERS
    }
    assert got["greenlet"] == got["threads"]
    assert json.loads(got["greenlet"])[0]["decisions"]  # the phases did decide


def test_modeled_phases_identical_on_both_drivers() -> None:
    trace = dp_trace(WORKLOADS["chat"], 0, 3, 4)
    figures = {}
    for d in DRIVERS:
        with using_driver(d):
            runs = run_dp_phases(trace, ENGINE, 3, MODEL)
        figures[d] = {n: dataclasses.astuple(r.modeled) for n, r in runs.items()}
    assert figures["greenlet"] == figures["threads"]


class _Meet:
    """At every tick's start each rank posts its tick, meets the others, then checks
    that every rank posted the same tick (and meets again before anyone posts anew)."""

    def __init__(self, group: Any, world: int) -> None:
        self.group = group
        self.posted = [-1] * world
        self.met = 0

    def phase(self, rank: int, index: int, phase: Phase, engine: Engine) -> PhaseHooks:
        meet = self

        class Hooks:
            def at_tick(self, tick: int) -> None:
                meet.posted[rank] = tick
                meet.group.rendezvous()
                assert meet.posted == [tick] * len(meet.posted)
                meet.met += rank == 0
                meet.group.rendezvous()

            def before_collective(self, collective: Collective, vector: Sequence[int]) -> None:
                pass

            def finish(self, report: RankReport) -> None:
                pass

        return Hooks()


@pytest.mark.parametrize("driver", DRIVERS)
def test_rendezvous_from_a_rank_hook_at_every_tick(driver: str) -> None:
    trace = small_trace(20, seed=4)
    config = DPConfig(ENGINE, phases=bench_phases(ENGINE))
    plain = decided(run_rank_threads(3, trace, config, TimingHooks(), driver=driver))
    group = make_group(3, 10.0, driver)
    meet = _Meet(group, 3)
    met = run_rank_threads(3, trace, config, chain(TimingHooks(), meet), group=group)
    assert decided(met) == plain  # meeting changes no decision
    assert meet.met == sum(rep.ticks + 1 for rep in met[0])  # + the tick that finds no work


@pytest.mark.parametrize("driver", DRIVERS)
def test_rendezvous_alone(driver: str) -> None:
    group = make_group(4, 10.0, driver)
    seen: dict[int, list[int]] = {}
    wrote: list[int] = []

    def body(rank: int) -> Any:
        def run() -> None:
            for _ in range(3):
                wrote.append(rank)
                group.rendezvous()
                seen.setdefault(rank, []).append(len(wrote))
                group.rendezvous()
            assert InProcessCollective(group, rank).all_reduce_sum([rank, 1]) == [6, 4]

        return run

    assert group.run([body(r) for r in range(4)]) == []
    assert seen == {r: [4, 8, 12] for r in range(4)}


class _FailAt:
    def __init__(self, rank: int, tick: int) -> None:
        self.rank = rank
        self.tick = tick

    def phase(self, rank: int, index: int, phase: Phase, engine: Engine) -> PhaseHooks:
        fail = self

        class Hooks:
            def at_tick(self, tick: int) -> None:
                if rank == fail.rank and tick == fail.tick:
                    raise ValueError(f"boom on rank {rank}")

            def before_collective(self, collective: Collective, vector: Sequence[int]) -> None:
                pass

            def finish(self, report: RankReport) -> None:
                pass

        return Hooks()


@pytest.mark.parametrize("driver", DRIVERS)
@pytest.mark.parametrize("tick", [0, 5])
def test_a_failing_rank_aborts_the_group_with_its_error(driver: str, tick: int) -> None:
    config = DPConfig(ENGINE, timeout_s=30.0, phases=bench_phases(ENGINE))
    with pytest.raises(RuntimeError, match=r"an in-process DP rank failed: .*boom on rank 1"):
        run_rank_threads(3, small_trace(20, seed=1), config, _FailAt(1, tick), driver=driver)


def test_greenlet_mismatched_calls_break_the_group_at_once() -> None:
    group = make_group(3, 1000.0, "greenlet")

    def body(rank: int) -> Any:
        def run() -> None:
            if rank == 2:
                return  # finished while the others reduce
            if rank == 1:
                group.rendezvous()
            else:
                group.all_reduce(rank, [1])

        return run

    errors = group.run([body(r) for r in range(3)])
    assert [type(e) for e in errors] == [CollectiveError, CollectiveError]
    assert "rank 0 all_reduce_sum, rank 1 rendezvous, rank 2 finished" in str(errors[0])


def test_threads_mismatched_calls_time_out() -> None:
    group = make_group(2, 0.2, "threads")
    bodies = [group.rendezvous, lambda: group.all_reduce(1, [1])]
    errors = group.run(bodies)
    assert len(errors) == 2 and all(isinstance(e, CollectiveError) for e in errors)


def test_shared_prompts_draw_once_and_match_run_trace() -> None:
    trace = small_trace(12, seed=9)
    vocab = 32000
    alone = make_prompts(trace, 3, vocab)
    assert make_prompts(trace, 3, vocab) is not alone
    with shared_prompts():
        first = make_prompts(trace, 3, vocab)
        second = make_prompts(trace, 3, vocab)
        with shared_prompts():  # nested: the same draw
            third = make_prompts(trace, 3, vocab)
        other_seed = make_prompts(trace, 4, vocab)
    assert first == alone and second == alone and third == alone
    assert all(a is b is c for a, b, c in zip(first, second, third, strict=True))
    assert other_seed != alone
    after = make_prompts(trace, 3, vocab)
    assert after == alone and after[0] is not first[0]  # the scope dropped its draws
    engine = Engine(ENGINE)
    run_trace(engine, trace, seed=3)
    assert [engine.request(str(i)).prompt_token_ids for i in range(len(trace))] == alone


class _Recording:
    """A wrapper that counts what the rank publishes."""

    def __init__(self, inner: InProcessCollective) -> None:
        self.inner = inner
        self.published = 0

    def all_reduce_sum(self, vector: Sequence[int], *, first: bool = False) -> list[int]:
        return self.inner.all_reduce_sum(vector, first=first)

    def publish(self, record: bytes) -> None:
        self.published += 1

    def recover(self, calls: int, total: Sequence[int] | None) -> Any:
        return self.inner.recover(calls, total)


class _Dropping(_Recording):
    keeps_stream = False


@pytest.mark.parametrize("wrapper", [_Recording, _Dropping])
def test_records_only_for_a_collective_that_keeps_the_stream(wrapper: type[_Recording]) -> None:
    made: list[_Recording] = []

    def wrap(inner: InProcessCollective) -> Collective:
        made.append(wrapper(inner))
        return made[-1]

    config = DPConfig(ENGINE)
    run_rank_threads(2, small_trace(10, seed=2), config, TimingHooks(), wrap)
    published = sum(c.published for c in made)
    # records are built unless the collective the rank holds says nobody reads them
    assert (published > 0) == (wrapper is _Recording)
