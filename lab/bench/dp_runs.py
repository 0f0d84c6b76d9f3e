"""The bench workloads through N data-parallel ranks in one process, for modeled DP times.

The ranks are the real ``densegate.impl.dp.rank`` loops (null runner) over an
in-process collective, so the coordinated, local-gate and gate-off phases
(``densegate.lab.dp.phases``) decide exactly as ``densegate run --dp N`` does;
each rank's ``timing`` record (``densegate.lab.dp.timing``) then gives the
phase's modeled time (a tick costing the slowest rank's pass plus the
collective). Each rank sees the single-rank workload's load: the trace is N
times the workload's size with arrivals N times as dense.

Two drivers run the ranks, with the same reports. ``greenlet`` (the default
when greenlet is installed, as the ``bench`` extra has it) runs every rank in
a greenlet of ONE thread, in rank order: a rank's collective call switches back
to the driver, which runs the next rank, and once every rank has called it sums
once and resumes them all, deterministically; the ranks share one draw of the
prompts (``densegate.impl.dp.config.shared_prompts``). ``threads`` is the older
one, kept as the reference the tests hold the greenlet one to: a thread per
rank over a ``threading.Barrier``, every rank drawing its own prompts. Both
offer the ranks a ``rendezvous`` (``InProcessGroup``).
"""

from __future__ import annotations

import contextlib
import contextvars
import gc
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn, Protocol

from densegate.impl.dp.collective import Collective, CollectiveError
from densegate.impl.dp.config import COORDINATED, DPConfig, Phase, shared_prompts
from densegate.impl.dp.hooks import RankHooks
from densegate.impl.dp.rank import run_rank
from densegate.impl.dp.report import RankReport
from densegate.impl.engine import Engine, EngineConfig
from densegate.impl.traces.workload import TraceRequest
from densegate.lab.bench.workloads import Workload
from densegate.lab.cost.model import PassModel
from densegate.lab.cost.timeline import TimeFigures, dp_figures
from densegate.lab.dp.phases import BASELINE, LOCAL_GATE, bench_phases
from densegate.lab.dp.timing import TimingHooks

__all__ = [
    "DP_PHASES",
    "DRIVERS",
    "BindableClocks",
    "DPPhaseRun",
    "InProcessCollective",
    "InProcessGroup",
    "default_driver",
    "dp_trace",
    "make_group",
    "run_dp_phases",
    "run_rank_threads",
    "using_driver",
]

DP_PHASES = (COORDINATED, LOCAL_GATE, BASELINE)
"""The phases in table order; the last is the baseline of the ratios."""
DRIVERS = ("greenlet", "threads")
_REDUCE, _MEET = "all_reduce_sum", "rendezvous"
_BROKEN = object()  # the driver's word to a waiting greenlet: the group is broken
_CHOSEN: contextvars.ContextVar[str | None] = contextvars.ContextVar("driver", default=None)


def default_driver() -> str:
    """The driver of ``using_driver``, else ``greenlet`` if it is installed (the ``bench``
    extra has it), else ``threads``."""
    chosen = _CHOSEN.get()
    if chosen is not None:
        return chosen
    try:
        import greenlet  # noqa: F401
    except ImportError:
        return "threads"
    return "greenlet"


@contextlib.contextmanager
def using_driver(driver: str) -> Iterator[None]:
    """Runs in this block (``run_dp_policies``, ``run_dp_phases``...) default to ``driver``."""
    if driver not in DRIVERS:
        raise ValueError(f"unknown in-process driver {driver!r}; choose from {DRIVERS}")
    token = _CHOSEN.set(driver)
    try:
        yield
    finally:
        _CHOSEN.reset(token)


class InProcessGroup:
    """The ranks of one in-process run: what their collectives go through.

    ``rendezvous()``, called from a rank (a hook, a clock), returns once every
    rank of the group has called it: a barrier, nothing exchanged, so what each
    rank wrote to shared state before it, every rank reads after it (e.g. at the
    start of each tick, a modeled clock from every rank's last pass). Every rank
    must make the same sequence of ``all_reduce_sum`` and ``rendezvous`` calls.
    With ``greenlet`` a rendezvous is one switch per rank, and a mismatch (ranks
    in different calls, or some finished) breaks the group at once; with
    ``threads`` it is a ``threading.Barrier`` of its own and a mismatch times out
    after ``timeout_s``. A rank that fails breaks the group: every other rank's
    pending and later calls raise ``CollectiveError``, and ``run_rank_threads``
    raises ``RuntimeError`` from the first failure once every rank has stopped.
    """

    driver = ""

    def __init__(self, world: int, timeout_s: float) -> None:
        if world < 1:
            raise ValueError(f"an in-process group needs a rank, got world {world}")
        self.world = world
        self.timeout_s = timeout_s

    def all_reduce(self, rank: int, vector: Sequence[int]) -> list[int]:
        raise NotImplementedError

    def rendezvous(self) -> None:
        """Wait until every rank of the group has called ``rendezvous``."""
        raise NotImplementedError

    def run(self, bodies: Sequence[Callable[[], object]]) -> list[BaseException]:
        """Run rank ``r``'s body as ``bodies[r]`` until all stop; the failures, first first."""
        raise NotImplementedError


