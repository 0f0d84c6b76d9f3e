"""Nightly: the per-slot obligations proved again at more request slots.

``densegate prove`` proves S6 and S8 (which includes no-idle and conservation
on the per-slot machine) at 4 slots. Consecution is the costly query: for S8's
invariant about 3 s at 4 slots, 20 s at 5,
2-3 min at 6; for S6's window invariant about 7 s at 4 and 6 min at 5 (a 2-core
machine, past the prover's resource limit). So the larger slot counts run only
in the ``nightly`` profile, with the limit lifted.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import z3

from densegate.proofs import prover
from densegate.proofs.scheduler_obligations import (
    BLOCK_SIZE,
    SCHEDULER_OBLIGATIONS,
    invariant_of,
)
from densegate.proofs.scheduler_ttft import ttft_invariant, ttft_monitors
from densegate.spec.machine import Vars
from densegate.spec.scheduler import SchedulerMachine
from tests.profiles import NIGHTLY

PER_SLOT = ("S8",)


@pytest.mark.skipif(not NIGHTLY, reason="5 and 6 slots take minutes: nightly profile only")
@pytest.mark.parametrize("slots", [5, 6])
def test_per_slot_obligations_hold_at_more_slots(
    slots: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(prover, "RLIMIT", 0)  # 0: no resource limit
    machine = SchedulerMachine(slots, BLOCK_SIZE)
    inv = invariant_of(machine)
    scope = f"{slots} requests, block size {BLOCK_SIZE}"
    for ob in SCHEDULER_OBLIGATIONS:
        if ob.id not in PER_SLOT:
            continue
        r = prover.prove(replace(ob, machine=machine, invariant=inv, mutants=(), scope=scope))
        assert r.status == "proved", (slots, r.id, r.checks, r.sanity)
        assert {c.status for c in r.checks} == {"unsat"}, (slots, r.id)


@pytest.mark.skipif(not NIGHTLY, reason="S6 at 5 slots takes about 6 minutes: nightly only")
def test_s6_holds_at_five_slots(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prover, "RLIMIT", 0)
    machine = SchedulerMachine(5, BLOCK_SIZE)
    base, window = invariant_of(machine), ttft_invariant(machine)

    def inv(p: Vars, s: Vars) -> z3.BoolRef:
        return z3.And(base(p, s), window(p, s))

    ob = next(o for o in SCHEDULER_OBLIGATIONS if o.id == "S6")
    scoped = replace(
        ob, machine=machine, invariant=inv, monitors=ttft_monitors(5), mutants=(), scope="5"
    )
    r = prover.prove(scoped)
    assert r.status == "proved", (r.checks, r.sanity)
    assert {c.status for c in r.checks} == {"unsat"}
