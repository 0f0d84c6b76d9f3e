"""S11: the decode phase keeps free blocks >= 0 and never preempts into an empty pass.

Proved of ``DecodeScan``, one request's turn per step, so for any number of
requests. Each turn's request meets S10's per-request facts (``request_ok``);
the scan starts from a conserved pool (S2 at the start of the pass, which
S2's own induction supplies).
"""

from __future__ import annotations

import z3

from densegate.proofs.common import named_mutant
from densegate.proofs.obligation import Obligation, Step
from densegate.proofs.scheduler.life import LIFE_BLOCK_SIZE, LIFE_HOOKS, request_ok
from densegate.proofs.scheduler.scopes import decode_scope
from densegate.spec.decode_scan import DecodeScan
from densegate.spec.machine import Vars
from densegate.spec.scheduler import SchedulerMachine
from densegate.spec.scheduler_request import Req

__all__ = ["DECODE_OBLIGATIONS", "decode_obligation"]


def _ok_at(bs: int):  # type: ignore[no-untyped-def]
    def ok(P: z3.ArithRef, M: z3.ArithRef, r: Req) -> z3.BoolRef:
        return z3.And(*request_ok(P, M, r, bs))

    return ok


def _scan(m: SchedulerMachine) -> DecodeScan:
    return DecodeScan(m, _ok_at(m.bs))


def _inv(p: Vars, s: Vars) -> z3.BoolRef:
    return z3.And(
        s["free"] >= 0,
        s["free"] + s["done_held"] + s["rest_held"] == p["N"],
        s["rest_run"] >= 0,
        s["rest_held"] >= s["rest_run"],
        z3.Implies(s["rest_run"] == 0, s["rest_held"] == 0),
        s["d"] >= 0,
        s["owing"] >= 0,
        s["pre"] >= 0,
        s["run_done"] == s["d"] + s["owing"],
        s["done_held"] >= s["run_done"],
        z3.Implies(s["run_done"] == 0, s["done_held"] == 0),
        s["run_done"] + s["rest_run"] + s["pre"] == p["run0"],
        z3.Implies(s["pre"] > 0, s["run_done"] > 0),
    )


def _prop(st: Step) -> z3.BoolRef:
    s2 = st.s2
    return z3.And(
        s2["free"] >= 0,
        s2["pre"] >= 0,
        s2["free"] + s2["done_held"] + s2["rest_held"] == st.p["N"],
        s2["run_done"] + s2["rest_run"] + s2["pre"] == st.p["run0"],
        z3.Implies(s2["pre"] > 0, s2["d"] + s2["owing"] > 0),
    )


def _preempts(st: Step) -> z3.BoolRef:
    return st.out["victims"] > 0


def _takes_last(st: Step) -> z3.BoolRef:
    return z3.And(st.out["dec"], st.s2["free"] == 0, st.s["free"] == 0)


def _small(p: Vars) -> z3.BoolRef:
    return z3.And(p["N"] <= 4, p["run0"] <= 3)


def decode_obligation(bs: int = LIFE_BLOCK_SIZE) -> Obligation:
    """S11 at block size ``bs``; it refutes S10's leaking preemption on the decode scan."""
    leaks, description = LIFE_HOOKS["preemption_leaks"]
    broken = named_mutant("decode scan", "preemption_leaks", description, _scan(leaks(1, bs)))
    return Obligation(
        id="S11",
        level="scheduler",
        statement=f"decode scan (block size {bs}): over any number of requests, the decodes "
        "keep free blocks "
        ">= 0 (a decode short of a block first preempts a running request holding >= 1, or "
        "itself), keep free + held = num_blocks, only lose running requests to preemption, "
        "and a pass that preempts still decodes or owes prefill (by induction over the "
        "turns, one request per step; each request as S10 proves it)",
        machine=_scan(SchedulerMachine(1, bs)),
        prop=_prop,
        invariant=_inv,
        mutants=[broken],
        readable=_small,
        trace_depth=6,
        triggers=[_preempts, _takes_last],
        trigger_names=["a turn preempts", "a decode takes the last free block after a preemption"],
        scope=decode_scope(bs),
    )


DECODE_OBLIGATIONS: list[Obligation] = [decode_obligation(LIFE_BLOCK_SIZE)]
