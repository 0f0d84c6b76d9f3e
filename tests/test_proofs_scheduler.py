"""Scheduler-level proofs: their scopes, their traces, and the proofs at other scopes.

``densegate prove`` proves S1-S16 (``tests/test_proof_registry.py`` reads its run):
all but S8 and S16 on machines without request slots, for any number of requests
(S1-S6 given facts the folds S11-S15 prove), S8 for all parameters at its fixed slot
count, S16 (the per-slot pass is the folds' run) at its own. Here each result says
exactly that scope, each refuting trace of the run is a real run of its mutant (and,
replayed on the real Scheduler, of the spec, not the mutant), S10-S14 are proved
again at other block sizes, the per-slot pass is read to fold each step over every
slot, and S8's window clause is shown to fail on a fact the scheduler breaks.
"""

from __future__ import annotations

from typing import Any

import pytest

from densegate.proofs.obligation import Obligation
from densegate.proofs.prover import prove
from densegate.proofs.registry import level
from densegate.proofs.scheduler.per_slot import BLOCK_SIZE, SLOTS
from densegate.proofs.scheduler.scopes import (
    LINK_SLOTS,
    NIGHTLY_SLOTS,
    TEST_BLOCK_SIZES,
    TEST_SLOTS,
)
from densegate.spec.machine import Machine, evaluate
from densegate.spec.scheduler import SchedulerMachine
from tests.support.prove_run import prove_run
from tests.support.scheduler_lockstep import replay

SCHEDULER_OBLIGATIONS = [
    ob for ob in level("scheduler").obligations() if isinstance(ob, Obligation)
]


@pytest.fixture(scope="session")
def proved() -> dict[str, dict[str, Any]]:
    return prove_run().by_id


