"""When an arrival is due: the clock a rank routes arrivals by.

By default a rank's clock is its tick: an arrival with ``arrival_pass`` p is routed at
the start of tick p, and when every rank is idle the next arrival is brought forward.
A benchmark that prices ticks in seconds passes an ``ArrivalClock`` instead
(``densegate.lab.bench.dp_clock``): then ``arrival_pass`` is in the clock's unit
(microseconds there), an arrival is due once the clock at the tick's start has
passed it, and idle time moves the clock to the next arrival, so a policy that makes
many cheap ticks does not receive its arrivals sooner than one that makes few dear
ones. Every rank's clock must answer alike: the rank loop calls ``now`` exactly once
per tick and ``idle_to`` only when the reduced vector says every rank is idle, on
every rank at once.
"""

from __future__ import annotations

from typing import Protocol

from densegate.impl.dp.config import Phase
from densegate.impl.engine import Engine

__all__ = ["ArrivalClock", "RankClocks"]


class ArrivalClock(Protocol):
    """One rank's clock over one phase."""

    def now(self, tick: int) -> int:
        """The time at the start of ``tick`` (in the trace's arrival unit), once per tick."""
        ...

    def idle_to(self, arrival: int) -> int:
        """Every rank is idle: the clock moves to ``arrival`` (if later); the new time."""
        ...


class RankClocks(Protocol):
    """What a rank is given: an ``ArrivalClock`` for each phase it runs."""

    def phase(self, rank: int, index: int, phase: Phase, engine: Engine) -> ArrivalClock:
        """The clock of phase number ``index`` on ``rank`` (it may wrap ``engine``'s runner)."""
        ...
