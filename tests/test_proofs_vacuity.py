"""Vacuity that cannot hide: planted contradictions fail ``densegate prove``, each by name.

Every planted obligation (``tests.support.planted_obligations``) is a real one with a
premise broken so that its induction (or every symbolic path) still passes: a false
fact, a fact that blocks one sub-case, an unsatisfiable initial state, a false
precondition, a precondition that drops a configuration class. ``densegate prove``,
run on the planted level, must exit non-zero, report each ``vacuous`` and name the
check that caught it, with its reason. A few smaller cases call the prover directly.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
import z3

from densegate.proofs.gate_obligations import GATE_OBLIGATIONS
from densegate.proofs.prover import prove
from densegate.spec.gate import GateMachine
from densegate.spec.machine import Vars
from tests.support.planted_obligations import CAUGHT_BY, PLANTED_LEVEL
from tests.support.planted_runs import prove_level


def _run_planted(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                 *argv: str) -> tuple[int, str]:  # fmt: skip
    return prove_level(PLANTED_LEVEL, monkeypatch, capsys, *argv)


def test_densegate_prove_fails_every_planted_contradiction_naming_its_check(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out = _run_planted(monkeypatch, capsys, "--json")
    assert rc == 1
    by_id = {o["id"]: o for o in json.loads(out)["obligations"]}
    assert list(by_id) == list(CAUGHT_BY)
    for ob_id, (check, words) in CAUGHT_BY.items():
        o = by_id[ob_id]
        assert o["status"] == "vacuous", (ob_id, o["status"], o["checks"], o["sanity_checks"])
        # what an induction (or every explored path) alone would have said: proved
        assert {c["status"] for c in o["checks"]} == {"unsat"}, (ob_id, o["checks"])
        found = _caught(o, check)
        assert found is not None, (ob_id, check, o["sanity_checks"], o["coverage"])
        assert words in found, (ob_id, found)


def _caught(o: dict[str, Any], check: str) -> str | None:
    """The reason ``check`` failed in ``o`` (None when it passed or did not run)."""
    for c in o["sanity_checks"]:
        if c["name"] == check:
            passed = c["status"] == ("unsat" if c["name"] == "totality" else "sat")
            return None if passed else c["reason"]
    for c in o["coverage"]:
        if f"{c['check']}: {c['class']}" == check and not (c["satisfiable"] and c["reached"]):
            return "no explored path" if c["satisfiable"] else "no model"
    return None


def test_the_blocked_sub_case_is_also_an_unreached_trigger(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out = _run_planted(monkeypatch, capsys, "--json", "--only", "X2")
    (o,) = json.loads(out)["obligations"]
    assert rc == 1 and o["total"] is False
    runs = [t for t in o["triggers"] if "runs while prefill is owed ahead" in t["condition"]]
    assert [(t["reachable"], t["within"]) for t in runs] == [(False, o["reach_depth"])], runs


def test_the_report_prints_the_check_that_caught_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out = _run_planted(monkeypatch, capsys, "--only", "X3,X6")
    text = " ".join(out.split())
    assert rc == 1 and "NOT all proved" in text
    assert "X3 initial state: unsat no initial state meets the parameters" in text
    assert "X6 plan: configuration class unchunked prefill" in text


# -- the prover directly: trigger depth, and an unconstrained case totality catches --------


def test_a_trigger_reached_only_past_the_stated_depth_fails() -> None:
    """V2's triggers are first reached at pass 1: within 1 pass they are not, and the
    obligation says so rather than passing."""
    from densegate.proofs.stall_gate_obligations import STALL_GATE_OBLIGATIONS

    v2 = next(o for o in STALL_GATE_OBLIGATIONS if o.id == "V2")
    r = prove(replace(v2, mutants=(), reach_depth=1))
    assert r.status == "vacuous", r.sanity
    missed = [c.reason for c in r.sanity if c.name.startswith("trigger") and c.status == "unsat"]
    assert missed and all("not reached within 1 passes" in m for m in missed), missed


class _NoObservationAtBudget(GateMachine):
    """A gate whose observation is impossible once the counter reaches K-1 (a planted fact
    that blocks the budget's sub-case): every HOLD still proves its claims."""

    def obs_ok(self, p: Vars, s: Vars, o: Vars) -> z3.BoolRef:
        return z3.And(super().obs_ok(p, s, o), s["h"] + 1 < p["K"])


def test_a_state_with_no_pass_is_caught_by_totality_with_the_state() -> None:
    p6 = next(o for o in GATE_OBLIGATIONS if o.id == "P6")
    r = prove(replace(p6, machine=_NoObservationAtBudget(), mutants=()))
    total = next(c for c in r.sanity if c.name == "totality")
    assert total.status == "sat" and r.status == "vacuous", r.sanity
    assert "admits no observation" in total.reason and "h=" in total.reason
