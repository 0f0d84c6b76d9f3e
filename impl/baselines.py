"""Schedulers densegate is compared against. Baselines only: the proofs do not cover them.

``PrefillFirstScheduler`` is vLLM v0's order, the "legacy" of the benchmarks: a
pass that can admit prefill runs prefill only, and every decode waits that
pass. That is the interruption the dense gate exists to ration; the default
``Scheduler`` (decode first, prefill beside it: vLLM v1's order) interrupts
decode more gently, by slowing a mixed pass and keeping it out of a CUDA graph.
"""

from __future__ import annotations

import dataclasses

from densegate.impl.batch import ScheduledBatch
from densegate.impl.gate import Decision
from densegate.impl.scheduler import PassPlan, Scheduler

__all__ = ["PrefillFirstScheduler"]


class PrefillFirstScheduler(Scheduler):
    """Prefill-only passes whenever prefill can be admitted; decode passes otherwise."""

    def plan(self) -> PassPlan:
        owed = [r for r in self.running if not r.is_decoding]
        prefill = self._plan_prefill([], [], owed)
        if prefill.prefill_tokens == 0:
            return super().plan()
        prefill.stalled = len(self.running) - len(owed)
        return prefill

    def decide(self, plan: PassPlan) -> Decision:
        # The decodes a prefill-only pass stalls are the ones a HOLD would run.
        if plan.stalled:
            plan = dataclasses.replace(plan, decodes=[r for r in self.running if r.is_decoding])
        return super().decide(plan)

    def commit(self, plan: PassPlan, decision: Decision) -> ScheduledBatch:
        if plan.prefill_tokens and not plan.decodes and not decision.fire:
            # A gate that holds a prefill-only pass gets the decode pass instead.
            decodes, preempted, _ = self._plan_decodes()
            plan = PassPlan(plan.index, decodes, [], [], preempted, 0, plan.waiting_tokens)
        return super().commit(plan, decision)
