"""A pass as the gate is asked about it (``PassPlan``) and as the log keeps it (``PassRecord``)."""

from __future__ import annotations

from dataclasses import dataclass

from densegate.impl.gate import Reason
from densegate.impl.sched.fast_init import fast_init
from densegate.impl.sched.request import Request

__all__ = ["PassPlan", "PassRecord"]


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
