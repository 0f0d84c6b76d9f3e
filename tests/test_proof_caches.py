"""The prover's remembered results belong to the objects they were proved of, never to an id.

The prover proves an invariant inductive once per run and shares the non-vacuity
checks of obligations with the same machine and invariant. Keyed by ``id()``, a
freed invariant's id is handed to the next object, which then inherits the proof:
the public ``prove()`` would report a false claim as "proved earlier in this run".
These tests reuse ids deliberately, both as CPython does (free an invariant, build
new ones until one lands at its address) and as badly as possible (``id`` made to
return one number for every object), and demand that the false claim fail.

The claims here are toys about the gate machine, not registry obligations: ``h <= K``
after a step (true, as T2 in ``tests/support/toy_obligations.py``) and ``h == 0`` in
every reachable state (false: a HOLD raises it).
"""

from __future__ import annotations

import gc
from collections.abc import Callable

import pytest
import z3

from densegate.proofs import prover, vacuity
from densegate.proofs.common import hold_bounded
from densegate.proofs.obligation import Obligation, Step
from densegate.proofs.results import ObligationResult
from densegate.spec.gate import GATE
from densegate.spec.machine import Vars

Inv = Callable[[Vars, Vars], z3.BoolRef]


def _invariant(claim: Inv) -> Inv:
    """A new invariant object each call (same code, same size: CPython reuses addresses)."""

    def inv(p: Vars, s: Vars) -> z3.BoolRef:
        return claim(p, s)

    return inv


def _h_zero(p: Vars, s: Vars) -> z3.BoolRef:
    return s["h"] == 0


def _true_ob(inv: Inv) -> Obligation:
    def prop(st: Step) -> z3.BoolRef:
        return st.s2["h"] <= st.p["K"]

    return Obligation("T-true", "toy", "toy: h <= K after a step", GATE, prop, inv, ())


def _false_ob(inv: Inv) -> Obligation:
    def prop(st: Step) -> z3.BoolRef:
        return st.s2["h"] == 0

    return Obligation("T-false", "toy", "toy: h == 0 in every reachable state", GATE, prop, inv, ())


def _assert_refused(r: ObligationResult) -> None:
    consecution = next(c for c in r.checks if c.name == "consecution")
    assert consecution.status == "sat", consecution  # asked, and refuted
    assert "proved earlier" not in consecution.reason
    assert r.status == "failed" and not r.ok


def test_a_freed_invariants_address_does_not_carry_its_proof() -> None:
    inv = _invariant(hold_bounded)
    assert prover.prove(_true_ob(inv)).status == "proved"
    freed = id(inv)
    del inv
    gc.collect()
    kept: list[Inv] = []  # each miss stays alive, so the next try lands elsewhere
    candidate = _invariant(_h_zero)
    while id(candidate) != freed and len(kept) < 2000:
        kept.append(candidate)
        candidate = _invariant(_h_zero)
    # whether or not an object landed at the freed address (it cannot while the prover
    # keeps the proved invariant as its key), the false claim is asked and refuted
    _assert_refused(prover.prove(_false_ob(candidate)))


def test_every_object_with_one_id_still_gets_its_own_proof(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worst id reuse: ``id`` returns 1 for everything the prover could key by it."""
    for module in (prover, vacuity):
        monkeypatch.setattr(module, "id", lambda obj: 1, raising=False)
    assert prover.prove(_true_ob(_invariant(hold_bounded))).status == "proved"
    r = prover.prove(_false_ob(_invariant(_h_zero)))
    _assert_refused(r)
    # the shared non-vacuity results were not handed over either: asked afresh
    assert all(c.reason != "shared" for c in r.sanity), r.sanity


def test_one_invariant_object_is_proved_inductive_once_per_run() -> None:
    """What the cache is for: a second obligation on the same machine and invariant object
    reuses the consecution proof (and says so)."""
    inv = _invariant(hold_bounded)
    first = prover.prove(_true_ob(inv))
    again = prover.prove(_true_ob(inv))
    assert first.status == again.status == "proved"
    reasons = [c.reason for c in again.checks if c.name == "consecution"]
    assert reasons == ["proved earlier in this run"]
