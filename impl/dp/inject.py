"""Injected faults (test hooks, ``DPConfig.faults``): a rank exits, dies inside a collective,
hangs, or is slow, at a chosen tick of the first phase."""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

from densegate.impl.dp.collective import Collective
from densegate.impl.dp.config import Fault

__all__ = [
    "CRASH_EXIT_CODE",
    "Injector",
    "Schedule",
    "exit_now",
    "random_faults",
    "random_schedule",
]

CRASH_EXIT_CODE = 17
"""Exit status of a rank killed by an injected fault."""


def exit_now(mode: str) -> None:
    """The crash hook's default: die without cleanup, like a killed process."""
    if mode == "hang":
        while True:
            time.sleep(3600)
    os._exit(CRASH_EXIT_CODE)


def random_faults(seed: int, world: int, max_tick: int) -> tuple[Fault, ...]:
    """A seeded schedule: one or two ranks (never all) killed at ticks in ``[0, max_tick)``,
    each before its tick's collective or inside it (after 0-3 ms in it)."""
    rng = random.Random(seed)
    kills = min(rng.choice([1, 2]), world - 1)
    faults = []
    for rank in sorted(rng.sample(range(world), kills)):
        mode = rng.choice(["exit", "collective"])
        secs = round(rng.uniform(0.0, 0.003), 4) if mode == "collective" else 0.0
        faults.append(Fault(rank, rng.randrange(max_tick), mode, secs))
    return tuple(faults)


class Schedule(NamedTuple):
    """One seeded fault-injection run: how many ranks, which router, which faults."""

    world: int
    router: str
    faults: tuple[Fault, ...]


def random_schedule(seed: int, max_tick: int = 40) -> Schedule:
    """3 or 4 ranks, either router, and ``random_faults`` for them, all from ``seed``."""
    rng = random.Random(seed)
    world = rng.choice([3, 4])
    router = rng.choice(["round-robin", "least-loaded"])
    return Schedule(world, router, random_faults(seed, world, max_tick))


class Injector:
    """One rank's faults; ``on_crash(mode)`` ends the rank ("exit") or stalls it ("hang")."""

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

    def before_collective(self, collective: Collective, vector: list[int]) -> None:
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
