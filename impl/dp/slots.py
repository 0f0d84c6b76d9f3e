"""The rank loop's per-tick vector, built and read on the runtime's own path.

``densegate.impl.dp_gate`` describes every slot. Its public path checks every value
(``RankObservation``, ``ReducedObservation.from_sum``, ``AlignedGate.decide``); the
rank loop builds its contribution from its own scheduler's plan (non-negative ints
by construction) and reads back the sum of such contributions, so ``RuntimeGate``
skips those checks and keeps the one a lost rank would trip: the rank count. Its
decisions are ``AlignedGate``'s (the same rules, ``AlignedGate._rules``).
"""

from __future__ import annotations

from collections.abc import Sequence

from densegate.impl.dp_gate import (
    DECODE_SEQS,
    FILLED_RANKS,
    KV_PRESSURE_RANKS,
    NO_DECODE_RANKS,
    RANKS,
    REASONS,
    VACANT_RANKS,
    WAITING_RANKS,
    WAITING_TOKENS,
    AlignedGate,
)
from densegate.impl.dp_vector import contribution
from densegate.impl.gate import Decision, Reason
from densegate.impl.sched.plan import PassPlan
from densegate.impl.sched.scheduler import Scheduler

__all__ = ["IDLE", "Prev", "RuntimeGate", "prev_slots"]

Prev = tuple[int, ...]
"""The ``PREV_PREFILL``, ``PREV_DECODE_ONLY`` and ``PREV_REASONS`` slots of a rank's
previous pass."""
_NO_REASON = (0,) * len(REASONS)
IDLE: Prev = (0, 0, *_NO_REASON)
"""No previous pass, or one that ran nothing."""
_DECODED: Prev = (0, 1, *_NO_REASON)
_PREFILLED: dict[Reason, Prev] = {r: (1, 0, *(int(r is q) for q in REASONS)) for r in REASONS}


def prev_slots(prefill_tokens: int, decode_seqs: int, reason: Reason) -> Prev:
    """The previous-pass slots of a pass that ran these counts under ``reason``."""
    if prefill_tokens > 0:
        return _PREFILLED[reason]
    return _DECODED if decode_seqs > 0 else IDLE


class RuntimeGate(AlignedGate):
    """``AlignedGate`` for the rank loop: its contribution from the plan's counts, its
    decision from the reduced vector, neither re-checked (see the module docstring)."""

    __slots__ = ()

    def vector(
        self, plan: PassPlan, sched: Scheduler, kv_high: float, prev: Prev, loads: list[int]
    ) -> list[int]:
        """The whole tick vector: ``contribution(RankObservation(...))`` of ``plan``,
        then ``ANY_WORK``, ``prev`` and ``loads``."""
        used = sched.config.num_blocks - sched.blocks.num_free
        capped = min(plan.waiting_tokens, self._dense)
        work = 1 if sched.waiting or sched.running else 0
        gate = contribution(capped, len(plan.decodes), used >= kv_high, bool(plan.partials),
                            self._fill)  # fmt: skip
        return [*gate, work, *prev, *loads]

    def decide_sum(self, total: Sequence[int], tick: int) -> Decision:
        """``decide(ReducedObservation.from_sum(...), tick)`` of the runtime's own sum."""
        if total[RANKS] != self._world:
            raise ValueError(
                f"ReducedObservation.ranks must equal world_size={self._world}, got {total[RANKS]}"
            )
        return self._rules(
            total[WAITING_RANKS],
            total[WAITING_TOKENS],
            total[DECODE_SEQS],
            total[KV_PRESSURE_RANKS],
            tick,
            total[FILLED_RANKS],
            total[NO_DECODE_RANKS],
            total[VACANT_RANKS],
        )
