"""Scheduler-level proofs: all but S8 for any number of requests, S8 for all parameters at
its fixed slot count; premises and triggers satisfiable, one command per state; each mutant
refuted by a real run of the mutant."""

from __future__ import annotations

from typing import Any

import pytest

from densegate.proofs.prover import ObligationResult, prove
from densegate.proofs.scheduler_obligations import (
    BLOCK_SIZE,
    SCHEDULER_OBLIGATIONS,
    SLOTS,
)
from densegate.spec.machine import Machine, evaluate
from densegate.spec.scheduler import SchedulerMachine
from tests.support.scheduler_lockstep import replay


@pytest.fixture(scope="module")
def results() -> dict[str, ObligationResult]:
    return {ob.id: prove(ob) for ob in SCHEDULER_OBLIGATIONS}


ANY_R = {"S1", "S2", "S3", "S4", "S5", "S6", "S7", "S9", "S10", "S11"}
"""Proved of machines without request slots (ledger, summary, TTFT window, scans, one
request's life)."""
SCANS = {"S7", "S9"}
"""Claims about one fold alone, with no block size: parametric outright. The others rest on
S10 and S11, proved at block size 2: their scope says so."""


def test_s1_to_s11_proved_with_their_exact_scope(results: dict[str, ObligationResult]) -> None:
    assert sorted(results, key=lambda i: int(i[1:])) == [f"S{i}" for i in range(1, 12)]
    for r in results.values():
        assert r.status == "proved", (r.id, r.checks, r.sanity)
        assert {c.status for c in r.checks} == {"unsat"}
        assert r.bound is None
        if r.id in ANY_R:
            # no request slots in these machines, and the statement says so
            assert "any number of" in r.statement or "any length" in r.statement
            assert not isinstance(_ob(r.id).machine, SchedulerMachine)
            if r.id in SCANS:
                assert r.parametric and r.scope is None, r.id
            else:
                assert not r.parametric and r.scope is not None, r.id
                assert r.scope.startswith(f"any number of requests, block size {BLOCK_SIZE}")
                assert "argued" not in r.scope and f"{SLOTS} requests" not in r.scope, r.scope
            continue
        # the slot count is fixed, so the result must not claim to be parametric
        assert not r.parametric and r.id == "S8"
        assert r.scope is not None and r.scope.startswith(f"{SLOTS} requests"), r.scope
        assert f"block size {BLOCK_SIZE}" in r.scope


def test_premises_and_triggers_satisfiable_and_one_command_enabled(
    results: dict[str, ObligationResult],
) -> None:
    for r in results.values():
        by = {c.name: c.status for c in r.sanity}
        assert by.pop("premise") == "sat", r.id
        assert by.pop("exactly one command") == "unsat", r.id
        assert by and set(by.values()) == {"sat"}, (r.id, by)
    lemmas = {c.name: c.status for c in results["S6"].checks if c.name.startswith("lemma")}
    assert lemmas == {"lemma 1": "unsat", "lemma 2": "unsat"}


def test_every_scheduler_mutant_refuted_with_a_trace(results: dict[str, ObligationResult]) -> None:
    for r in results.values():
        assert r.mutants
        for m in r.mutants:
            assert m.status == "refuted", (r.id, m.name, m.reason)
            assert m.trace is not None and m.trace.rows and m.trace.display


def _obs(row: dict[str, Any], machine: Machine) -> dict[str, Any]:
    return {k: row[k] for k in machine.obs_sorts}


def _ob(ob_id: str):  # type: ignore[no-untyped-def]
    return next(o for o in SCHEDULER_OBLIGATIONS if o.id == ob_id)


def _state(row: dict[str, Any], ob_id: str) -> dict[str, Any]:
    return {k: row[k] for k in _ob(ob_id).machine.state_sorts}


def _machine(ob_id: str, name: str) -> Machine:
    return next(m.machine for m in _ob(ob_id).mutants if m.name == name)


def test_mutant_traces_are_runs_of_the_mutant(results: dict[str, ObligationResult]) -> None:
    for r in results.values():
        for m in r.mutants:
            machine = _machine(r.id, m.name)
            state = _state(m.trace.rows[0], r.id)
            for row in m.trace.rows:
                assert _state(row, r.id) == state, "trace is not a run from the initial state"
                outs = [k for k in machine.out_sorts if row.get(k) is not None]
                if not outs:
                    break
                _, out, nxt = evaluate(machine, m.trace.params, state, _obs(row, machine))
                assert all(out[k] == row[k] for k in outs), (r.id, m.name, row)
                state = nxt


