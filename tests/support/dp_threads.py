"""DP ranks as threads: a ``Collective`` over a barrier and an in-process store.

Threads sum their vectors through a barrier, which is all the rank loop asks
of a collective; aborting the barrier stands in for a dead rank's closed
socket (and for the broken flag peers poll), its timeout for a hung rank.
Membership after a failure goes through ``densegate.impl.dp.membership`` over a
``DictStore``: the very agreement the torch collective runs over TCPStore.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from densegate.impl.dp.collective import CollectiveError, Excluded
from densegate.impl.dp.config import DPConfig
from densegate.impl.dp.hooks import RankHooks, chain
from densegate.impl.dp.membership import (
    DEAD_KEY,
    LEFT_KEY,
    STREAM_KEY,
    Agreement,
    DictStore,
    agree,
)
from densegate.impl.dp.rank import run_rank
from densegate.impl.dp.report import RankReport
from densegate.impl.traces.workload import TraceRequest
from densegate.lab.dp.inject import Fault, FaultHooks


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
    """An in-process group: one barrier and buffer pair per epoch, one shared store.

    ``late_failure`` = ``(rank, call)`` makes that rank's ``call``-th collective
    fail after it completed everywhere, as a rank dying inside a collective can
    leave some survivors with a result and others with an error.
    """

    def __init__(
        self,
        world: int,
        timeout_s: float,
        late_failure: tuple[int, int] | None = None,
        grace_s: float | None = None,
    ) -> None:
        self.world = world
        self.timeout_s = timeout_s
        self.grace_s = timeout_s if grace_s is None else grace_s
        self.late_failure = late_failure
        self.store = DictStore()
        self.lock = threading.Lock()
        self._meets: dict[int, tuple[_Meet, list[list[list[int]]]]] = {}

    def epoch(self, e: int, parties: int) -> tuple[_Meet, list[list[list[int]]]]:
        with self.lock:
            if e not in self._meets:
                self._meets[e] = (_Meet(parties), [[[] for _ in range(parties)] for _ in range(2)])
            return self._meets[e]

    def member(self, rank: int, kind: type[ThreadCollective] | None = None) -> ThreadCollective:
        return (kind or ThreadCollective)(self, rank)

    def mark_dead(self, rank: int, epoch: int) -> None:
        """What the launcher does when a rank exits: mark it, and its socket closes."""
        self.store.set(DEAD_KEY.format(rank), "17")
        self.epoch(epoch, 1)[0].abort()


class ThreadCollective:
    """A ``PhasedCollective``: streams per phase, the phase told when recovering, and a
    left mark; a phase's first call waits like any other (there is no model to build)."""

    def __init__(self, group: ThreadGroup, rank: int) -> None:
        self.group = group
        self.rank = rank
        self.calls = 0  # completed, over every epoch
        self.epoch = 0
        self.in_epoch = 0  # calls in this epoch: picks the buffer
        self.members = list(range(group.world))
        self.phase = 0

    def begin_phase(self, index: int) -> None:
        self.phase = index

    def leave(self, calls: int, total: Sequence[int] | None) -> None:
        self.group.store.set(LEFT_KEY.format(self.rank), json.dumps([calls, list(total or [])]))

    def all_reduce_sum(self, vector: Sequence[int], *, first: bool = False) -> list[int]:
        g = self.group
        meet, bufs = g.epoch(self.epoch, len(self.members))
        # Two buffers alternate: nobody can write call k + 2 before all have read call k.
        buf = bufs[self.in_epoch % 2]
        buf[self.members.index(self.rank)] = list(vector)
        try:
            meet.wait(g.timeout_s)
        except _Broken:
            raise CollectiveError("barrier broken: a rank is gone") from None
        total = [sum(col) for col in zip(*buf, strict=True)]
        self.in_epoch += 1
        if g.late_failure == (self.rank, self.calls):
            g.late_failure = None  # once
            raise CollectiveError("late failure (injected)")
        self.calls += 1
        return total

    def publish(self, record: bytes) -> None:
        self.group.store.append(STREAM_KEY.format(self.phase, self.rank), record)

    def recover(self, calls: int, total: Sequence[int] | None) -> Agreement:
        g = self.group
        g.epoch(self.epoch, len(self.members))[0].abort()  # peers stop waiting at once
        agreed = agree(
            g.store, self.epoch, self.rank, self.members, calls, total, g.grace_s, self.phase
        )
        if self.rank not in agreed.members:
            raise Excluded(f"rank {self.rank} was agreed gone")
        self.epoch, self.members, self.in_epoch = agreed.epoch, agreed.members, 0
        return agreed


@dataclass
class GroupRun:
    reports: dict[int, list[RankReport]]
    excluded: list[int] = field(default_factory=list)
    store: DictStore = field(default_factory=DictStore)


def run_group(
    world: int,
    trace: Sequence[TraceRequest],
    config: DPConfig,
    timeout_s: float = 10.0,
    late_failure: tuple[int, int] | None = None,
    grace_s: float | None = None,
    member: type[ThreadCollective] | None = None,
    faults: Sequence[Fault] = (),
    hooks: RankHooks | None = None,
) -> GroupRun:
    """``world`` rank threads over ``trace``; ``faults`` injected as the lab injects them
    (``FaultHooks``, a crashed thread marked dead as the launcher marks a process), then
    ``hooks``."""
    group = ThreadGroup(world, timeout_s, late_failure, grace_s)
    run = GroupRun({}, store=group.store)
    errors: list[BaseException] = []

    def body(rank: int) -> None:
        collective = group.member(rank, member)

        def crash(mode: str) -> None:
            if mode == "exit":
                group.mark_dead(rank, collective.epoch)
            raise _Crash

        try:
            mine: RankHooks = FaultHooks(tuple(faults), on_crash=crash)
            if hooks is not None:
                mine = chain(mine, hooks)

            # Each phase's reports as it ends, as rank_main writes them: a rank that dies
            # later has still reported the phases it finished.
            def report(so_far: list[RankReport]) -> None:
                run.reports[rank] = so_far

            run_rank(rank, world, trace, config, collective, hooks=mine, on_phase=report)
        except _Crash:
            pass
        except Excluded:
            run.excluded.append(rank)
        except BaseException as e:
            errors.append(e)
            group.epoch(collective.epoch, 1)[0].abort()

    threads = [threading.Thread(target=body, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
        assert not t.is_alive(), "a rank thread hung"
    if errors:
        raise errors[0]
    return run
