"""What a failed collective leaves a rank holding, across phases: an agreement to apply.

A rank learns of a failure at its failed call, but applies the agreement
(``densegate.impl.dp.membership``) at the call every survivor applies it: the
next one, which for a lagger that adopted a phase's last call is the first call
of the next phase. So ``GroupState`` outlives a phase: collectives counted over
the whole run, the last one's result, and the agreement not applied yet. The
fault is recorded in the report of the phase it is applied in, at that tick,
the same on every survivor.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from densegate.impl.dp.collective import Collective
from densegate.impl.dp.membership import Agreement
from densegate.impl.dp.report import RankReport

__all__ = ["MAX_AGREEMENTS", "GroupState", "Pending"]

MAX_AGREEMENTS = 64
"""A group that keeps failing without losing a rank is broken in a way agreement cannot fix."""


@dataclass
class Pending:
    """An agreement not yet applied, and what this rank saw of the failure."""

    agreed: Agreement
    fault: dict[str, Any]

    def entry(self, tick: int) -> dict[str, Any]:
        """A report's record of this agreement, applied at ``tick``."""
        agreed = self.agreed
        return {
            "tick": tick,
            **self.fault,
            "dead_ranks": agreed.dead,
            "survivors": agreed.members,
            "left": agreed.left,
            "epoch": agreed.epoch,
        }


@dataclass
class GroupState:
    """One rank's view of its group's history, over every phase."""

    calls: int = 0
    """Collectives completed (or adopted) over every phase."""
    last_total: list[int] | None = None
    pending: Pending | None = None

    def completed(self, total: list[int]) -> None:
        self.calls += 1
        self.last_total = total

    def recover(self, collective: Collective, err: Exception, waited_s: float) -> Agreement:
        """Agree on the survivors after ``err`` (``collective.recover``'s errors pass
        through) and hold the agreement until it is applied."""
        t0 = time.perf_counter()
        agreed = collective.recover(self.calls, self.last_total)
        self.pending = Pending(
            agreed,
            {
                "error": str(err)[:300],
                "detected_after_s": waited_s,
                "recovery_s": time.perf_counter() - t0,
                "adopted": agreed.adopt is not None and agreed.adopt[0] == self.calls + 1,
            },
        )
        return agreed

    def apply(self, rank: int, report: RankReport, tick: int) -> Agreement | None:
        """The pending agreement, now recorded in ``report`` at ``tick`` (None if none)."""
        pending, self.pending = self.pending, None
        if pending is None:
            return None
        if len(report.faults) >= MAX_AGREEMENTS:
            raise RuntimeError(f"rank {rank}: {MAX_AGREEMENTS} agreements, giving up")
        report.faults.append(pending.entry(tick))
        return pending.agreed

    def close(self, report: RankReport) -> None:
        """At the end of the run: a lagger that adopted the run's last call had nothing
        left to hand over (every request had ended), but its report still names the dead."""
        pending, self.pending = self.pending, None
        if pending is not None:
            report.faults.append(
                {**pending.entry(report.ticks), "readmitted": 0, "ended_on_dead": 0}
            )