class _ThreadGroup(InProcessGroup):
    """A thread per rank: a barrier for each kind of call, double-buffered slots."""

    driver = "threads"

    def __init__(self, world: int, timeout_s: float) -> None:
        super().__init__(world, timeout_s)
        self.barrier = threading.Barrier(world)
        self.meeting = threading.Barrier(world)
        self.bufs: list[list[list[int]]] = [[[] for _ in range(world)] for _ in range(2)]
        self.calls = [0] * world

    def _wait(self, barrier: threading.Barrier) -> None:
        try:
            barrier.wait(self.timeout_s)
        except threading.BrokenBarrierError:
            raise CollectiveError("in-process barrier broken: a rank failed") from None

    def all_reduce(self, rank: int, vector: Sequence[int]) -> list[int]:
        # Two buffers alternate: nobody writes call k + 2 before everyone has read call k.
        buf = self.bufs[self.calls[rank] % 2]
        buf[rank] = list(vector)
        self._wait(self.barrier)
        self.calls[rank] += 1
        return [sum(col) for col in zip(*buf, strict=True)]

    def rendezvous(self) -> None:
        self._wait(self.meeting)

    def run(self, bodies: Sequence[Callable[[], object]]) -> list[BaseException]:
        errors: list[BaseException] = []

        def body(run: Callable[[], object]) -> None:
            try:
                run()
            except BaseException as e:  # returned, raised by the caller once all stopped
                errors.append(e)
                self.barrier.abort()
                self.meeting.abort()

        threads = [threading.Thread(target=body, args=(b,), daemon=True) for b in bodies]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return errors


class _GreenletGroup(InProcessGroup):
    """Every rank a greenlet of the calling thread; the driver is the hub they switch to.

    A round resumes every waiting rank in rank order; each runs to its next call
    (or its end) and switches back with what it called. When all have called the
    same thing the driver completes it (one sum for all) and starts the next round.
    """

    driver = "greenlet"

    def __init__(self, world: int, timeout_s: float) -> None:
        super().__init__(world, timeout_s)
        self.hub: Any = None
        self.broken: str | None = None

    def _call(self, what: str, vector: Sequence[int] | None) -> Any:
        if self.broken is None:
            if self.hub is None:
                raise RuntimeError(f"{what} outside the greenlet driver's run")
            reply = self.hub.switch((what, vector))
            if reply is not _BROKEN:
                return reply
        raise CollectiveError(f"in-process group broken: {self.broken}")

    def all_reduce(self, rank: int, vector: Sequence[int]) -> list[int]:
        out: list[int] = self._call(_REDUCE, vector)
        return out

    def rendezvous(self) -> None:
        self._call(_MEET, None)

    def run(self, bodies: Sequence[Callable[[], object]]) -> list[BaseException]:
        import greenlet

        self.hub = greenlet.getcurrent()
        lets = [greenlet.greenlet(b) for b in bodies]
        errors: list[BaseException] = []
        replies: dict[int, Any] = dict.fromkeys(range(len(lets)))
        collecting = gc.isenabled()  # paused: collections would walk the ranks' growing
        gc.disable()  # state again and again; what they leave is collected once they stop
        try:
            while replies:
                calls: dict[int, tuple[str, Any]] = {}
                for r, reply in replies.items():
                    if reply is _BROKEN and not lets[r]:
                        continue  # never started: nothing to stop
                    try:
                        got = lets[r].switch() if reply is None else lets[r].switch(reply)
                    except BaseException as e:  # raised by the caller once all stopped
                        errors.append(e)
                        self.broken = self.broken or f"rank {r} failed: {e!r}"
                        continue
                    if not lets[r].dead:
                        calls[r] = got
                replies = self._complete(calls)
        finally:
            self.hub = None
            if collecting:
                gc.enable()
        return errors

    def _complete(self, calls: dict[int, tuple[str, Any]]) -> dict[int, Any]:
        """What each waiting rank is resumed with: the call's result, or ``_BROKEN``."""
        kinds = {what for what, _ in calls.values()}
        if self.broken is None and calls and (len(calls) < self.world or len(kinds) > 1):
            at = [calls[r][0] if r in calls else "finished" for r in range(self.world)]
            self.broken = "the ranks' calls do not match: " + ", ".join(
                f"rank {r} {w}" for r, w in enumerate(at)
            )
        if self.broken is None and kinds == {_REDUCE}:
            vectors = [calls[r][1] for r in range(self.world)]
            if len({len(v) for v in vectors}) == 1:
                total = list(map(sum, zip(*vectors, strict=True)))
                return {r: total.copy() for r in range(self.world)}
            self.broken = f"all_reduce_sum of lengths {[len(v) for v in vectors]}"
        if self.broken is None:
            return dict.fromkeys(calls, True)  # a rendezvous: resumed with a non-None word
        return dict.fromkeys(calls, _BROKEN)


