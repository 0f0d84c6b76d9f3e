"""Injected faults (test hooks, ``DPConfig.faults``): a rank exits, dies inside a collective,
hangs, or is slow, at a chosen tick of the first phase."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence

from densegate.impl.dp.collective import Collective
from densegate.impl.dp.config import Fault

__all__ = ["CRASH_EXIT_CODE", "Injector", "exit_now"]

CRASH_EXIT_CODE = 17
"""Exit status of a rank killed by an injected fault."""


def exit_now(mode: str) -> None:
    """The crash hook's default: die without cleanup, like a killed process."""
    if mode == "hang":
        while True:
            time.sleep(3600)
    os._exit(CRASH_EXIT_CODE)


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
