"""Scheduler-level proofs: S3-S5, S7 and S9 for any number of requests, the others for all
parameters at their fixed slot counts; premises and triggers satisfiable, one command per
state; each mutant refuted by a real run of the mutant."""

from __future__ import annotations

from typing import Any

import pytest

from densegate.proofs.prover import ObligationResult, prove
from densegate.proofs.scheduler_obligations import (
    BLOCK_SIZE,
    SCHEDULER_OBLIGATIONS,
    SLOTS,
    TTFT_SLOTS,
)
from densegate.spec.machine import Machine, evaluate
from densegate.spec.scheduler import SchedulerMachine
from tests.scheduler_lockstep import replay


@pytest.fixture(scope="module")
def results() -> dict[str, ObligationResult]:
    return {ob.id: prove(ob) for ob in SCHEDULER_OBLIGATIONS}


ANY_R = {"S3", "S4", "S5", "S7", "S9"}
"""Proved of the summary and the scans: no slot count, no block size."""
SCANS = {"S7", "S9"}
"""Claims about one fold alone: parametric outright. S3-S5 are claims about the scheduler
through the scans, whose per-request givens are proved at 4 slots: their scope says so."""


def test_s1_to_s9_proved_with_their_exact_scope(results: dict[str, ObligationResult]) -> None:
    assert sorted(results) == [f"S{i}" for i in range(1, 10)]
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
                assert r.scope.startswith("any number of requests"), r.scope
                assert "proved at 4 requests" in r.scope and "argued beyond" in r.scope
            continue
        # the slot count is fixed, so the result must not claim to be parametric
        assert not r.parametric
        slots = TTFT_SLOTS if r.id == "S6" else SLOTS
        assert r.scope is not None and r.scope.startswith(f"{slots} requests"), r.scope
        assert f"block size {BLOCK_SIZE}" in r.scope


def test_premises_and_triggers_satisfiable_and_one_command_enabled(
    results: dict[str, ObligationResult],
) -> None:
    for r in results.values():
        by = {c.name: c.status for c in r.sanity}
        assert by.pop("premise") == "sat", r.id
        assert by.pop("exactly one command") == "unsat", r.id
        assert set(by.values()) == ({"sat"} if r.id != "S2" else set()), (r.id, by)
    assert any(c.name == "lemma 1" and c.status == "unsat" for c in results["S6"].checks)


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


def test_the_tables_name_the_slot_count_s6_is_proved_for() -> None:
    from densegate.impl.traces.replay import S6_SCOPE

    assert f"{TTFT_SLOTS} requests" == S6_SCOPE
