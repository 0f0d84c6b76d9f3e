"""The dp proofs' traces and the prover on the dp level.

``densegate prove`` proves D1-D12 for all parameters and any rank count
(``tests/test_proof_registry.py`` reads its run); here every refuting trace of that
run is shown to be a real run of its mutant that the implementation, replayed on
it, does not follow, and the prover fails on a wrong or leaky spec.
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from typing import Any

import pytest

import densegate.proofs.queries as queries
from densegate.impl.dp_gate import AlignedGate, AlignedGateConfig, ReducedObservation
from densegate.impl.gate import GateConfig, GateInput, PrefillGate, Reason
from densegate.proofs.dp_obligations import DP_MUTANTS, DP_OBLIGATIONS
from densegate.proofs.dp_paced import PACED_OBLIGATIONS
from densegate.proofs.obligation import Obligation
from densegate.proofs.prover import prove
from densegate.spec.dp_gate import DP, DpMachine
from densegate.spec.dp_products import one_rank, pair
from densegate.spec.machine import Machine, evaluate
from tests.support.prove_run import prove_run

Row = dict[str, Any]

GATE_OBLIGATIONS = [*DP_OBLIGATIONS, *(o for o in PACED_OBLIGATIONS if o.machine is DP)]
"""Every D obligation whose machine is the gate (or its products): D1-D10."""


@pytest.fixture(scope="session")
def proved() -> dict[str, dict[str, Any]]:
    return prove_run().by_id


def _ob(id: str) -> Obligation:
    return next(o for o in DP_OBLIGATIONS if o.id == id)


def test_d_obligations_are_for_all_parameters_and_any_rank_count(
    proved: dict[str, dict[str, Any]],
) -> None:
    for ob in [*DP_OBLIGATIONS, *PACED_OBLIGATIONS]:
        o = proved[ob.id]
        assert o["parametric"] is True and o["bound"] is None and o["scope"] is None, ob.id
        # N is a symbolic parameter of every single-rank and two-rank machine, not a constant
        if ob.id not in ("D6", "D12"):  # D12: the cap rule, no gate
            assert "N" in ob.machine.param_sorts, ob.id


def test_triggers_are_the_implications_antecedents(proved: dict[str, dict[str, Any]]) -> None:
    d3 = [t["condition"] for t in proved["D3"]["triggers"]]
    assert d3 == ["And(W@0 > 0, Or(D@0 == 0, Nd@0 > 0))", "reason@0 == NO_DECODE"]


# -- replaying traces ----------------------------------------------------------------------


def _replay(
    machine: Machine, params: dict[str, Any], rows: list[Row], own_run: bool = True
) -> list[tuple[dict[str, Any], dict[str, Any]] | None]:
    """Run the trace's observations through ``machine`` from its initial state.

    Every machine here starts with all state zero (its ``init``). With
    ``own_run`` the trace must be this machine's run: it starts there and each
    row's state is the previous row's next state.
    """
    state = {k: 0 for k in machine.state_sorts}
    out: list[tuple[dict[str, Any], dict[str, Any]] | None] = []
    for row in rows:
        if own_run:
            assert {k: row[k] for k in state} == state, "trace is not a run from init"
        obs = {k: row[k] for k in machine.obs_sorts}
        try:
            _, o, nxt = evaluate(machine, params, state, obs)
        except ValueError:  # no command or several: the mutant has no single answer
            out.append(None)
            break
        out.append((o, nxt))
        state = nxt
    return out


def _mutant_machines(ob: Obligation) -> dict[str, Machine]:
    return {m.name: m.machine for m in ob.mutants}


def test_mutant_traces_are_real_runs_of_the_mutant(proved: dict[str, dict[str, Any]]) -> None:
    """D1-D10 (D11 and D12, whose machines start elsewhere: tests/test_paced_gate.py)."""
    for ob in GATE_OBLIGATIONS:
        machines = _mutant_machines(ob)
        for m in proved[ob.id]["mutants"]:
            replay = _replay(machines[m["name"]], m["params"], m["trace"])
            for row, got in zip(m["trace"], replay, strict=False):
                if got is None or any(row.get(k) is None for k in got[0]):
                    continue
                o, nxt = got
                assert {k: row[k] for k in o} == o, (ob.id, m["name"], row)
                assert {k: row[f"next_{k}"] for k in nxt} == nxt, (ob.id, m["name"], row)


def _aligned(params: dict[str, Any]) -> AlignedGate:
    cfg = AlignedGateConfig(
        dense_tokens=params["B"],
        max_hold_passes=params["K"],
        enabled=params["enabled"],
        target_fill=Fraction(params["T"], params["B"]),
        stall_ticks=params["S"],
        kv_pressure_valve=params["kv"],
        align_ticks=params["A"] if params["al"] else None,
        pace_tokens=params["Cp"] if params["pc"] else None,
        surge_tokens=params["Cs"] if params["pc"] else None,
        busy_decodes=params["Db"] if params.get("bz") else None,
    )
    assert cfg.fill_tokens == params["T"]
    return AlignedGate(cfg, params["N"])


def _impl_run(params: dict[str, Any], rows: list[dict[str, Any]]) -> list[tuple[str, int, Any]]:
    """AlignedGate on the trace's reduced vectors: (reason, cap, whole state) per tick, the
    cap 0 for none as the spec writes it."""
    gate = _aligned(params)
    out = []
    for row in rows:
        vec = [params["N"], *(row[k] for k in ("W", "F", "D", "P", "C", "Fl", "Nd", "Va"))]
        dec = gate.decide(ReducedObservation.from_sum(vec, params["N"]), row["t"])
        out.append((dec.reason.name, dec.cap or 0, tuple(gate.state)))
    return out


def _h(run: list[tuple[str, int, Any]]) -> list[tuple[str, int, int]]:
    return [(reason, cap, state[0]) for reason, cap, state in run]


def test_mutant_traces_separate_mutant_from_implementation(
    proved: dict[str, dict[str, Any]],
) -> None:
    """Replayed on AlignedGate (and PrefillGate for D6), every refuting trace makes the
    implementation and the mutant disagree, while the spec agrees with the implementation."""
    for ob in GATE_OBLIGATIONS:
        machines = _mutant_machines(ob)
        for m in proved[ob.id]["mutants"]:
            name, p, rows = m["name"], m["params"], m["trace"]
            mutant = _replay(machines[name], p, rows)
            n = len(mutant)
            if ob.id == "D6":  # the one-rank product: PrefillGate and AlignedGate(N=1)
                single = PrefillGate(GateConfig(p["B"], p["K"], p["enabled"]))
                wide = {**p, "N": 1, "T": p["B"], "S": 0, "kv": False, "al": False, "pc": False}
                aligned = [
                    {
                        "W": int(r["w"] > 0),
                        "F": min(r["w"], p["B"]),
                        "D": r["d"],
                        "Fl": int(r["w"] >= p["B"]),
                        "Nd": int(r["w"] > 0 and r["d"] == 0),
                        "Va": int(r["w"] == 0 and r["d"] == 0),
                        **r,
                    }
                    for r in rows[:n]
                ]
                impl = _h(_impl_run(wide, aligned))
                for r, (reason, cap, h) in zip(rows[:n], impl, strict=True):
                    dec = single.decide(GateInput(r["w"], r["d"]))
                    assert (dec.reason.name, single.hold_passes, cap) == (reason, h, 0)
                want: list[Any] = [
                    (o["dp_reason"], o["dp_cap"], nxt["dp_h"]) if o else None
                    for o, nxt in _pairs(mutant)
                ]
            elif ob.id == "D1":  # two ranks: the implementation is one answer for both
                run: list[Any] = _impl_run(p, rows[:n])
                copies = [
                    [
                        (o[f"reason{i}"], o[f"cap{i}"], (nxt[f"h{i}"], nxt[f"q{i}"], nxt[f"g{i}"]))
                        if o
                        else None
                        for o, nxt in _pairs(mutant)
                    ]
                    for i in (1, 2)
                ]
                assert run != copies[0] or run != copies[1], (ob.id, name)
                assert copies[0] != copies[1], (ob.id, name)
                continue
            else:
                impl = _h(_impl_run(p, rows[:n]))
                want = [
                    (o["reason"], o["cap"], nxt["h"]) if o else None for o, nxt in _pairs(mutant)
                ]
                spec = [
                    (o["reason"], o["cap"], nxt["h"])
                    for o, nxt in _pairs(_replay(DP, p, rows, own_run=False))
                ]
                assert spec[:n] == impl, (ob.id, name)
            assert impl != want, (ob.id, name)


def _pairs(
    replay: list[tuple[dict[str, Any], dict[str, Any]] | None],
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [(got[0], got[1]) if got else ({}, {}) for got in replay]


# -- the original's two budgets, concretely ---------------------------------------------


def test_two_budgets_hold_their_sum_the_aligned_gate_one_budget() -> None:
    """Flaw 4 with the original's K = 30: the composed mutant holds 2K - 2 = 58 ticks in a
    row; the aligned gate (spec and implementation) holds K - 1 = 29, then BUDGET."""
    K, B, N = 30, 100, 2
    params = {"B": B, "K": K, "N": N, "T": B, "S": 0, "kv": False, "enabled": True}
    params |= {"al": False, "A": 0, "pc": False, "Cp": 1, "Cs": 1, "cmin": 1, "cmax": 1}
    params |= {"bz": False, "Db": 1}
    obs = {"W": 2, "F": 10, "D": 4, "P": 0, "C": 0, "Fl": 0, "Nd": 0, "Va": 0}
    obs |= {"lw": 1, "lf": 5, "ld": 2, "lp": 0, "lfl": 0, "lnd": 0, "lva": 0}

    def holds(machine: DpMachine) -> int:
        state = {k: 0 for k in machine.state_sorts}
        for tick in range(4 * K):
            _, out, state = evaluate(machine, params, state, obs | {"t": tick, "clock": tick})
            if out["fire"]:
                assert out["reason"] == "BUDGET"
                return tick
        raise AssertionError("never fired")

    two = DP_MUTANTS["two_budgets"].machine
    assert isinstance(two, DpMachine)
    assert holds(two) == 2 * K - 2
    assert holds(DP) == K - 1
    gate = AlignedGate(AlignedGateConfig(B, K), N)
    reduced = ReducedObservation(N, 2, 10, 4)
    reasons = [gate.decide(reduced, t).reason for t in range(K)]
    assert reasons == [Reason.HOLD] * (K - 1) + [Reason.BUDGET]


def test_two_budgets_trace_shows_one_budget_spent_and_another_started(
    proved: dict[str, dict[str, Any]],
) -> None:
    (m,) = [m for m in proved["D2"]["mutants"] if m["name"] == "two_budgets"]
    K, rows = m["params"]["K"], m["trace"]
    assert K >= 3 and len(rows) == K  # K held ticks: one more than the budget allows
    assert all(r["fire"] is False for r in rows)
    assert rows[-1]["next_age"] == K
    assert max(r["next_x"] for r in rows) == K - 1  # the delayer's budget ran out ...
    assert rows[-1]["next_h"] >= 1  # ... and the gate started counting its own


# -- the prover on the dp level ------------------------------------------------------------


def test_resource_out_is_unknown_not_proved(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(queries, "RLIMIT", 1)
    r = prove(dataclasses.replace(_ob("D1"), mutants=[]))
    assert r.status == "unknown" and not r.ok
    assert any("limit" in c.reason or "canceled" in c.reason for c in r.checks), r.checks


def test_leaky_spec_fails_agreement_with_counterexample() -> None:
    leaky = DP_MUTANTS["local_dense"].machine
    assert isinstance(leaky, DpMachine)
    r = prove(dataclasses.replace(_ob("D1"), machine=pair(leaky)))
    assert r.status == "failed" and not r.ok
    assert r.trace is not None
    last = r.trace.rows[-1]
    assert (last["fire1"], last["reason1"]) != (last["fire2"], last["reason2"])


def test_wrong_refinement_fails_with_counterexample() -> None:
    eager = DP_MUTANTS["stall_zero_not_off"].machine
    assert isinstance(eager, DpMachine)
    r = prove(dataclasses.replace(_ob("D6"), machine=one_rank(eager)))
    assert r.status == "failed" and r.trace is not None
    assert r.trace.rows[-1]["reason"] != r.trace.rows[-1]["dp_reason"]
