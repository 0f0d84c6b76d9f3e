"""Where a rank lets an observer in: fixed points of its loop, for the lab to use.

The lab injects faults and times passes through these (``densegate.lab.dp``);
the rank loop calls them and never imports who implements them, so an engine
embedding ``densegate.impl.dp`` runs with ``NO_HOOKS`` and loads nothing of the
lab. Hooks reach spawned rank processes pickled: an instance of a top-level
class will do.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from densegate.impl.dp.collective import Collective
from densegate.impl.dp.config import Phase
from densegate.impl.dp.report import RankReport
from densegate.impl.engine import Engine

__all__ = ["NO_HOOKS", "IdlePhase", "NoHooks", "PhaseHooks", "RankHooks", "chain"]


class PhaseHooks(Protocol):
    """One rank's hooks over one phase."""

    def at_tick(self, tick: int) -> None:
        """At the start of ``tick``, before its arrivals are routed."""
        ...

    def before_collective(self, collective: Collective, vector: Sequence[int]) -> None:
        """Just before each all-reduce of a tick (a retry after a failure included)."""
        ...

    def finish(self, report: RankReport) -> None:
        """When the phase ends, to add what the hook recorded to the rank's report."""
        ...


class RankHooks(Protocol):
    """What a rank is given: a ``PhaseHooks`` for each phase it runs."""

    def phase(self, rank: int, index: int, phase: Phase, engine: Engine) -> PhaseHooks:
        """The hooks of phase number ``index`` on ``rank``; ``engine`` is the phase's,
        before any pass (a hook may wrap its runner)."""
        ...


class IdlePhase:
    """Phase hooks that do nothing: the default, and a base for hooks that act at one."""

    def at_tick(self, tick: int) -> None:
        pass

    def before_collective(self, collective: Collective, vector: Sequence[int]) -> None:
        pass

    def finish(self, report: RankReport) -> None:
        pass


class NoHooks:
    """The default: nothing happens at any hook."""

    def phase(self, rank: int, index: int, phase: Phase, engine: Engine) -> PhaseHooks:
        return IdlePhase()


NO_HOOKS = NoHooks()


@dataclass(frozen=True)
class _PhaseChain:
    hooks: tuple[PhaseHooks, ...]

    def at_tick(self, tick: int) -> None:
        for h in self.hooks:
            h.at_tick(tick)

    def before_collective(self, collective: Collective, vector: Sequence[int]) -> None:
        for h in self.hooks:
            h.before_collective(collective, vector)

    def finish(self, report: RankReport) -> None:
        for h in self.hooks:
            h.finish(report)


@dataclass(frozen=True)
class _Chain:
    hooks: tuple[RankHooks, ...]

    def phase(self, rank: int, index: int, phase: Phase, engine: Engine) -> PhaseHooks:
        return _PhaseChain(tuple(h.phase(rank, index, phase, engine) for h in self.hooks))


def chain(*hooks: RankHooks) -> RankHooks:
    """Several hooks as one, called in the order given."""
    return _Chain(hooks)
