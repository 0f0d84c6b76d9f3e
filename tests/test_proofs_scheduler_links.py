"""The per-slot tie for any number of requests: edits that only a fold over the requests sees.

``densegate prove`` proves the per-slot scheduler's phases as folds of one
per-request step (S11-S14) for any number of requests. Here a spec edit that changes
no pass of at most six requests (the decode victim searched for among the first six
slots) and a ledger fact true only up to three running requests (``run0 <= 3``) are
each built into the obligations they touch and run through ``densegate prove``
(``tests.support.planted_links``): S8 and S1 still prove (the edit hides from 3
request slots and from the slot-free ledger), and S12 and S13 fail with a trace that
shows it. The edit is a real bug: at 7 requests it leaves ``free = -1``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
import z3

from densegate.proofs.obligation import Obligation
from densegate.proofs.prover import prove
from densegate.proofs.scheduler.decode_scan import decode_obligation
from densegate.proofs.scheduler.join import join_obligation
from densegate.proofs.scheduler.per_slot import invariant_of
from densegate.proofs.scheduler.tail import tail_obligation
from densegate.spec.machine import Vars, evaluate
from densegate.spec.pass_ledger import PassLedger
from densegate.spec.scheduler import RUNNING, SchedulerMachine
from tests.support.planted_links import (
    EXPECTED,
    LINKS_LEVEL,
    FirstSixSlots,
    RunsAtMostThree,
)
from tests.support.planted_runs import prove_level_json


def test_densegate_prove_refutes_what_only_the_folds_see(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, doc = prove_level_json(LINKS_LEVEL, monkeypatch, capsys)
    by_id = {o["id"]: o for o in doc["obligations"]}
    assert rc == 1
    assert {i: o["status"] for i, o in by_id.items()} == EXPECTED, by_id
    # the victim search over the first six slots: a trace at the seventh slot (slot 6)
    rows = by_id["L2"]["counterexample"]["trace"]
    assert any(row.get("slot", 0) >= 6 for row in rows), rows
    # the ledger's "at most three running": a step 0 with a fourth running request
    rows = by_id["L4"]["counterexample"]["trace"]
    assert max(row.get("next_run0", 0) for row in rows) == 4, rows


def _seven_requests() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Seven running requests, no block free: slots 0-5 decode with room in their blocks,
    slot 6 decodes and needs a block (block size 2)."""
    R = 7
    params: dict[str, Any] = {"S": R, "T": 8, "N": 2 * R, "L": 7, "cap": 8, "B": 4, "K": 2}
    params.update({"enabled": True, "chunked": False})
    state: dict[str, Any] = {"h": 0, "free": 0}
    for i in range(R):
        P = 4 if i == R - 1 else 2
        params.update({f"P{i}": P, f"M{i}": 3})
        state.update({f"st{i}": RUNNING, f"c{i}": P, f"g{i}": 1, f"b{i}": 2})
    obs = {f"{k}{i}": False for i in range(R) for k in ("arrive", "abort")}
    return params, state, obs


def _holds(term: z3.BoolRef, machine: SchedulerMachine, *values: dict[str, Any]) -> bool:
    """``term`` over ``machine``'s parameters and state, at concrete values."""
    p, s = machine.params(), machine.state("s")
    pairs = [(v[k], z3.BoolVal(x) if isinstance(x, bool) else z3.IntVal(x))
             for v, vals in zip((p, s), values, strict=True) for k, x in vals.items()]  # fmt: skip
    return z3.is_true(z3.simplify(z3.substitute(term, *pairs)))


def test_the_first_six_slots_edit_is_a_real_bug_at_seven_requests() -> None:
    params, state, obs = _seven_requests()
    m = SchedulerMachine(7, 2)
    # a state S8's invariant allows (every reachable state meets it), with valid parameters
    p, s = m.params(), m.state("s")
    assert _holds(m.param_ok(p), m, params, {}) and _holds(invariant_of(m)(p, s), m, params, state)
    _, _, spec = evaluate(SchedulerMachine(7, 2), params, state, obs)
    _, _, edited = evaluate(FirstSixSlots(7, 2), params, state, obs)
    assert spec["free"] >= 0 and spec["st6"] != RUNNING  # slot 6 preempts itself
    assert edited["free"] == -1 and edited["st6"] == RUNNING  # it takes a block there is not


class _FewDecodes(PassLedger):
    """A wrong decode fact: at most three decodes a pass."""

    def decode_facts(self, p: Vars, o: Vars) -> z3.BoolRef:
        return z3.And(super().decode_facts(p, o), o["d"] <= 3)


class _FewAdmissions(PassLedger):
    """A wrong admission fact: at most three admissions a pass."""

    def tail_facts(self, p: Vars, o: Vars, fire: z3.BoolRef, room: z3.ArithRef) -> z3.BoolRef:
        return z3.And(super().tail_facts(p, o, fire, room), o["k"] <= 3)


@pytest.mark.parametrize(
    ("build", "check"),
    [
        (lambda: join_obligation(RunsAtMostThree()), "property"),
        (lambda: decode_obligation(ledger=_FewDecodes()), "lemma 2"),
        (lambda: tail_obligation(_FewAdmissions()), "lemma 1"),
    ],
    ids=["step 0: run0 <= 3", "decodes: d <= 3", "admission: k <= 3"],
)
def test_a_wrong_ledger_fact_of_any_phase_fails_the_fold_that_owns_it(
    build: Callable[[], Obligation], check: str
) -> None:
    """Each phase's facts are the ledger's own methods, and the fold proving that phase
    checks the ledger's: a fact true only up to three requests fails it, by name."""
    r = prove(replace(build(), mutants=()))
    assert r.status == "failed", r.checks
    assert [c.name for c in r.checks if c.status == "sat"] == [check], r.checks
