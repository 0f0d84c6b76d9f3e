"""Steps 2-3 of a pass (owed chunks, FCFS admission) as one step per request, and the fold.

``Scheduler._plan_prefill`` runs each phase as ``scan`` of one of these steps over a
list of requests (the running ones that owe prefill, then the waiting queue). Each
step reads one request's numbers and the phase's running totals and nothing else,
so R5 (``densegate.proofs.refinement.scheduler_steps``) proves it equal to the spec's
step of the same name for every input, and proves the planning glue hands ``scan``
the whole lists and composes the phases as the spec does, for lists of any length.
A phase stops once its totals are ``done``: from there its step changes nothing
(R5 proves that too), so stopping early is the same fold, in O(admitted) time.
Step 1's turns are ``Scheduler._walk_turn``, which R6
(``densegate.proofs.refinement.scheduler_requests``) proves a step of the spec's decode scan.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import NamedTuple, Protocol, TypeVar

__all__ = ["AdmitTotals", "PartialTotals", "admit_next", "owed_chunk", "scan"]


class PartialTotals(NamedTuple):
    """Step 2's running totals: the pass budget left, and the owed tokens planned so far."""

    budget: int
    run: int

    @property
    def done(self) -> bool:
        """The budget is spent: no later request gets a chunk."""
        return self.budget == 0


class AdmitTotals(NamedTuple):
    """Step 3's running totals (the spec's ``AdmitScan`` less its head monitors)."""

    slots: int
    """Sequence slots still free."""
    budget: int
    """Tokens of the pass budget still free."""
    spare: int
    """KV blocks still free."""
    planned: int
    """Prefill tokens the pass runs if the gate fires: owed chunks plus admissions so far."""
    stopped: bool
    """Admission has stopped: something was preempted, or a waiting request did not fit."""

    @property
    def done(self) -> bool:
        return self.stopped


def owed_chunk(acc: PartialTotals, left: int, cap: int) -> tuple[PartialTotals, int]:
    """One running request owing ``left`` prefill tokens: its chunk, from what is left."""
    budget = acc.budget
    n = min(left, cap, budget) if left > 0 and budget > 0 else 0
    return PartialTotals(budget - n, acc.run + n), n


def admit_next(
    acc: AdmitTotals, total: int, need: int, chunked: bool, cap: int
) -> tuple[AdmitTotals, int]:
    """One waiting request of ``total`` tokens needing ``need`` blocks: the tokens it is
    admitted with (0: not admitted, and if it did not fit, admission stops)."""
    if acc.stopped:
        return acc, 0
    budget = acc.budget
    if acc.slots <= 0 or budget <= 0 or need > acc.spare or (not chunked and total > budget):
        return acc._replace(stopped=True), 0
    n = min(total, cap, budget) if chunked else total
    return AdmitTotals(acc.slots - 1, budget - n, acc.spare - need, acc.planned + n, False), n


class _Totals(Protocol):
    @property
    def done(self) -> bool: ...


A = TypeVar("A", bound=_Totals)
X = TypeVar("X")


def scan(
    step: Callable[[A, X], tuple[A, int]], acc: A, items: Iterable[X]
) -> tuple[A, list[tuple[X, int]]]:
    """Fold ``step`` over ``items`` in order until the totals are ``done``; return the final
    totals and each item the step gave tokens to, with its tokens."""
    kept: list[tuple[X, int]] = []
    for x in items:
        if acc.done:
            break
        acc, n = step(acc, x)
        if n:
            kept.append((x, n))
    return acc, kept