def test_implementation_agrees_with_spec_and_not_with_mutants(
    results: dict[str, ObligationResult],
) -> None:
    """Replayed on the real Scheduler, each refuting trace matches the spec machine
    pass by pass and differs from the mutant somewhere."""
    for r in results.values():
        if r.id in ANY_R:
            continue
        for m in r.mutants:
            rows = [row for row in m.trace.rows if row.get("fire") is not None]
            if not rows:
                continue
            impl = replay(m.trace.params, BLOCK_SIZE, rows)
            spec = _ob(r.id).machine
            state = _state(rows[0], r.id)
            differs = False
            for row, got in zip(rows, impl, strict=True):
                _, out, nxt = evaluate(spec, m.trace.params, state, _obs(row, spec))
                for key in ("fire", "reason", "prefill_tokens", "decode_seqs", "preempted", "w"):
                    assert got[key] == out[key], (r.id, m.name, key)
                assert all(got[f"next_{k}"] == v for k, v in nxt.items()), (r.id, m.name)
                differs |= any(got[k] != row[k] for k in got if k in row)
                state = nxt
            assert differs, (r.id, m.name)


def test_the_tables_name_the_scope_s6_is_proved_for(
    results: dict[str, ObligationResult],
) -> None:
    from densegate.impl.traces.replay import S6_SCOPE

    scope = results["S6"].scope
    assert scope is not None and scope.startswith(S6_SCOPE + ":"), (scope, S6_SCOPE)


@pytest.mark.parametrize("block_size", [1, 16])
def test_request_life_and_decode_scan_hold_at_other_block_sizes(block_size: int) -> None:
    """S10 and S11 (and so S1-S5) are reported at block size 2; they hold at 1 and 16 too."""
    from densegate.proofs.decode_scan_obligations import decode_obligation
    from densegate.proofs.scheduler_life_obligations import life_obligation

    for ob in (life_obligation(block_size), decode_obligation(block_size)):
        r = prove(ob)
        assert r.ok, (ob.id, block_size, r.checks, [(m.name, m.status) for m in r.mutants])
        assert r.scope == f"any number of requests, block size {block_size}"


def test_the_per_slot_machine_changes_requests_only_through_the_one_request_functions() -> None:
    """S10's claim for any number of requests rests on the per-slot machine building each
    request's change from ``spec/scheduler_request.py``: no slot field is assigned in the
    machine's pass except through those functions' results."""
    import ast
    import inspect
    import textwrap

    import densegate.spec.scheduler as sched

    methods = [sched.SchedulerMachine._plan, sched.SchedulerMachine._commit]
    trees = [ast.parse(textwrap.dedent(inspect.getsource(f))) for f in methods]
    for node in (n for tree in trees for n in ast.walk(tree)):
        if isinstance(node, ast.Assign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for sub in ast.walk(t):
                    if isinstance(sub, ast.Subscript) and isinstance(sub.value, ast.Name):
                        # the request list, the chunk list, and the output dictionaries
                        assert sub.value.id in {"reqs", "chunk", "outs", "nxt"}, ast.unparse(node)


def test_s8_window_check_refutes_a_fact_the_scheduler_breaks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The per-slot check of the TTFT window's facts can fail: claiming that owed prefill
    ahead drops by exactly what a fire runs is refuted (a re-admitted request's last
    token is left to its decode), so S8's window clause is not vacuous."""
    from dataclasses import replace

    import z3

    from densegate.proofs import ttft_cover
    from densegate.spec import ttft_window

    real = ttft_window.window_facts

    def exact(p, s, o, fire, progress, admit):  # type: ignore[no-untyped-def]
        return z3.And(real(p, s, o, fire, progress, admit), o["oa2"] == s["oa"] - o["runa"])

    monkeypatch.setattr(ttft_window, "window_facts", exact)
    # (trace_depth 1: the induction check is the claim here; a reachable trace is
    # 8+ passes deep and its search would cost a minute)
    ob = replace(_ob("S8"), prop=ttft_cover.meets_window, mutants=(), triggers=[], trace_depth=1)
    r = prove(ob)
    assert r.status == "failed", r.checks
    assert [c.status for c in r.checks if c.name == "property"] == ["sat"]
