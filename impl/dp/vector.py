"""Layout of the int vector every rank all-reduces each tick, after the gate's own slots.

One vector carries the gate's inputs and what the runtime needs besides, so a
tick costs one collective (``densegate.impl.dp.rank`` describes each slot).
"""

from __future__ import annotations

from densegate.impl.dp_gate import VECTOR_SIZE
from densegate.impl.gate import Reason

__all__ = [
    "ANY_WORK",
    "LOADS",
    "PREV_DECODE_ONLY",
    "PREV_PREFILL",
    "PREV_REASONS",
    "REASONS",
    "vector_size",
]

REASONS: tuple[Reason, ...] = tuple(Reason)
"""Decision reasons in the order of the ``PREV_REASONS`` slots."""
ANY_WORK = VECTOR_SIZE
PREV_PREFILL = VECTOR_SIZE + 1
PREV_DECODE_ONLY = VECTOR_SIZE + 2
PREV_REASONS = VECTOR_SIZE + 3
"""``len(Reason)`` slots: ranks whose previous pass prefilled, per decision reason."""
LOADS = PREV_REASONS + len(REASONS)
"""``world_size`` slots: outstanding requests of each rank."""


def vector_size(world_size: int) -> int:
    """Length of the per-tick vector for ``world_size`` ranks."""
    return LOADS + world_size