def make_group(world: int, timeout_s: float = 120.0, driver: str | None = None) -> InProcessGroup:
    """An in-process group of ``world`` ranks on ``driver`` (default: ``default_driver()``)."""
    driver = default_driver() if driver is None else driver
    if driver == "greenlet":
        return _GreenletGroup(world, timeout_s)
    if driver == "threads":
        return _ThreadGroup(world, timeout_s)
    raise ValueError(f"unknown in-process driver {driver!r}; choose from {DRIVERS}")


class InProcessCollective:
    """One rank's collective over an in-process group; a healthy group only (a failure is
    an error here). It keeps no stream (nobody survives a dead rank to read it), so the
    rank loop skips building the records (``keeps_stream``)."""

    keeps_stream = False

    def __init__(self, group: InProcessGroup, rank: int) -> None:
        self.group = group
        self.rank = rank

    def all_reduce_sum(self, vector: Sequence[int], *, first: bool = False) -> list[int]:
        return self.group.all_reduce(self.rank, vector)

    def rendezvous(self) -> None:
        """``InProcessGroup.rendezvous``."""
        self.group.rendezvous()

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


class BindableClocks(Protocol):
    """Rank clocks (``densegate.impl.dp.clock.RankClocks``) whose ranks meet through the
    group: ``run_rank_threads`` binds them to its ``rendezvous`` before any rank starts."""

    def bind(self, meet: Callable[[], None]) -> None: ...

    def phase(self, rank: int, index: int, phase: Phase, engine: Engine) -> Any: ...


def run_rank_threads(
    dp: int,
    trace: Sequence[TraceRequest],
    config: DPConfig,
    hooks: RankHooks,
    wrap: Callable[[InProcessCollective], Collective] = lambda c: c,
    *,
    driver: str | None = None,
    group: InProcessGroup | None = None,
    clocks: BindableClocks | None = None,
) -> dict[int, list[RankReport]]:
    """Every phase of ``config`` on ``dp`` ranks over one in-process group; rank -> its
    phase reports, alike on either driver (default ``default_driver()``).

    ``wrap`` may extend each rank's collective (a wrapper without ``keeps_stream``
    gets stream records built; ``PeerCollective`` forwards the inner one's).
    ``group`` (from ``make_group``, of ``dp`` ranks) lets hooks made beforehand hold
    it, to ``rendezvous``; else one
    is made on ``driver`` with ``config.timeout_s``. ``clocks`` go to every rank,
    bound to the group's ``rendezvous``. A failing rank aborts the group and is
    raised, as ``RuntimeError``, once every rank has stopped."""
    if group is None:
        group = make_group(dp, config.timeout_s, driver)
    elif group.world != dp or driver not in (None, group.driver):
        raise ValueError(f"a {group.driver} group of {group.world} ranks for dp {dp} on {driver}")
    results: dict[int, list[RankReport]] = {}
    if clocks is not None:
        clocks.bind(group.rendezvous)

    def body(rank: int) -> Callable[[], object]:
        def run() -> None:
            coll = wrap(InProcessCollective(group, rank))
            results[rank] = run_rank(rank, dp, trace, config, coll, hooks=hooks, clocks=clocks)

        return run

    share = shared_prompts() if group.driver == "greenlet" else contextlib.nullcontext()
    with share:
        errors = group.run([body(r) for r in range(dp)])
    if errors:
        first = errors[0]
        if not isinstance(first, Exception):  # KeyboardInterrupt and the like pass as they are
            raise first
        raise RuntimeError(f"an in-process DP rank failed: {first!r}") from first
    return results


def run_dp_phases(
    trace: Sequence[TraceRequest],
    engine: EngineConfig,
    dp: int,
    model: PassModel,
    seed: int = 0,
    timeout_s: float = 120.0,
) -> dict[str, DPPhaseRun]:
    """Coordinated, local-gate and gate-off phases on ``dp`` in-process ranks; modeled per
    phase."""
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
