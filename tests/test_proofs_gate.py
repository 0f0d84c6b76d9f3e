"""The gate proofs: P1-P7 proved for all parameters; every mutant refuted by a real trace."""

from __future__ import annotations

import dataclasses
import json

import pytest
import z3

import densegate.proofs.prover as prover
from densegate.cli.main import main
from densegate.impl import GateConfig, GateInput, PrefillGate
from densegate.proofs.gate_mutants import GATE_MUTANTS
from densegate.proofs.gate_obligations import GATE_OBLIGATIONS
from densegate.proofs.prover import Mutant, ObligationResult, prove
from densegate.spec.gate import GATE, GateMachine
from densegate.spec.machine import evaluate


@pytest.fixture(scope="module")
def results() -> dict[str, ObligationResult]:
    return {ob.id: prove(ob) for ob in GATE_OBLIGATIONS}


def test_p1_to_p7_proved_for_all_parameters(results: dict[str, ObligationResult]) -> None:
    assert sorted(results) == [f"P{i}" for i in range(1, 8)]
    for r in results.values():
        assert r.status == "proved", (r.id, r.checks)
        assert r.parametric and r.bound is None
        assert [c.status for c in r.checks] == ["unsat"] * 3


def test_every_obligation_has_a_refuted_mutant(results: dict[str, ObligationResult]) -> None:
    for r in results.values():
        assert r.mutants, r.id
        for m in r.mutants:
            assert m.status == "refuted", (r.id, m.name, m.reason)
            assert m.trace is not None and m.trace.rows


def test_every_gate_mutant_is_used() -> None:
    used = {m.name for ob in GATE_OBLIGATIONS for m in ob.mutants}
    assert used == set(GATE_MUTANTS)


def _replay(machine, trace, own_run=True):  # type: ignore[no-untyped-def]
    """Re-run a trace's observations through a machine; return (reason, next h) per pass.

    With ``own_run`` the trace must be this machine's run from the initial state.
    """
    h, out = 0, []
    for row in trace.rows:
        assert not own_run or row["h"] == h, "trace is not a run from the initial state"
        try:
            _, o, nxt = evaluate(machine, trace.params, {"h": h}, {"w": row["w"], "d": row["d"]})
        except ValueError:  # no command or several: the mutant has no single answer
            out.append(None)
            break
        out.append((o["reason"], nxt["h"]))
        h = nxt["h"]
    return out


def test_mutant_traces_are_real_runs_of_the_mutant(results: dict[str, ObligationResult]) -> None:
    for r in results.values():
        for m in r.mutants:
            replay = _replay(GATE_MUTANTS[m.name].machine, m.trace)
            for row, got in zip(m.trace.rows, replay, strict=False):
                if got is not None and row.get("reason") is not None:
                    assert (row["reason"], row["next_h"]) == got, (r.id, m.name, row)


def test_mutant_traces_separate_mutant_from_implementation(
    results: dict[str, ObligationResult],
) -> None:
    """Replayed on PrefillGate, every refuting trace makes impl and mutant disagree."""
    for r in results.values():
        for m in r.mutants:
            p = m.trace.params
            gate = PrefillGate(GateConfig(p["B"], p["K"], p["enabled"]))
            mutant = _replay(GATE_MUTANTS[m.name].machine, m.trace)
            impl = []
            for row in m.trace.rows[: len(mutant)]:
                dec = gate.decide(GateInput(row["w"], row["d"]))
                impl.append((dec.reason.name, gate.hold_passes))
            assert impl != mutant, (r.id, m.name)
            assert _replay(GATE, m.trace, own_run=False)[: len(impl)] == impl


def test_resource_out_is_unknown_not_proved(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prover, "RLIMIT", 1)
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
    ob = dataclasses.replace(GATE_OBLIGATIONS[0], mutants=[harmless])
    r = prove(ob)
    assert r.status == "proved" and r.mutants[0].status == "survived" and not r.ok


