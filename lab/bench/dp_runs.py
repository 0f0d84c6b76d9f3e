"""The bench workloads through N data-parallel ranks in one process, for modeled DP times.

The ranks are the real ``densegate.impl.dp.rank`` loops (one thread each, null
runner) over an in-process collective, so the coordinated, local-gate and
gate-off phases (``densegate.lab.dp.phases``) decide exactly as ``densegate run
--dp N`` does; each rank's ``timing`` record (``densegate.lab.dp.timing``)
then gives the phase's modeled time (a tick costing the slowest rank's pass
plus the collective). Each rank sees the single-rank workload's load: the
trace is N times the workload's size with arrivals N times as dense.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

from densegate.impl.dp.collective import Collective, CollectiveError
from densegate.impl.dp.config import COORDINATED, DPConfig
from densegate.impl.dp.hooks import RankHooks
from densegate.impl.dp.rank import run_rank
from densegate.impl.dp.report import RankReport
from densegate.impl.engine import EngineConfig
from densegate.impl.traces.workload import TraceRequest
from densegate.lab.bench.workloads import Workload
from densegate.lab.cost.model import PassModel
from densegate.lab.cost.timeline import TimeFigures, dp_figures
from densegate.lab.dp.phases import BASELINE, LOCAL_GATE, bench_phases
from densegate.lab.dp.timing import TimingHooks

__all__ = [
    "DP_PHASES",
    "DPPhaseRun",
    "InProcessCollective",
    "dp_trace",
    "run_dp_phases",
    "run_rank_threads",
]

DP_PHASES = (COORDINATED, LOCAL_GATE, BASELINE)
"""The phases in table order; the last is the baseline of the ratios."""


class _Group:
    """What the ranks of one in-process run share: a barrier and double-buffered slots."""

    def __init__(self, world: int, timeout_s: float) -> None:
        self.world = world
        self.timeout_s = timeout_s
        self.barrier = threading.Barrier(world)
        self.bufs: list[list[list[int]]] = [[[] for _ in range(world)] for _ in range(2)]


class InProcessCollective:
    """Sums vectors across threads; a healthy group only (a failure is an error here)."""

    def __init__(self, group: _Group, rank: int) -> None:
        self.group = group
        self.rank = rank
        self.calls = 0

    def all_reduce_sum(self, vector: Sequence[int], *, first: bool = False) -> list[int]:
        g = self.group
        # Two buffers alternate: nobody writes call k + 2 before everyone has read call k.
        buf = g.bufs[self.calls % 2]
        buf[self.rank] = list(vector)
        try:
            g.barrier.wait(g.timeout_s)
        except threading.BrokenBarrierError:
            raise CollectiveError("in-process barrier broken: a rank failed") from None
        self.calls += 1
        return [sum(col) for col in zip(*buf, strict=True)]

    def publish(self, record: bytes) -> None:
        """Nothing to keep: no rank of an in-process bench dies."""

    def recover(self, calls: int, total: Sequence[int] | None) -> NoReturn:
        raise RuntimeError("an in-process bench group does not recover from a failed rank")

    def survivors(self, routed: int) -> NoReturn:
        raise RuntimeError("an in-process bench group does not recover from a failed rank")


def dp_trace(workload: Workload, seed: int, dp: int, requests: int | None) -> list[TraceRequest]:
    """``dp`` times the workload's requests, arrivals ``dp`` times as dense."""
    n = (workload.requests if requests is None else requests) * dp
    return [
        TraceRequest(r.arrival_pass // dp, r.prompt_len, r.output_len)
        for r in workload.make(n, seed)
    ]


@dataclass
class DPPhaseRun:
    """One phase over every rank: the reports and the modeled time."""

    phase: str
    reports: list[RankReport]
    modeled: TimeFigures
    alignment: dict[str, Any] = field(default_factory=dict)

    @property
    def finished(self) -> int:
        return sum(len(r.finished) for r in self.reports)


def run_rank_threads(
    dp: int,
    trace: Sequence[TraceRequest],
    config: DPConfig,
    hooks: RankHooks,
    wrap: Callable[[InProcessCollective], Collective] = lambda c: c,
) -> dict[int, list[RankReport]]:
    """Every phase of ``config`` on ``dp`` rank threads over one in-process group
    (``wrap`` may extend each rank's collective); rank -> its phase reports. A failing
    rank aborts the group and is raised once every thread has stopped."""
    group = _Group(dp, config.timeout_s)
    results: dict[int, list[RankReport]] = {}
    errors: list[BaseException] = []

    def rank_thread(rank: int) -> None:
        try:
            coll = wrap(InProcessCollective(group, rank))
            results[rank] = run_rank(rank, dp, trace, config, coll, hooks=hooks)
        except BaseException as e:  # surfaced below, after every thread stopped
            errors.append(e)
            group.barrier.abort()

    threads = [threading.Thread(target=rank_thread, args=(r,), daemon=True) for r in range(dp)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(f"an in-process DP rank failed: {errors[0]!r}") from errors[0]
    return results


def run_dp_phases(
    trace: Sequence[TraceRequest],
    engine: EngineConfig,
    dp: int,
    model: PassModel,
    seed: int = 0,
    timeout_s: float = 120.0,
) -> dict[str, DPPhaseRun]:
    """Coordinated, local-gate and gate-off phases on ``dp`` threads; modeled per phase."""
    if dp < 2:
        raise ValueError(f"dp must be >= 2, got {dp}")
    config = DPConfig(engine, seed=seed, timeout_s=timeout_s, phases=bench_phases(engine))
    results = run_rank_threads(dp, trace, config, TimingHooks())
    out: dict[str, DPPhaseRun] = {}
    for name in DP_PHASES:
        reps = [next(x for x in results[r] if x.phase == name) for r in range(dp)]
        out[name] = DPPhaseRun(
            name, reps, dp_figures([x.timing for x in reps], model), reps[0].alignment
        )
    return out
