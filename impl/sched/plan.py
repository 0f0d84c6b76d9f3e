"""A pass as the gate is asked about it (``PassPlan``) and as the log keeps it (``PassRecord``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from densegate.impl.gate import Reason
from densegate.impl.sched.fast_init import fast_init
from densegate.impl.sched.request import Request

__all__ = ["PassPlan", "PassRecord", "check_current"]


@dataclass(slots=True)
class PassPlan:
    """A pass planned but not yet committed: what the gate is asked about."""

    index: int
    decodes: list[Request]
    partials: list[tuple[Request, int]]
    admits: list[tuple[Request, int]]
    preempted: list[Request]
    prefill_tokens: int
    """Tokens steps 2-3 would run if the gate fired (uncapped)."""
    waiting_tokens: int
    """``prefill_tokens`` capped at ``dense_tokens``: the gate's observation."""

    @property
    def decode_seqs(self) -> int:
        return len(self.decodes)


@fast_init  # one per pass
@dataclass(frozen=True, slots=True)
class PassRecord:
    """One pass, as ``Scheduler.pass_log`` keeps it."""

    index: int
    fire: bool
    reason: Reason
    prefill_tokens: int
    prefill_seqs: int
    decode_seqs: int
    preempted: int
    waiting: int
    running: int
    kv_free_blocks: int
    waiting_tokens: int
    """The gate's observation: admissible prefill tokens, capped at dense_tokens."""
    failed: bool = False
    """The runner failed this pass: nothing it planned was computed (``Scheduler.undo``)."""

    @property
    def interrupts_decode(self) -> bool:
        """Prefill ran while decodes were due (beside them, in this scheduler)."""
        return self.prefill_tokens > 0 and self.decode_seqs > 0


def check_current(
    plan: PassPlan, index: int, aborted: Sequence[Request], waiting: Sequence[Request]
) -> None:
    """Raise, changing nothing, if committing ``plan`` at pass ``index`` would lose or corrupt
    a request: another pass's plan, one running a request ``aborted`` since, or one admitting
    other than the head of ``waiting``."""
    if plan.index != index:
        raise ValueError(f"plan is for pass {plan.index}, scheduler is at {index}")
    if aborted:  # O(plan) only after an abort: the usual pass pays nothing
        gone = {id(r) for r in aborted}
        runs = plan.decodes + [r for r, _ in plan.partials] + [r for r, _ in plan.admits]
        hit = next((r for r in runs if id(r) in gone), None)
        if hit is not None:
            raise ValueError(
                f"plan for pass {plan.index} is stale: it runs request {hit.request_id!r}, "
                "aborted since; plan again"
            )
    for i, (r, _) in enumerate(plan.admits):
        if i >= len(waiting) or waiting[i] is not r:
            raise ValueError(
                f"plan for pass {plan.index} is stale: it admits request {r.request_id!r}, "
                "which is no longer at that place in the queue; plan again"
            )
