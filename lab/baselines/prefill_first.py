"""vLLM v0's prefill-first order, the "legacy" of the benchmarks. Not covered by the proofs.

A pass that can admit prefill runs prefill only, and every decode waits that
pass. That is the interruption the dense gate exists to ration; the default
``Scheduler`` (decode first, prefill beside it: vLLM v1's order) interrupts
decode more gently, by slowing a mixed pass and keeping it out of a CUDA graph.
The decodes a prefill-only pass leaves out are recorded as ``stalled``, so
that such a pass counts as interrupting decode.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from densegate.impl.gate import Decision
from densegate.impl.sched.batch import ScheduledBatch
from densegate.impl.sched.plan import PassPlan, PassRecord
from densegate.lab.baselines.raw_scheduler import RawListScheduler

__all__ = ["PrefillFirstPlan", "PrefillFirstRecord", "PrefillFirstScheduler"]


@dataclass(slots=True)
class PrefillFirstPlan(PassPlan):
    """A prefill-only plan, with the decoding requests it leaves out."""

    stalled: int = 0


@dataclass(frozen=True, slots=True)
class PrefillFirstRecord(PassRecord):
    """A pass record that also counts the decodes a prefill-only pass stalled."""

    stalled_decodes: int = 0

    @property
    def interrupts_decode(self) -> bool:
        """Prefill ran while decodes were due: beside them, or instead of them."""
        return self.prefill_tokens > 0 and (self.decode_seqs > 0 or self.stalled_decodes > 0)


class PrefillFirstScheduler(RawListScheduler):
    """Prefill-only passes whenever prefill can be admitted; decode passes otherwise."""

    def plan(self) -> PassPlan:
        owed = [r for r in self.running if not r.is_decoding]
        prefill = self._plan_prefill([], [], owed)
        if prefill.prefill_tokens == 0:
            return super().plan()
        fields = {f.name: getattr(prefill, f.name) for f in dataclasses.fields(PassPlan)}
        return PrefillFirstPlan(**fields, stalled=len(self.running) - len(owed))

    def decide(self, plan: PassPlan) -> Decision:
        # The decodes a prefill-only pass stalls are the ones a HOLD would run.
        if isinstance(plan, PrefillFirstPlan) and plan.stalled:
            plan = dataclasses.replace(plan, decodes=[r for r in self.running if r.is_decoding])
        return super().decide(plan)

    def commit(self, plan: PassPlan, decision: Decision) -> ScheduledBatch:
        if plan.prefill_tokens and not plan.decodes and not decision.fire:
            # A gate that holds a prefill-only pass gets the decode pass instead.
            decodes, preempted, _ = self._plan_decodes()
            plan = PassPlan(plan.index, decodes, [], [], preempted, 0, plan.waiting_tokens)
        return super().commit(plan, decision)

    def _record(
        self, plan: PassPlan, decision: Decision, prefill_tokens: int, prefill_seqs: int
    ) -> PassRecord:
        base = super()._record(plan, decision, prefill_tokens, prefill_seqs)
        fields = {f.name: getattr(base, f.name) for f in dataclasses.fields(PassRecord)}
        stalled = plan.stalled if isinstance(plan, PrefillFirstPlan) else 0
        return PrefillFirstRecord(**fields, stalled_decodes=stalled)
