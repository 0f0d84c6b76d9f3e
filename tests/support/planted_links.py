"""Planted spec edits that only the per-request folds see: the per-slot tie for any R.

Each is a real obligation built from an edited spec (new machine objects, so nothing
the prover remembered of the real ones applies), run by ``densegate prove`` on a level
of its own (tests patch it in):

- a victim search that looks at the first six slots only (an edit that changes no
  pass of at most six requests): S8 built from it, at its 3 slots, still proves (L1);
  S12 built from it fails, with a trace at slot 6 (L2);
- a pass ledger with a step-0 fact true only up to three running requests
  (``run0 <= 3``): S1 on that ledger still proves (L3); S13, which checks the ledger's
  step-0 facts against the per-slot step 0, fails with a trace of four (L4).
"""

from __future__ import annotations

import z3

from densegate.proofs.obligation import Obligation
from densegate.proofs.registry import Level, Source
from densegate.proofs.scheduler.join import join_obligation
from densegate.proofs.scheduler.ledger import LEDGER_OBLIGATIONS
from densegate.proofs.scheduler.per_slot import BLOCK_SIZE, PER_SLOT_OBLIGATIONS, invariant_of
from densegate.proofs.scheduler.victim import VICTIM_HOOKS, victim_obligation
from densegate.spec.machine import Vars
from densegate.spec.pass_ledger import PassLedger
from tests.support.planted_runs import planted

__all__ = [
    "EXPECTED",
    "LINKS",
    "LINKS_LEVEL",
    "LINKS_OBLIGATIONS",
    "FirstSixSlots",
    "RunsAtMostThree",
]

LINKS = "planted-links"

FirstSixSlots = VICTIM_HOOKS["victim_among_first_six"][0]
"""The edited spec scheduler: its decode victim searched for among the first six slots."""


class RunsAtMostThree(PassLedger):
    """The pass ledger with a wrong step-0 fact: at most three requests run after it."""

    def join_facts(self, s: Vars, o: Vars) -> z3.BoolRef:
        return z3.And(super().join_facts(s, o), o["run0"] <= 3)


def _planted(base: Obligation, id: str, **changes: object) -> Obligation:
    return planted(base, id, LINKS, **changes)


def _s8_on(machine_cls: type) -> Obligation:
    (s8,) = PER_SLOT_OBLIGATIONS
    machine = machine_cls(3, BLOCK_SIZE)
    return _planted(s8, "L1", machine=machine, invariant=invariant_of(machine))


_WRONG = RunsAtMostThree()
_S1 = next(ob for ob in LEDGER_OBLIGATIONS if ob.id == "S1")

LINKS_OBLIGATIONS: list[Obligation] = [
    _s8_on(FirstSixSlots),
    _planted(victim_obligation(BLOCK_SIZE, FirstSixSlots), "L2"),
    _planted(_S1, "L3", machine=_WRONG),
    _planted(join_obligation(_WRONG, BLOCK_SIZE), "L4"),
]

EXPECTED = {"L1": "proved", "L2": "failed", "L3": "proved", "L4": "failed"}
"""Planted id -> the status ``densegate prove`` must report."""

LINKS_LEVEL = Level(
    LINKS,
    "planted spec edits that only the per-request folds see",
    tuple(ob.id for ob in LINKS_OBLIGATIONS),
    (Source("tests.support.planted_links", "LINKS_OBLIGATIONS"),),
)
