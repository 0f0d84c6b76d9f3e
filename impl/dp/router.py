"""Request routing across data-parallel ranks, computed identically on every rank.

There is no router process: every rank holds the same trace and runs the same
``Router`` over the same inputs, so every rank knows the whole assignment
without exchanging it. Round-robin needs nothing but the arrival order.
Least-loaded needs each rank's load, which rides in the tick's all-reduce
(one slot per rank, see ``densegate.impl.dp.rank``); arrivals of tick ``t``
are routed with the loads reduced at tick ``t - 1``, and each routed request
adds 1 to its rank's load at once, so a burst spreads out.

Load is the tokens a rank still has to compute (prompts waiting or part-way
through prefill, one per decoding sequence), and routing a request adds its
prompt length: prompt lengths are what a real router knows (output lengths are
not), and prefill backlog is what makes one rank hold up the others. Counting
requests instead let one rank collect the long prompts and wait, a batch short,
for the others (TTFT p50 104 vs 16 passes across four ranks, ``--gen 200``). Ties go to the
first tied rank at or after a cursor that advances with every routed request,
so equal loads rotate instead of piling onto rank 0.

After a rank dies the survivors cannot exchange loads any more; they route
the arrivals still unrouted round-robin over the survivors by arrival index
(``fallback_route``), which each survivor can compute alone.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["ROUTERS", "Router", "fallback_route"]

ROUTERS = ("round-robin", "least-loaded")
"""Router kinds accepted by ``Router`` and ``--router``."""


class Router:
    """Deterministic request-to-rank assignment; equal inputs give equal outputs on every rank."""

    __slots__ = ("_cursor", "_kind", "_loads", "_world")

    def __init__(self, kind: str, world_size: int) -> None:
        if kind not in ROUTERS:
            raise ValueError(f"Router kind must be one of {ROUTERS}, got {kind!r}")
        if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
            raise ValueError(f"Router world_size must be an int >= 1, got {world_size!r}")
        self._kind = kind
        self._world = world_size
        self._cursor = 0
        self._loads = [0] * world_size

    @property
    def kind(self) -> str:
        return self._kind

    @property
    def loads(self) -> list[int]:
        """Loads as the router currently sees them (reduced loads + requests routed since)."""
        return list(self._loads)

    def observe(self, loads: Sequence[int]) -> None:
        """Take the loads of every rank from the latest all-reduce."""
        if len(loads) != self._world:
            raise ValueError(f"Router.observe needs {self._world} loads, got {len(loads)}")
        self._loads = list(map(int, loads))

    def route(self, cost: int = 1) -> int:
        """The rank for the next arrival; least-loaded adds ``cost`` (its prompt
        tokens) to that rank's load at once."""
        n = self._world
        start = self._cursor % n
        self._cursor += 1
        if self._kind == "round-robin":
            return start
        loads = self._loads
        best = start
        for k in range(1, n):
            r = (start + k) % n
            if loads[r] < loads[best]:
                best = r
        loads[best] += cost
        return best


def fallback_route(index: int, survivors: Sequence[int]) -> int:
    """Rank of arrival ``index`` once the group is broken: round-robin over ``survivors``."""
    if not survivors:
        raise ValueError("fallback_route needs at least one surviving rank")
    ranks = sorted(survivors)
    return ranks[index % len(ranks)]
