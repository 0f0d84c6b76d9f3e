"""The DP bench's seconds clock: a tick costs the slowest rank's modeled pass plus the
collective, arrivals are due in modeled seconds, and idle time jumps to the next one.

On the tick clock an arrival at tick p waits from the end of tick p - 1 and idle
time is skipped, so a policy that makes many cheap ticks receives its arrivals sooner
in modeled time; here every policy sees the same arrivals at the same modeled
seconds. ``ModeledClocks`` is the ranks' ``densegate.impl.dp.clock.RankClocks``: each
rank prices its own pass by the model (its runner wrapped, as ``RankTiming`` does),
and at the start of every tick the ranks meet (the in-process group's
``rendezvous``), so every rank reads the same end of the last tick. Trace arrivals
are in microseconds (``arrival_pass`` holds them: the clock's unit). ``figures``
gives the phase's TTFT and ITL in ms from arrival seconds and tokens per second.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from densegate.impl.dp.config import Phase
from densegate.impl.engine import Engine
from densegate.impl.sched.batch import Runner, ScheduledBatch
from densegate.lab.cost.model import PassModel, PassWork
from densegate.lab.cost.timeline import TimeFigures

__all__ = ["US", "ModeledClocks", "PhaseClock"]

_START = operator.attrgetter("start")
US = 1_000_000
"""Clock units per second: arrivals and tick ends are integer microseconds."""


@dataclass
class PhaseClock:
    """One phase's shared clock: per tick its start and end (us) and each rank's pass cost."""

    collective_us: int
    starts: dict[int, int] = field(default_factory=dict)
    ends: dict[int, int] = field(default_factory=dict)
    costs: dict[int, dict[int, int]] = field(default_factory=dict)
    floors: dict[int, int] = field(default_factory=dict)
    """Per tick the slowest rank's decode-only pass of the same decodes (us): ITL's floor."""
    prefill_ticks: set[int] = field(default_factory=set)
    """Ticks in which some rank prefilled."""

    def end_of(self, tick: int) -> int:
        """Tick ``tick``'s end: its start plus its slowest rank's pass plus the collective
        (computed once, after every rank has posted its cost)."""
        end = self.ends.get(tick)
        if end is None:
            slowest = max(self.costs.pop(tick, {}).values(), default=0)
            end = self.ends[tick] = self.starts[tick] + slowest + self.collective_us
        return end


class _PricedRunner:
    """Prices every pass it runs by the model; attributes pass through.

    ``decode_us`` (shared by every rank and phase of a run) holds the price of each
    decode-only work met so far, by (decode_seqs, decode_context): a model is a function
    of the work, and most passes repeat one another's."""

    def __init__(
        self,
        inner: Runner,
        model: PassModel,
        clock: PhaseClock,
        rank: int,
        decode_us: dict[tuple[int, int], int] | None = None,
    ) -> None:
        self.inner = inner
        self.model = model
        self.clock = clock
        self.rank = rank
        self.decode_us = {} if decode_us is None else decode_us

    def execute(self, batch: ScheduledBatch) -> Sequence[int]:
        clock, index, decodes = self.clock, batch.index, batch.decodes
        # PassWork.from_batch's decode_context: the sum of (start + 1) over the decodes.
        key = (len(decodes), sum(map(_START, decodes)) + len(decodes))
        floor = self.decode_us.get(key)
        if floor is None:
            alone = PassWork(decode_seqs=key[0], decode_context=key[1])
            floor = self.decode_us[key] = round(1e3 * self.model.pass_ms(alone))
        cost = floor  # a decode-only pass is its own floor
        if batch.prefills:
            cost = round(1e3 * self.model.pass_ms(PassWork.from_batch(batch)))
            clock.prefill_ticks.add(index)
        costs = clock.costs.get(index)
        if costs is None:
            costs = clock.costs[index] = {}
        costs[self.rank] = cost
        floors = clock.floors
        floors[index] = max(floors.get(index, 0), floor)
        return self.inner.execute(batch)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class _RankClock:
    """One rank's ``ArrivalClock``: the shared clock, read after every rank has met."""

    def __init__(self, shared: PhaseClock, meet: Callable[[], None]) -> None:
        self.shared = shared
        self.meet = meet
        self.time = 0

    def now(self, tick: int) -> int:
        self.meet()  # every rank ran tick - 1 and posted its cost
        if tick > 0:
            self.time = max(self.time, self.shared.end_of(tick - 1))
        self.shared.starts.setdefault(tick, self.time)
        self.tick = tick
        return self.time

    def idle_to(self, arrival: int) -> int:
        self.time = max(self.time, arrival)
        self.shared.starts[self.tick] = self.time  # every rank writes the same value
        return self.time


