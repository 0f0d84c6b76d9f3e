"""S13: step 0 of the per-slot pass meets the ledger's step-0 facts, for any number of requests.

``JoinScan`` is the fold ``SchedulerMachine`` builds step 0 from (``end_or_join``
over the slots), one request per step; S13 proves by induction over the requests
that after any number of them the sums meet the ledger's ``join_facts`` (an abort
returns its blocks, arrivals only join the queue, each running request holds >= 1
block). Built from a ledger (``join_obligation``), so a ledger whose step-0 facts
claim more than the fold gives (say, at most three requests running) fails here
with a trace. The broken folds (``JOIN_HOOKS``) change the one-request step.
"""

from __future__ import annotations

import z3

from densegate.proofs.common import named_mutant
from densegate.proofs.obligation import Obligation, Step
from densegate.proofs.scheduler.life import LIFE_BLOCK_SIZE, request_ok
from densegate.proofs.scheduler.scopes import fold_scope
from densegate.spec.join_scan import JoinScan
from densegate.spec.machine import Vars
from densegate.spec.pass_ledger import PassLedger, join_facts
from densegate.spec.scheduler_request import ABORTED, RUNNING, WAITING, Req

__all__ = ["JOIN_OBLIGATIONS", "join_obligation"]


def _ok_at(bs: int):  # type: ignore[no-untyped-def]
    def ok(P: z3.ArithRef, M: z3.ArithRef, r: Req) -> z3.BoolRef:
        return z3.And(*request_ok(P, M, r, bs))

    return ok


def _abort_keeps_blocks(r: Req, free: z3.ArithRef, *, abort: z3.BoolRef,
                        arrive: z3.BoolRef) -> tuple[Req, z3.ArithRef]:  # fmt: skip
    st = z3.If(abort, ABORTED, z3.If(arrive, WAITING, r.st))
    return Req(st, r.c, r.g, z3.If(abort, 0, r.b)), free


def _arrival_runs(r: Req, free: z3.ArithRef, *, abort: z3.BoolRef,
                  arrive: z3.BoolRef) -> tuple[Req, z3.ArithRef]:  # fmt: skip
    st = z3.If(abort, ABORTED, z3.If(arrive, RUNNING, r.st))
    return Req(st, r.c, r.g, z3.If(abort, 0, r.b)), z3.If(abort, free + r.b, free)


JOIN_HOOKS = {
    "abort_keeps_blocks": (_abort_keeps_blocks, "an abort does not return its blocks"),
    "arrival_runs": (_arrival_runs, "an arrival joins as running, not queued"),
}


def _totals(p: Vars, s: Vars) -> tuple[Vars, Vars]:
    """The ledger's totals before the pass and figures after step 0, from the sums."""
    before = {"free": p["free_s"], "held": s["held"], "run": s["run"]}
    after = {"free0": s["free"], "held0": s["held0"], "run0": s["run0"], "wait0": s["wait0"]}
    return before, after


def _inv(p: Vars, s: Vars) -> z3.BoolRef:
    return z3.And(join_facts(*_totals(p, s)), s["held"] >= s["run"], s["run"] >= 0)


def join_obligation(ledger: PassLedger, bs: int = LIFE_BLOCK_SIZE, id: str = "S13") -> Obligation:
    """S13 for ``ledger``'s step-0 facts, at block size ``bs`` (the request facts')."""

    def prop(st: Step) -> z3.BoolRef:
        r2 = Req(st.out["st2"], st.out["c2"], st.out["g2"], st.out["b2"])
        # the sums meet the ledger's facts; the request leaves step 0 well-formed
        well = request_ok(st.o["P"], st.o["M"], r2, bs)
        return z3.And(ledger.join_facts(*_totals(st.p, st.s2)), *well)

    def aborts_running(st: Step) -> z3.BoolRef:
        return z3.And(st.o["abort"], st.o["st"] == RUNNING)

    ok = _ok_at(bs)
    return Obligation(
        id=id,
        level="scheduler",
        statement=f"step 0 (block size {bs}): over any number of requests, aborts then "
        "arrivals meet the pass ledger's step-0 facts (an abort returns exactly its blocks "
        "to the free pool, no request starts running, arrivals only join the queue, each "
        "running request holds >= 1 block and none other holds any) and leave each request "
        "as S10 describes it (by induction over the requests, one per step)",
        machine=JoinScan(ok, name=f"bs={bs}"),
        prop=prop,
        invariant=_inv,
        mutants=[
            named_mutant("join scan", name, description, JoinScan(ok, join))
            for name, (join, description) in JOIN_HOOKS.items()
        ],
        readable=lambda p: p["free_s"] <= 3,
        trace_depth=5,
        scope=fold_scope(bs, "step 0 (aborts, then arrivals) over the requests"),
        parametric=True,
        triggers=[aborts_running, lambda st: st.o["arrive"]],
        trigger_names=["a running request is aborted", "a request arrives"],
    )


JOIN_OBLIGATIONS: list[Obligation] = [join_obligation(PassLedger(), LIFE_BLOCK_SIZE)]
