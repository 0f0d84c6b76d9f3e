"""R3: the shipped Scheduler plans a pass as the spec does, and every broken variant is caught.

Each mutant's counterexample is re-run here, concretely, on a Scheduler built
with real token lists and real block tables, against the spec's own evaluator,
independently of the prover's replay.
"""

from __future__ import annotations

import zlib
from typing import Any

import pytest

from densegate.impl.sched.config import SchedulerConfig
from densegate.impl.sched.plan import PassPlan
from densegate.impl.sched.request import Request, RequestStatus
from densegate.impl.sched.scheduler import Scheduler
from densegate.proofs.refinement import scheduler as r3
from densegate.proofs.refinement.counted import Counted
from densegate.proofs.refinement.obligations import SCHEDULER_REFINEMENT_OBLIGATIONS
from densegate.proofs.refinement.scheduler_replay import spec_plan
from densegate.proofs.refinement.symbolic import explore
from densegate.proofs.registry import level
from densegate.spec.machine import evaluate
from densegate.spec.properties import statement
from densegate.spec.scheduler import RUNNING, WAITING, SchedulerMachine
from tests.support.prove_run import prove_run

SPEC = SchedulerMachine(r3.SLOTS, r3.BLOCK_SIZE)


@pytest.fixture(scope="session")
def proved() -> dict[str, dict[str, Any]]:
    return prove_run().by_id