class ModeledClocks:
    """The seconds clock of every phase of an in-process DP run (``RankClocks``).

    ``meet`` is the group's rendezvous (every rank calls it, none returns before all
    have); it is bound by the driver before the ranks start (``bind``)."""

    def __init__(self, model: PassModel) -> None:
        self.model = model
        self.phases: dict[int, PhaseClock] = {}
        self.names: dict[int, str] = {}
        self.decode_us: dict[tuple[int, int], int] = {}
        self._meet: Callable[[], None] | None = None

    def bind(self, meet: Callable[[], None]) -> None:
        self._meet = meet

    def phase(self, rank: int, index: int, phase: Phase, engine: Engine) -> _RankClock:
        if self._meet is None:
            raise RuntimeError("ModeledClocks.bind(rendezvous) before the ranks start")
        shared = self.phases.setdefault(index, PhaseClock(round(1e3 * self.model.collective_ms)))
        self.names[index] = phase.name
        engine.runner = _PricedRunner(engine.runner, self.model, shared, rank, self.decode_us)
        return _RankClock(shared, self._meet)

    def by_name(self, name: str) -> PhaseClock:
        return self.phases[next(i for i, n in self.names.items() if n == name)]


def figures(
    clock: PhaseClock, ranks: Sequence[Mapping[str, Any]], arrival_us: Mapping[str, int]
) -> TimeFigures:
    """The phase on the seconds clock from its ranks' ``rank_timing`` records: TTFT from
    each request's arrival to the end of its first token's tick, ITL between its
    tokens' tick ends, tokens per second over the time to the last tick's end."""
    ends = {t: clock.end_of(t) for t in sorted(clock.starts)}
    ttft: list[float] = []
    itl: list[float] = []
    out = 0
    for r in ranks:
        for rid, (_, passes) in zip(r["request_ids"], r["requests"], strict=True):
            out += len(passes)
            if not passes:
                continue
            at = [ends[p] for p in passes]
            ttft.append((at[0] - arrival_us[rid]) / 1e3)
            itl.extend((b - a) / 1e3 for a, b in itertools.pairwise(at))
    last = max(ends.values(), default=0)
    ticks = [(ends[t] - clock.starts[t]) / 1e3 for t in sorted(ends)]
    return TimeFigures(out, last / US, ttft, itl, ticks)


def floors(
    clock: PhaseClock,
    ranks: Sequence[Mapping[str, Any]],
    prompt_len: Mapping[str, int],
    model: PassModel,
) -> dict[str, list[float]]:
    """The physical floors on the same work, in ms: per inter-token gap the decode-only
    pass of the tick's decodes plus the collective (ITL); per request its prefill alone
    in one pass plus the collective (TTFT); and the share of inter-token gaps that end
    in a tick where some rank prefilled (ITL p99 sits at a mixed pass's cost once that
    share passes 1%)."""
    coll = model.collective_ms
    itl: list[float] = []
    ttft: list[float] = []
    stretched = 0
    for r in ranks:
        for rid, (_, passes) in zip(r["request_ids"], r["requests"], strict=True):
            itl.extend(clock.floors.get(b, 0) / 1e3 + coll for b in passes[1:])
            stretched += sum(b in clock.prefill_ticks for b in passes[1:])
            if passes:
                n = prompt_len[rid]
                ttft.append(model.pass_ms(PassWork(n, 1, n * (n + 1) // 2, n)) + coll)
    return {"itl_ms": itl, "ttft_ms": ttft, "gaps_in_prefill_ticks": [stretched / max(len(itl), 1)]}
