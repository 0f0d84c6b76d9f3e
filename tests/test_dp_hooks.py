"""The rank loop's hooks and the lab's phases: what the runtime hands the lab, and when.

The runtime runs the phases it is given and calls its hooks at fixed points
(``densegate.impl.dp.hooks``); the lab's fault injection, timing and benchmark
phases (``densegate.lab.dp``) are built on those alone.
"""

from __future__ import annotations

import pickle
import threading
from collections.abc import Sequence
from typing import Any

import pytest

from densegate.impl.dp.collective import Collective
from densegate.impl.dp.config import DPConfig, Phase
from densegate.impl.dp.hooks import PhaseHooks, chain
from densegate.impl.dp.report import RankReport
from densegate.impl.dp_gate import vector_size
from densegate.impl.engine import Engine
from densegate.lab.dp.inject import Fault, FaultHooks, Injector
from densegate.lab.dp.phases import BASELINE, LOCAL_GATE, bench_phases
from densegate.lab.dp.timing import TimingHooks
from tests.support.dp_small import ENGINE, small_trace
from tests.support.dp_threads import run_group


class _PhaseLog:
    def __init__(self, log: dict[str, Any]) -> None:
        self.log = log

    def at_tick(self, tick: int) -> None:
        self.log["ticks"].append(tick)

    def before_collective(self, collective: Collective, vector: Sequence[int]) -> None:
        self.log["vectors"].append(len(vector))

    def finish(self, report: RankReport) -> None:
        self.log["finished"] = report.phase
        report.timing = {"logged_ticks": len(self.log["ticks"])}


class Recorder:
    """Logs every hook call, per (rank, phase index)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.logs: dict[tuple[int, int], dict[str, Any]] = {}

    def phase(self, rank: int, index: int, phase: Phase, engine: Engine) -> PhaseHooks:
        log: dict[str, Any] = {"name": phase.name, "ticks": [], "vectors": []}
        with self.lock:
            self.logs[rank, index] = log
        return _PhaseLog(log)


def test_hooks_see_every_phase_tick_and_collective_and_may_add_to_the_report() -> None:
    rec = Recorder()
    phases = bench_phases(ENGINE)
    run = run_group(2, small_trace(20, seed=2), DPConfig(ENGINE, phases=phases), hooks=rec)
    assert sorted(rec.logs) == [(r, k) for r in range(2) for k in range(3)]
    for (rank, k), log in rec.logs.items():
        rep = run.reports[rank][k]
        assert log["name"] == rep.phase == phases[k].name == log["finished"]
        # one at_tick per tick run, and one for the last tick, where nobody had work
        assert log["ticks"] == list(range(rep.ticks + 1))
        assert len(log["vectors"]) >= rep.ticks + 1
        assert set(log["vectors"]) == {vector_size(2)}
        assert rep.timing == {"logged_ticks": rep.ticks + 1}


def test_without_hooks_nothing_is_timed_and_the_timing_hook_times_every_phase() -> None:
    trace = small_trace(12, seed=1)
    config = DPConfig(ENGINE, phases=bench_phases(ENGINE))
    bare = run_group(2, trace, config).reports
    assert all(rep.timing == {} for reps in bare.values() for rep in reps)
    timed = run_group(2, trace, config, hooks=TimingHooks()).reports
    for r, reps in timed.items():
        assert [rep.phase for rep in reps] == [p.name for p in config.phases]
        for rep, plain in zip(reps, bare[r], strict=True):
            assert rep.timing["output_tokens"] == rep.figures["output_tokens"] > 0
            assert rep.decisions == plain.decisions  # timing changes no decision


def test_the_default_run_is_one_coordinated_phase_on_the_engine() -> None:
    config = DPConfig(ENGINE)
    (only,) = config.run_phases
    assert (only.name, only.coordination, only.engine) == ("coordinated", "aligned", ENGINE)
    run = run_group(2, small_trace(10, seed=3), config)
    assert [[rep.phase for rep in reps] for reps in run.reports.values()] == [["coordinated"]] * 2


def test_bench_phases_baselines_and_rounds() -> None:
    (only,) = bench_phases(ENGINE, baselines=False)
    assert only.name == "coordinated" and only.engine == ENGINE
    untimed = bench_phases(ENGINE)
    assert [p.name for p in untimed] == ["coordinated", BASELINE, LOCAL_GATE]
    assert [p.engine.runner for p in untimed[1:]] == ["null", "null"]
    assert [p.engine.gate_enabled for p in untimed] == [True, False, True]
    timed = bench_phases(ENGINE, timed_rounds=2)
    names = ["coordinated", BASELINE, LOCAL_GATE]
    assert [p.name for p in timed] == names + [f"{n}@2" for n in reversed(names)]
    assert {p.engine.runner for p in timed} == {ENGINE.runner}
    with pytest.raises(ValueError, match=r"bench_phases\.timed_rounds must be >= 0, got -1"):
        bench_phases(ENGINE, timed_rounds=-1)


def test_faults_fire_only_on_their_rank_in_their_phase() -> None:
    faults = (Fault(1, 3), Fault(1, 5, "slow", 0.1), Fault(2, 4), Fault(1, 0, phase=2))
    hooks = FaultHooks(faults)
    engine = Engine(ENGINE)
    phase = DPConfig(ENGINE).run_phases[0]

    def picked(rank: int, index: int) -> list[Fault]:
        h = hooks.phase(rank, index, phase, engine)
        assert isinstance(h, Injector)
        return h.faults

    assert picked(1, 0) == [Fault(1, 3), Fault(1, 5, "slow", 0.1)]
    assert picked(0, 0) == [] and picked(1, 1) == []
    assert picked(1, 2) == [Fault(1, 0, phase=2)] and picked(2, 2) == []
    with pytest.raises(TypeError, match=r"FaultHooks\.faults\[0\]"):
        FaultHooks(((1, 3),))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"Fault\.phase must be >= 0, got -1"):
        Fault(0, 1, phase=-1)


def test_a_fault_injected_through_the_hooks_ends_the_rank() -> None:
    """The chained fault and timing hooks together: rank 1 dies at tick 6 and the
    survivors still carry timing records."""
    trace = small_trace(20, seed=4)
    run = run_group(3, trace, DPConfig(ENGINE), faults=[Fault(1, 6)], hooks=TimingHooks())
    assert sorted(run.reports) == [0, 2]
    for (rep,) in run.reports.values():
        assert rep.faults[0]["tick"] == 6 and rep.faults[0]["dead_ranks"] == [1]
        assert rep.timing["output_tokens"] == rep.figures["output_tokens"]


def test_hooks_pickle_for_spawned_ranks() -> None:
    """What ``launch`` does to them (test_dp_processes launches with fault hooks)."""
    hooks = chain(TimingHooks(), FaultHooks((Fault(1, 2, "collective", 0.001),)))
    assert pickle.loads(pickle.dumps(hooks)) == hooks


def test_on_device_moves_every_phase() -> None:
    config = DPConfig(ENGINE, phases=bench_phases(ENGINE))
    moved = config.on_device("cuda:1")
    assert {p.engine.device for p in moved.run_phases} | {moved.engine.device} == {"cuda:1"}
    assert [p.name for p in moved.phases] == [p.name for p in config.phases]
