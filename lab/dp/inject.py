"""Injected faults, for tests and demos: a rank exits, dies inside a collective, hangs, or
is slow, at a chosen tick of a chosen phase; through the rank's hooks
(``densegate.impl.dp.hooks``), so the runtime holds no test hook of its own."""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from densegate.impl.dp.collective import Collective
from densegate.impl.dp.config import Phase
from densegate.impl.dp.hooks import PhaseHooks
from densegate.impl.dp.report import RankReport
from densegate.impl.engine import Engine
from densegate.impl.validation import (
    check_choice,
    check_instance,
    check_int,
    check_nonnegative_float,
    int_problem,
)

__all__ = [
    "CRASH_EXIT_CODE",
    "FAULT_MODES",
    "Fault",
    "FaultHooks",
    "Injector",
    "Schedule",
    "check_faults",
    "exit_now",
    "random_faults",
    "random_schedule",
]

FAULT_MODES = ("exit", "collective", "hang", "slow")
CRASH_EXIT_CODE = 17
"""Exit status of a rank killed by an injected fault."""


@dataclass(frozen=True)
class Fault:
    """An injected fault on ``rank`` at tick ``tick`` of phase number ``phase`` (0: the
    coordinated phase; ``DPConfig.run_phases`` gives the order).

    ``exit``: the rank dies before the tick's collective (at tick 0: before the
    phase's first); ``collective``: it enters the collective, waits ``seconds``
    and dies inside it; ``hang``: it stops answering; ``slow``: it sleeps
    ``seconds`` before the collective and goes on (below the timeout it must not
    be taken for dead). A tick the phase never reaches injects nothing.
    """

    rank: int
    tick: int
    mode: str = "exit"
    seconds: float = 0.0
    phase: int = 0

    def __post_init__(self) -> None:
        check_int("Fault", "rank", self.rank, 0)
        check_int("Fault", "tick", self.tick, 0)
        check_choice("Fault", "mode", self.mode, FAULT_MODES)
        check_nonnegative_float("Fault", "seconds", self.seconds)
        check_int("Fault", "phase", self.phase, 0)

    @property
    def spec(self) -> str:
        """The fault as ``DENSEGATE_DP_CRASH`` writes it."""
        return f"{self.rank}:{self.tick}:{self.mode}:{self.seconds:g}@{self.phase}"


def check_faults(faults: Sequence[Fault], world: int, phases: int) -> None:
    """``ValueError`` naming the first fault no rank or phase of the run could take (such a
    fault would be silently ignored: a typo, not a test)."""
    for f in faults:
        for field, value, top in (("rank", f.rank, world - 1), ("phase", f.phase, phases - 1)):
            why = int_problem(f"DENSEGATE_DP_CRASH {f.spec}: {field}", value, 0, top)
            if why is not None:
                raise ValueError(f"{why} (this run has {world} ranks and {phases} phase(s))")


def exit_now(mode: str) -> None:
    """The crash hook's default: die without cleanup, like a killed process."""
    if mode == "hang":
        while True:
            time.sleep(3600)
    os._exit(CRASH_EXIT_CODE)


def random_faults(seed: int, world: int, max_tick: int, phases: int = 1) -> tuple[Fault, ...]:
    """A seeded schedule: one or two ranks (never all) killed in phases in ``[0, phases)`` at
    ticks in ``[0, max_tick)`` (tick 0, before the phase's first collective, one time in
    four), each before its tick's collective or inside it (after 0-3 ms in it)."""
    rng = random.Random(seed)
    kills = min(rng.choice([1, 2]), world - 1)
    faults = []
    for rank in sorted(rng.sample(range(world), kills)):
        mode = rng.choice(["exit", "collective"])
        secs = round(rng.uniform(0.0, 0.003), 4) if mode == "collective" else 0.0
        tick = 0 if rng.random() < 0.25 else rng.randrange(max_tick)
        faults.append(Fault(rank, tick, mode, secs, rng.randrange(phases)))
    return tuple(faults)


class Schedule(NamedTuple):
    """One seeded fault-injection run: how many ranks, which router, which faults."""

    world: int
    router: str
    faults: tuple[Fault, ...]


def random_schedule(seed: int, max_tick: int = 40, phases: int = 1) -> Schedule:
    """3 or 4 ranks, either router, and ``random_faults`` for them over ``phases`` phases,
    all from ``seed``."""
    rng = random.Random(seed)
    world = rng.choice([3, 4])
    router = rng.choice(["round-robin", "least-loaded"])
    return Schedule(world, router, random_faults(seed, world, max_tick, phases))


class Injector:
    """One rank's faults over one phase; ``on_crash(mode)`` ends the rank ("exit") or
    stalls it ("hang")."""

    def __init__(self, faults: Sequence[Fault], on_crash: Callable[[str], None]) -> None:
        self.faults = list(faults)
        self.on_crash = on_crash
        self._inside: Fault | None = None

    def at_tick(self, tick: int) -> None:
        """At the start of ``tick``: exit, hang or sleep; arm a death inside the collective."""
        for f in self.faults:
            if f.tick != tick:
                continue
            if f.mode == "slow":
                time.sleep(f.seconds)
            elif f.mode == "collective":
                self._inside = f
            else:
                self.on_crash(f.mode)

    def before_collective(self, collective: Collective, vector: Sequence[int]) -> None:
        """If armed: enter the collective (from a thread), wait, and die inside it."""
        f = self._inside
        if f is None:
            return

        def enter() -> None:
            try:
                collective.all_reduce_sum(vector)
            except Exception:  # the rank is dying; what its collective says no longer matters
                return

        threading.Thread(target=enter, daemon=True).start()
        time.sleep(f.seconds)
        self.on_crash("exit")

    def finish(self, report: RankReport) -> None:
        """Nothing to report: the survivors' reports say what the fault did."""


@dataclass(frozen=True)
class FaultHooks:
    """The rank hooks that inject ``faults``, each in its phase; ``on_crash`` (default
    ``exit_now``) must be picklable when the hooks go to rank processes."""

    faults: tuple[Fault, ...]
    on_crash: Callable[[str], None] = exit_now

    def __post_init__(self) -> None:
        check_instance("FaultHooks", "faults", self.faults, tuple)
        for i, f in enumerate(self.faults):
            check_instance("FaultHooks", f"faults[{i}]", f, Fault)

    def phase(self, rank: int, index: int, phase: Phase, engine: Engine) -> PhaseHooks:
        mine = [f for f in self.faults if f.rank == rank and f.phase == index]
        return Injector(mine, self.on_crash)
