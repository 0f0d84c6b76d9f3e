"""The gate proofs' traces and the prover's machinery on the gate.

``densegate prove`` proves P1-P7 (``tests/test_proof_registry.py`` reads its run);
here each refuting trace of that run is replayed on its mutant, on the spec and on
``PrefillGate``, and the prover is shown to fail where it should: a resource limit,
a wrong spec, a surviving mutant, a contradictory premise, an unreachable trigger.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import z3

import densegate.proofs.queries as queries
from densegate.cli.main import main
from densegate.impl import GateConfig, GateInput, PrefillGate
from densegate.proofs.gate_obligations import GATE_MUTANTS, GATE_OBLIGATIONS
from densegate.proofs.obligation import Mutant
from densegate.proofs.prover import prove
from densegate.proofs.registry import level
from densegate.spec.gate import GATE, GateMachine
from densegate.spec.machine import Machine, evaluate
from tests.support.prove_run import prove_run
from tests.support.toy_obligations import TOY_OBLIGATIONS

P_IDS = [ob.id for ob in GATE_OBLIGATIONS]


@pytest.fixture(scope="session")
def proved() -> dict[str, dict[str, Any]]:
    return prove_run().by_id


def _mutants(proved: dict[str, dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """(obligation id, mutant) for every mutant of P1-P7 in the run."""
    return [(i, m) for i in P_IDS for m in proved[i]["mutants"]]


def test_p_obligations_are_parametric_and_traces_show_the_gate(
    proved: dict[str, dict[str, Any]],
) -> None:
    assert set(P_IDS) <= set(level("gate").ids)
    for i in P_IDS:
        o = proved[i]
        assert o["parametric"] is True and o["bound"] is None and o["scope"] is None, i
        assert o["scope_statement"] == "all parameters"
    for _, m in _mutants(proved):
        assert {"w", "d", "h", "fire", "reason"} <= set(m["trace"][0]), m["name"]


def _replay(
    machine: Machine, params: dict[str, Any], rows: list[dict[str, Any]], own_run: bool = True
) -> list[tuple[str, int] | None]:
    """Re-run a trace's observations through a machine; return (reason, next h) per pass.

    With ``own_run`` the trace must be this machine's run from the initial state.
    """
    h, out = 0, []
    for row in rows:
        assert not own_run or row["h"] == h, "trace is not a run from the initial state"
        try:
            _, o, nxt = evaluate(machine, params, {"h": h}, {"w": row["w"], "d": row["d"]})
        except ValueError:  # no command or several: the mutant has no single answer
            out.append(None)
            break
        out.append((o["reason"], nxt["h"]))
        h = nxt["h"]
    return out


def test_mutant_traces_are_real_runs_of_the_mutant(proved: dict[str, dict[str, Any]]) -> None:
    for ob_id, m in _mutants(proved):
        replay = _replay(GATE_MUTANTS[m["name"]].machine, m["params"], m["trace"])
        for row, got in zip(m["trace"], replay, strict=False):
            if got is not None and row.get("reason") is not None:
                assert (row["reason"], row["next_h"]) == got, (ob_id, m["name"], row)


def test_mutant_traces_separate_mutant_from_implementation(
    proved: dict[str, dict[str, Any]],
) -> None:
    """Replayed on PrefillGate, every refuting trace makes impl and mutant disagree."""
    for ob_id, m in _mutants(proved):
        p, rows = m["params"], m["trace"]
        gate = PrefillGate(GateConfig(p["B"], p["K"], p["enabled"]))
        mutant = _replay(GATE_MUTANTS[m["name"]].machine, p, rows)
        impl: list[tuple[str, int] | None] = []
        for row in rows[: len(mutant)]:
            dec = gate.decide(GateInput(row["w"], row["d"]))
            impl.append((dec.reason.name, gate.hold_passes))
        assert impl != mutant, (ob_id, m["name"])
        assert _replay(GATE, p, rows, own_run=False)[: len(impl)] == impl


def test_resource_out_is_unknown_not_proved(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(queries, "RLIMIT", 1)
    r = prove(GATE_OBLIGATIONS[2])
    assert r.status == "unknown" and not r.ok
    assert any("limit" in c.reason or "canceled" in c.reason for c in r.checks), r.checks


def test_wrong_spec_fails_with_counterexample() -> None:
    ob = dataclasses.replace(GATE_OBLIGATIONS[3], machine=GATE_MUTANTS["dense_strict"].machine)
    r = prove(ob)
    assert r.status == "failed" and not r.ok
    assert r.trace is not None and r.trace.rows[-1]["w"] >= r.trace.params["B"]
    assert r.trace.rows[-1]["fire"] is False


def test_surviving_mutant_fails_the_run() -> None:
    harmless = Mutant("identity", "the spec itself", GATE)
    ob = dataclasses.replace(TOY_OBLIGATIONS[0], mutants=[harmless])
    r = prove(ob)
    assert r.status == "proved" and r.mutants[0].status == "survived" and not r.ok


def test_cli_exits_nonzero_when_something_is_not_proved(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(queries, "RLIMIT", 1)
    assert main(["prove", "--only", "P3"]) == 1
    assert "NOT all proved" in capsys.readouterr().out


def test_cli_rejects_unknown_ids(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["prove", "--only", "P9"]) == 2
    assert "unknown obligation id 'P9'" in capsys.readouterr().err


def test_a_trigger_is_its_implications_antecedent(proved: dict[str, dict[str, Any]]) -> None:
    # P2's trigger is the antecedent of its implication, w > 0 and d = 0
    assert [t["condition"] for t in proved["P2"]["triggers"]] == ["And(w@0 > 0, d@0 == 0)"]


class _Contradictory(GateMachine):
    """A planted contradictory assumption: the parameters demand B < 1 besides B >= 1."""

    def param_ok(self, p):  # type: ignore[no-untyped-def]
        return z3.And(super().param_ok(p), p["B"] < 1)


def test_contradictory_assumption_is_rejected_as_vacuous() -> None:
    p4 = next(o for o in GATE_OBLIGATIONS if o.id == "P4")
    r = prove(dataclasses.replace(p4, machine=_Contradictory(), mutants=[]))
    assert [c.status for c in r.checks] == ["unsat"] * 3  # induction alone would say proved
    assert r.status == "vacuous" and not r.ok
    assert next(c for c in r.sanity if c.name == "premise").status == "unsat"


def test_unreachable_trigger_is_rejected_as_vacuous() -> None:
    p4 = next(o for o in GATE_OBLIGATIONS if o.id == "P4")

    def never_fires_on_negative_d(st):  # type: ignore[no-untyped-def]
        return z3.Implies(z3.And(st.o["w"] >= st.p["B"], st.o["d"] < 0), z3.Not(st.out["fire"]))

    r = prove(dataclasses.replace(p4, prop=never_fires_on_negative_d, mutants=[]))
    assert r.checks[-1].status == "unsat"  # holds, but only because d < 0 never happens
    assert r.status == "vacuous" and not r.ok


def test_an_obligations_solver_options_reach_z3() -> None:
    """``solver_options`` are set on every query's solver: a name z3 does not know fails
    (when the solver runs), a known one runs."""
    with pytest.raises(z3.Z3Exception, match="no_such_option"):
        queries.solver({"smt.no_such_option": 1}).check()
    assert queries.solver({"smt.arith.solver": 2}).check() == z3.sat