@pytest.fixture(scope="module")
def results(proved: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The run's S1-S16, by id."""
    return {ob.id: proved[ob.id] for ob in SCHEDULER_OBLIGATIONS}


ANY_R = {f"S{i}" for i in range(1, 16)} - {"S8"}
"""Proved of machines without request slots (ledger, summary, TTFT window, scans, folds,
one request's life)."""
SCANS = {"S7", "S9"}
"""Claims about one fold alone, with no block size: parametric outright."""
LINKED = ANY_R - SCANS
"""Parametric in the number of requests, the block size they fix in the scope: S1-S6 on
machines whose facts the folds S11-S15 prove, the folds, and one request's life."""
IDS = [f"S{i}" for i in range(1, 17)]


def test_s1_to_s16_report_their_exact_scope(results: dict[str, dict[str, Any]]) -> None:
    assert list(results) == IDS
    assert NIGHTLY_SLOTS == (5, 6) and TEST_SLOTS == 4
    for r in results.values():
        assert r["bound"] is None, r["id"]
        statement, scope = r["statement"], r["scope"]
        if r["id"] in ANY_R:
            # no request slots in these machines, and the statement says so
            assert "any number of" in statement or "any length" in statement
            assert not isinstance(_ob(r["id"]).machine, SchedulerMachine)
            if r["id"] in SCANS:
                assert r["parametric"] and scope is None, r["id"]
                continue
            assert scope is not None and scope.startswith(
                f"any number of requests, block size {BLOCK_SIZE}"
            ), (r["id"], scope)
            # the block size the proof fixes is in the statement, not only in the scope
            assert f"block size {BLOCK_SIZE}" in statement, r["id"]
            # every link proved for any number of requests: nothing left to S8
            assert r["id"] in LINKED and r["parametric"], r["id"]
            assert "only by S8" not in scope and "only by S8" not in statement, r["id"]
        else:
            # the slot count is fixed, so the result must not claim to be parametric
            assert not r["parametric"] and r["id"] in {"S8", "S16"}
            slots = SLOTS if r["id"] == "S8" else LINK_SLOTS
            assert scope is not None and scope.startswith(f"{slots} request"), scope
            assert f"block size {BLOCK_SIZE}" in scope
            assert f"({slots} requests, block size {BLOCK_SIZE})" in statement
        if r["id"] in {"S1", "S2", "S3", "S4", "S5", "S6", "S8"}:  # the ones with a gate
            assert "the gate without its STALL valve" in scope, (r["id"], scope)
        assert r["scope_statement"] == f"all other parameters; {scope}", r["id"]


def test_the_slot_free_statements_say_what_their_facts_rest_on(
    results: dict[str, dict[str, Any]],
) -> None:
    for ob_id in ("S1", "S2", "S3", "S4", "S5", "S6"):
        statement = results[ob_id]["statement"]
        assert "given its" in statement, (ob_id, statement)


def test_every_trigger_is_named_and_s6_proves_its_lemmas(
    results: dict[str, dict[str, Any]],
) -> None:
    for r in results.values():
        assert r["triggers"], r["id"]  # every S obligation names what makes it bite
    lemmas = {c["name"]: c["status"] for c in results["S6"]["checks"] if "lemma" in c["name"]}
    assert lemmas == {"lemma 1": "unsat", "lemma 2": "unsat"}


def _obs(row: dict[str, Any], machine: Machine) -> dict[str, Any]:
    return {k: row[k] for k in machine.obs_sorts}


def _ob(ob_id: str):  # type: ignore[no-untyped-def]
    return next(o for o in SCHEDULER_OBLIGATIONS if o.id == ob_id)


def _state(row: dict[str, Any], ob_id: str) -> dict[str, Any]:
    return {k: row[k] for k in _ob(ob_id).machine.state_sorts}


def _machine(ob_id: str, name: str) -> Machine:
    return next(m.machine for m in _ob(ob_id).mutants if m.name == name)


def test_mutant_traces_are_runs_of_the_mutant(results: dict[str, dict[str, Any]]) -> None:
    for r in results.values():
        ob_id = r["id"]
        for m in r["mutants"]:
            machine = _machine(ob_id, m["name"])
            state = _state(m["trace"][0], ob_id)
            for row in m["trace"]:
                assert _state(row, ob_id) == state, "trace is not a run from the initial state"
                outs = [k for k in machine.out_sorts if row.get(k) is not None]
                if not outs:
                    break
                _, out, nxt = evaluate(machine, m["params"], state, _obs(row, machine))
                assert all(out[k] == row[k] for k in outs), (ob_id, m["name"], row)
                state = nxt


def test_implementation_agrees_with_spec_and_not_with_mutants(
    results: dict[str, dict[str, Any]],
) -> None:
    """Replayed on the real Scheduler, each refuting trace matches the spec machine
    pass by pass and differs from the mutant somewhere."""
    for r in results.values():
        ob_id = r["id"]
        if ob_id in ANY_R or ob_id == "S16":
            continue  # S16's passes take the gate's decision as given: the glue tests
            # replay its traces with the gate scripted to it
        for m in r["mutants"]:
            rows = [row for row in m["trace"] if row.get("fire") is not None]
            if not rows:
                continue
            impl = replay(m["params"], BLOCK_SIZE, rows)
            spec = _ob(ob_id).machine
            state = _state(rows[0], ob_id)
            differs = False
            for row, got in zip(rows, impl, strict=True):
                _, out, nxt = evaluate(spec, m["params"], state, _obs(row, spec))
                for key in ("fire", "reason", "prefill_tokens", "decode_seqs", "preempted", "w"):
                    assert got[key] == out[key], (ob_id, m["name"], key)
                assert all(got[f"next_{k}"] == v for k, v in nxt.items()), (ob_id, m["name"])
                differs |= any(got[k] != row[k] for k in got if k in row)
                state = nxt
            assert differs, (ob_id, m["name"])


def test_the_tables_name_the_scope_s6_is_proved_for(
    results: dict[str, dict[str, Any]],
) -> None:
    from densegate.impl.traces.replay import S6_SCOPE
    from densegate.proofs.scheduler.scopes import S8_SLOTS

    scope = results["S6"]["scope"]
    assert scope is not None and scope.startswith("any number of requests, block size 2, "), scope
    # The short form says the same: the facts proved by S15 for any R, the valve off.
    assert "which S15 proves" in scope and "without its STALL valve" in scope
    assert f"by S8, at {S8_SLOTS} requests" in scope
    assert "which S15 proves for any number of requests of the folds" in S6_SCOPE
    assert f"S16 ties the two at {LINK_SLOTS} requests" in S6_SCOPE
    assert "block size 2" in S6_SCOPE and "STALL valve off" in S6_SCOPE


@pytest.mark.parametrize("block_size", TEST_BLOCK_SIZES)
def test_request_life_the_folds_and_the_link_hold_at_other_block_sizes(block_size: int) -> None:
    """S10-S16 (and so the facts S1-S6 take) are reported at block size 2; they hold at
    1, 3 and 16 too, S16's glue twins refuted there as well."""
    from densegate.proofs.scheduler.decode_scan import decode_obligation
    from densegate.proofs.scheduler.join import join_obligation
    from densegate.proofs.scheduler.life import life_obligation
    from densegate.proofs.scheduler.link import link_obligation
    from densegate.proofs.scheduler.tail import tail_obligation
    from densegate.proofs.scheduler.victim import victim_obligation
    from densegate.proofs.scheduler.window_scan import window_scan_obligation
    from densegate.spec.pass_ledger import PassLedger

    folds = [victim_obligation(block_size), join_obligation(PassLedger(), block_size)]
    folds += [tail_obligation(PassLedger(), block_size), window_scan_obligation(bs=block_size)]
    for ob in (life_obligation(block_size), decode_obligation(block_size), *folds):
        r = prove(ob)
        assert r.ok, (ob.id, block_size, r.checks, [(m.name, m.status) for m in r.mutants])
        assert r.scope is not None
        assert r.scope.startswith(f"any number of requests, block size {block_size}:")
        assert f"(block size {block_size}" in r.statement
    r = prove(link_obligation(block_size=block_size))
    assert r.ok and len(r.mutants) == 3, (block_size, r.checks, r.mutants)
    assert f"block size {block_size}" in (r.scope or "") and not r.parametric


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


def test_the_per_slot_pass_folds_each_step_over_every_slot() -> None:
    """S11-S14 prove folds of one per-request step for any number of requests; they are
    about the per-slot machine because it calls each step in a loop over every slot, in
    order (the victim search over every slot from the last back to the turn's own), not
    over some of them: read off its source."""
    import ast
    import inspect
    import textwrap

    import densegate.spec.scheduler as sched

    loops = {
        "end_or_join": "range(R)",
        "take_block": "range(R)",
        "victim_step": "reversed(range(i, R))",
        "partial_step": "range(R)",
        "admit_step": "range(R)",
        "reserve_and_run": "range(self.R)",
        "sample": "range(self.R)",
    }
    seen: dict[str, list[str]] = {name: [] for name in loops}
    for method in (sched.SchedulerMachine._plan, sched.SchedulerMachine._commit):
        tree = ast.parse(textwrap.dedent(inspect.getsource(method)))
        for loop in (n for n in ast.walk(tree) if isinstance(n, ast.For)):
            for call in (n for stmt in loop.body for n in ast.walk(stmt)):
                if isinstance(call, ast.Call):
                    name = ast.unparse(call.func).removeprefix("self.")
                    if name in seen:
                        seen[name].append(ast.unparse(loop.iter))
    for name, iters in seen.items():
        # called, and its innermost loop runs over every slot (outer loops are fine)
        assert iters and iters[-1] == loops[name], (name, iters)


def test_s8_window_check_refutes_a_fact_the_scheduler_breaks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The per-slot check of the TTFT window's facts can fail: claiming that owed prefill
    ahead drops by exactly what a fire runs is refuted (a re-admitted request's last
    token is left to its decode), so S8's window clause is not vacuous."""
    from dataclasses import replace

    import z3

    from densegate.proofs.scheduler import ttft_cover
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