def test_cli_json_is_one_object(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["prove", "--json", "--level", "gate"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) == {"obligations", "seconds"}
    ids = [o["id"] for o in doc["obligations"]]
    assert ids == [f"P{i}" for i in range(1, 8)] + ["V1", "V2", "V3", "V4"]  # V: the STALL valve
    for o in doc["obligations"]:
        assert o["level"] == "gate" and o["status"] == "proved"
        assert o["parametric"] is True and o["bound"] is None
        assert isinstance(o["seconds"], float)
        assert o["premise_satisfiable"] is True and o["exactly_one_command"] is True
        assert all(t["reachable"] for t in o["triggers"]), o["id"]
        for m in o["mutants"]:
            assert m["status"] == "refuted" and m["trace"]
            assert {"w", "d", "h", "fire", "reason"} <= set(m["trace"][0])


def test_cli_exits_nonzero_when_something_is_not_proved(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(prover, "RLIMIT", 1)
    assert main(["prove", "--only", "P3"]) == 1
    assert "NOT all proved" in capsys.readouterr().out


def test_cli_rejects_unknown_ids() -> None:
    with pytest.raises(SystemExit, match="P9"):
        main(["prove", "--only", "P9"])


def test_every_premise_and_trigger_is_satisfiable_and_one_command_enabled(
    results: dict[str, ObligationResult],
) -> None:
    for r in results.values():
        by = {c.name: c.status for c in r.sanity}
        assert by.pop("premise") == "sat" and by.pop("exactly one command") == "unsat", r.id
        assert set(by.values()) <= {"sat"}, (r.id, by)
    # P2's trigger is the antecedent of its implication, w > 0 and d = 0
    p2 = [c.reason for c in results["P2"].sanity if c.name.startswith("trigger")]
    assert p2 == ["And(w@0 > 0, d@0 == 0)"]


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


def test_cli_worker_processes_give_the_same_results(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["prove", "--json", "--level", "gate", "--level", "dp", "--only", "P2,P4,D3"]
    assert main([*args, "--jobs", "1"]) == 0
    one = json.loads(capsys.readouterr().out)["obligations"]
    assert main([*args, "--jobs", "2"]) == 0
    two = json.loads(capsys.readouterr().out)["obligations"]
    assert [o["id"] for o in two] == ["P2", "P4", "D3"]
    for a, b in zip(one, two, strict=True):
        assert (a["status"], a["triggers"], len(a["mutants"])) == (
            b["status"],
            b["triggers"],
            len(b["mutants"]),
        )
        # the mutants ran in a task of their own and came back to their obligation
        assert [(m["name"], m["status"]) for m in a["mutants"]] == [
            (m["name"], m["status"]) for m in b["mutants"]
        ]
        assert all(m["trace"] for m in b["mutants"])


def test_cli_help_names_every_level(capsys: pytest.CaptureFixture[str]) -> None:
    from densegate.proofs.registry import LEVELS

    with pytest.raises(SystemExit):
        main(["prove", "--help"])
    text = "".join(capsys.readouterr().out.split())  # argparse may wrap at a hyphen
    for level in LEVELS:
        assert level in text, level


def test_worker_tasks_cover_every_obligation_and_its_mutants_once() -> None:
    from densegate.cli.prove import _tasks
    from densegate.proofs.registry import LEVELS, obligations

    obs = obligations(None)
    levels = {id(o): lv for lv in LEVELS for o in obligations([lv])}
    tasks = _tasks(obs, levels)
    proved = [i for _, ids, only in tasks if not only for i in ids]
    assert sorted(proved) == sorted(o.id for o in obs)
    refuted = [ids for _, ids, only in tasks if only]
    assert all(len(ids) == 1 for ids in refuted)
    # a model obligation's mutants run on their own; a code obligation's with its proof
    want = sorted(o.id for o in obs if isinstance(o, prover.Obligation) and o.mutants)
    assert sorted(ids[0] for ids in refuted) == want


def test_an_obligations_solver_options_reach_z3() -> None:
    """``solver_options`` are set on every query's solver: a name z3 does not know fails
    (when the solver runs), a known one runs."""
    with pytest.raises(z3.Z3Exception, match="no_such_option"):
        prover._solver({"smt.no_such_option": 1}).check()
    assert prover._solver({"smt.arith.solver": 2}).check() == z3.sat
