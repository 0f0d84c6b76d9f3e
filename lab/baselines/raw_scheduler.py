"""A scheduler that shows a raw-list policy its raw counts, for faithful baselines.

The core ``Scheduler`` gives every gate the honest observation (admissible
tokens, decoding sequences). The original change's gate read the raw lists
instead; to show its flaws rather than assert them, this subclass passes a
``RawGatePolicy`` the list lengths beside the honest input. Other policies see
exactly what the core scheduler shows them.
"""

from __future__ import annotations

from densegate.impl.gate import Decision
from densegate.impl.sched.plan import PassPlan
from densegate.impl.sched.scheduler import Scheduler
from densegate.lab.baselines.policies import RawCounts, RawGatePolicy

__all__ = ["RawListScheduler"]


class RawListScheduler(Scheduler):
    """``Scheduler`` whose ``decide`` feeds ``decide_raw`` to policies that have it."""

    def decide(self, plan: PassPlan) -> Decision:
        gate = self.gate
        if not isinstance(gate, RawGatePolicy):
            return super().decide(plan)
        owed = sum(n for _, n in plan.partials)
        raw = RawCounts(len(self.running), self.queued_tokens + owed)
        return gate.decide_raw(self.observe(plan), raw)