@pytest.fixture(scope="module")
def result(proved: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """R3 as ``densegate prove --json`` reported it."""
    return proved["R3"]


def test_registered_as_its_own_level_with_its_bound() -> None:
    assert [o.id for o in level("refinement-scheduler").obligations()] == ["R3", "R4", "R5", "R6"]
    (ob,) = SCHEDULER_REFINEMENT_OBLIGATIONS
    assert ob.bound == "2 requests, block size 2" == f"{r3.SLOTS} requests, block size 2"
    # the statement itself names the bound, as the property table words it
    assert ob.statement == statement("R3")
    assert f"at {r3.SLOTS} requests and block size {r3.BLOCK_SIZE}" in ob.statement


def test_shipped_scheduler_checked_on_every_path(result: dict[str, Any]) -> None:
    assert [c["name"] for c in result["checks"]] == ["plan: every path", "inputs: every path"]
    assert all("every path explored" in c["reason"] for c in result["checks"]), result["checks"]


def test_report_says_code_and_bounded_never_all_parameters(result: dict[str, Any]) -> None:
    assert result["about"] == "code" and result["bound"] == "2 requests, block size 2"
    assert result["parametric"] is False
    scope = result["scope_statement"]
    assert scope.startswith("bounded: 2 requests, block size 2; impl/sched/"), scope
    assert "all parameters" not in scope


def _run(cls: type, w: dict[str, Any]) -> tuple[PassPlan, list[Request], Scheduler]:
    """The witness's state built with real lists, blocks allocated by the BlockManager."""
    chunked = w["chunked"]
    config = SchedulerConfig(
        max_num_seqs=w["S"],
        max_num_batched_tokens=w["T"],
        block_size=r3.BLOCK_SIZE,
        num_blocks=w["N"],
        max_model_len=w["L"],
        enable_chunked_prefill=chunked,
        long_prefill_token_threshold=w["cap"] if chunked else None,
        dense_tokens=w["B"],
        max_hold_passes=w["K"],
        gate_enabled=w["enabled"],
    )
    sched = cls(config)
    reqs = []
    for i in range(r3.SLOTS):
        r = Request(f"r{i}", i, [5] * w[f"P{i}"], w[f"M{i}"], 0, 0.0)
        r.output_token_ids.extend([9] * w[f"g{i}"])
        if w[f"st{i}"] == RUNNING:
            r.status = RequestStatus.RUNNING
            r.num_computed = w[f"c{i}"]
            sched.blocks.allocate(r.block_table, w[f"b{i}"] * r3.BLOCK_SIZE)
            sched.running.append(r)
        elif w[f"st{i}"] == WAITING:
            sched.add(r)
        reqs.append(r)
    assert sched.blocks.num_free == w["free"]
    return sched.plan(), reqs, sched


def _disagrees(cls: type, w: dict[str, Any]) -> bool:
    """Whether ``cls`` plans the witness otherwise than the spec: the gate's observation
    and preemptions against the spec's evaluator, each request's part against its plan."""
    plan, reqs, sched = _run(cls, w)
    seen = sched.observe(plan)
    params = {k: w[k] for k in (*r3.PARAMS, *(f"{k}{i}" for k in "PM" for i in range(r3.SLOTS)))}
    state = {"h": 0, "free": w["free"]}
    state.update({f"{k}{i}": w[f"{k}{i}"] for k in ("st", "c", "g", "b") for i in range(r3.SLOTS)})
    obs = {f"{k}{i}": False for k in ("arrive", "abort") for i in range(r3.SLOTS)}
    _, out, _ = evaluate(SPEC, params, state, obs)
    code = (seen.waiting_tokens, seen.decode_seqs, len(plan.preempted))
    if code != (out["w"], out["decode_seqs"], out["preempted"]):
        return True
    # the queue, judged by its own contract: the requests that waited and the ones this
    # pass preempted, each queued once, in arrival order, waiting, and its token count the
    # sum of theirs
    queue = list(sched.waiting)
    gone = {id(r) for r in plan.preempted}
    waiting = [r for i, r in enumerate(reqs) if w[f"st{i}"] == WAITING or id(r) in gone]
    if [q.request_id for q in queue] != [r.request_id for r in waiting]:
        return True
    if any(q.status is not RequestStatus.WAITING for q in queue):
        return True
    if sched.queued_tokens != sum(q.num_tokens for q in queue):
        return True
    spec = spec_plan(w)
    chunks = {r.request_id: n for r, n in (*plan.partials, *plan.admits)}
    for i, r in enumerate(reqs):
        mine = (r in plan.decodes, chunks.get(r.request_id, 0), any(a is r for a, _ in plan.admits))
        if mine != (spec[f"decode{i}"], spec[f"chunk{i}"], spec[f"admit{i}"]):
            return True
    return False


def test_every_mutant_refuted_by_a_state_that_really_disagrees(result: dict[str, Any]) -> None:
    assert [m["name"] for m in result["mutants"]] == [m.name for m in r3.R3_MUTANTS]
    assert len(result["mutants"]) >= 2
    for res, mutant in zip(result["mutants"], r3.R3_MUTANTS, strict=True):
        name = res["name"]
        assert res["status"] == "refuted", (name, res["reason"])
        (row,) = res["trace"]
        assert row["entry"] == "plan" and row["code"] != row["spec"]
        assert "w=" in row["code"] and "w=" in row["spec"]
        witness = {**res["params"], **row}
        assert _disagrees(mutant.build, witness), name
        assert not _disagrees(Scheduler, witness), name
        (shown,) = res["display"] or [{}]
        assert len(shown["requests"].split()) == r3.SLOTS


def test_lists_read_beyond_their_length_fail_the_check() -> None:
    with pytest.raises(TypeError):
        _ = Counted(3)[0]  # type: ignore[index]
    with pytest.raises(TypeError):
        iter(Counted(3))  # type: ignore[call-overload]

    class ReadsTokens(Scheduler):
        def plan(self) -> PassPlan:
            for r in self.running:
                _ = r.prompt_token_ids[0]
            return super().plan()

    out = explore(r3.R3_CHECKS["plan"](ReadsTokens), max_iterations=200)
    assert out.status == "refuted" and "raised TypeError" in out.detail, out


class _Opaque(Scheduler):
    """Correct, but through a call CrossHair cannot model (a C checksum of the budget)."""

    def plan(self) -> PassPlan:
        if zlib.crc32(str(self.config.max_num_batched_tokens).encode()) < 0:  # never: unsigned
            self.running.clear()
        return super().plan()


def test_a_path_that_cannot_be_explored_is_unknown_never_proved() -> None:
    out = explore(r3.R3_CHECKS["plan"](_Opaque), max_iterations=30)
    assert out.status == "unknown", out
    assert "not every path explored" in out.detail


def test_a_mutant_with_a_focus_is_refuted_there_alone() -> None:
    """The focus is a search hint the prover tries before every path: the check pinned to
    it alone must already refute the mutant, and the shipped Scheduler must pass there."""
    (m,) = [m for m in r3.R3_MUTANTS if m.focus]
    focus = m.focus["plan"]
    out = explore(r3.R3_CHECKS["plan"](m.build, focus))
    assert out.status == "refuted", out.detail
    assert out.witness is not None and all(out.witness[k] == v for k, v in focus.items())
    assert explore(r3.R3_CHECKS["plan"](Scheduler, focus)).status == "proved"
