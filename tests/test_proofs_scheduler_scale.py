"""The per-slot obligations proved again at more request slots.

``densegate prove`` proves S8 (which includes no-idle, conservation and the TTFT
window's facts on the per-slot machine) at 3 slots, about 1 s. Consecution is the
costly query: about 2-3 s at 4 slots, 20 s at 5, 2-3 min at 6 (a 2-core machine,
past the prover's resource limit at 6). So this suite proves 4 slots in every
profile, and 5 and 6 only in the ``nightly`` profile, with the limit lifted: the
counts the scheduler scopes name (``densegate.proofs.scheduler.scopes``), read from
there so they cannot drift apart.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from densegate.proofs import prover, queries
from densegate.proofs.scheduler.per_slot import (
    BLOCK_SIZE,
    PER_SLOT_OBLIGATIONS,
    invariant_of,
    per_slot_mutants,
)
from densegate.proofs.scheduler.scopes import NIGHTLY_SLOTS, TEST_SLOTS, per_slot_scope
from densegate.spec.scheduler import SchedulerMachine
from tests.support.profiles import NIGHTLY

PER_SLOT = ("S8",)


_NIGHTLY_ONLY = pytest.mark.skipif(
    not NIGHTLY, reason="5 and 6 slots take minutes: nightly profile only"
)


@pytest.mark.parametrize(
    "slots", [TEST_SLOTS, *(pytest.param(n, marks=_NIGHTLY_ONLY) for n in NIGHTLY_SLOTS)]
)
def test_per_slot_obligations_hold_at_more_slots(
    slots: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    if slots > TEST_SLOTS:
        monkeypatch.setattr(queries, "RLIMIT", 0)  # 0: no resource limit
    machine = SchedulerMachine(slots, BLOCK_SIZE)
    inv = invariant_of(machine)
    scope = per_slot_scope(slots, BLOCK_SIZE)
    for ob in PER_SLOT_OBLIGATIONS:
        if ob.id not in PER_SLOT:
            continue
        mutant = per_slot_mutants(slots, BLOCK_SIZE)["dense_from_queue"]
        at = replace(ob, machine=machine, invariant=inv, mutants=[mutant], scope=scope)
        r = prover.prove(at)
        assert r.status == "proved", (slots, r.id, r.checks, r.sanity)
        assert {c.status for c in r.checks} == {"unsat"}, (slots, r.id)
        # the same check, on a broken machine of the same size, fails with a trace
        assert [m.status for m in r.mutants] == ["refuted"], (slots, r.mutants)
