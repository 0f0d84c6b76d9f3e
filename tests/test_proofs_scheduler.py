"""Scheduler-level proofs: S1-S5 proved for all parameters; each mutant refuted by a real run."""

from __future__ import annotations

from typing import Any

import pytest

from densegate.proofs.prover import ObligationResult, prove
from densegate.proofs.scheduler_obligations import (
    BLOCK_SIZE,
    SCHEDULER,
    SCHEDULER_OBLIGATIONS,
)
from densegate.spec.machine import Machine, evaluate
from tests.scheduler_lockstep import replay


@pytest.fixture(scope="module")
def results() -> dict[str, ObligationResult]:
    return {ob.id: prove(ob) for ob in SCHEDULER_OBLIGATIONS}


def test_s1_to_s5_proved_for_all_parameters(results: dict[str, ObligationResult]) -> None:
    assert sorted(results) == [f"S{i}" for i in range(1, 6)]
    for r in results.values():
        assert r.status == "proved", (r.id, r.checks)
        assert r.parametric and r.bound is None and r.scope
        assert {c.status for c in r.checks} == {"unsat"}


def test_every_scheduler_mutant_refuted_with_a_trace(results: dict[str, ObligationResult]) -> None:
    for r in results.values():
        assert r.mutants
        for m in r.mutants:
            assert m.status == "refuted", (r.id, m.name, m.reason)
            assert m.trace is not None and m.trace.rows and m.trace.display


def _obs(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k.startswith(("arrive", "abort"))}


def _state(row: dict[str, Any]) -> dict[str, Any]:
    keys = [k for k in SCHEDULER.state_sorts]
    return {k: row[k] for k in keys}


def _machine(ob_id: str, name: str) -> Machine:
    ob = next(o for o in SCHEDULER_OBLIGATIONS if o.id == ob_id)
    return next(m.machine for m in ob.mutants if m.name == name)


def test_mutant_traces_are_runs_of_the_mutant(results: dict[str, ObligationResult]) -> None:
    for r in results.values():
        for m in r.mutants:
            machine = _machine(r.id, m.name)
            state = _state(m.trace.rows[0])
            for row in m.trace.rows:
                assert _state(row) == state, "trace is not a run from the initial state"
                if row.get("fire") is None:
                    break
                _, out, nxt = evaluate(machine, m.trace.params, state, _obs(row))
                assert out["reason"] == row["reason"] and out["fire"] == row["fire"]
                state = nxt


def test_implementation_agrees_with_spec_and_not_with_mutants(
    results: dict[str, ObligationResult],
) -> None:
    """Replayed on the real Scheduler, each refuting trace matches the spec machine
    pass by pass and differs from the mutant somewhere."""
    for r in results.values():
        for m in r.mutants:
            rows = [row for row in m.trace.rows if row.get("fire") is not None]
            if not rows:
                continue
            impl = replay(m.trace.params, BLOCK_SIZE, rows)
            state = _state(rows[0])
            differs = False
            for row, got in zip(rows, impl, strict=True):
                _, out, nxt = evaluate(SCHEDULER, m.trace.params, state, _obs(row))
                for key in ("fire", "reason", "prefill_tokens", "decode_seqs", "preempted"):
                    assert got[key] == out[key], (r.id, m.name, key)
                assert all(got[f"next_{k}"] == v for k, v in nxt.items()), (r.id, m.name)
                differs |= any(got[k] != row[k] for k in got if k in row)
                state = nxt
            assert differs, (r.id, m.name)
