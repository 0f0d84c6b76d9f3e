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
from densegate.spec.pass_ledger import PassLedger, join_facts
from densegate.spec.scheduler import SchedulerMachine
from densegate.spec.scheduler_request import Req

__all__ = [
    "DECODE_OBLIGATIONS",
    "decode_obligation",
    "ends_in_decode_facts",
    "starts_from_step_zero",
]


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
        s["wait"] == p["wait0"] + s["pre"],
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


def starts_from_step_zero(scan: DecodeScan) -> z3.BoolRef:
    """Lemma: after step 0 (its facts, S13) from a conserved pool (S2), the scan's initial
    state holds with the rest being every request: free, held and running after step 0."""
    s = scan.state("start")
    before = {k: z3.Int(f"{k}@before") for k in ("free", "held", "run")}
    zero = z3.Int("N@start")
    p = {"N": zero, "run0": s["rest_run"], "wait0": s["wait"]}
    after = {"free0": s["free"], "held0": s["rest_held"], "run0": s["rest_run"]}
    after["wait0"] = s["wait"]
    conserved0 = z3.And(s["free"] >= 0, s["free"] + s["rest_held"] == zero)
    zeros = [s[k] == 0 for k in ("done_held", "d", "owing", "pre", "run_done")]
    premise = z3.And(scan.param_ok(p), join_facts(before, after), conserved0, *zeros)
    return z3.Implies(premise, scan.init(p, s))


def ends_in_decode_facts(ledger: PassLedger) -> z3.BoolRef:
    """Lemma: the scan's invariant with every turn done (no rest) gives ``ledger``'s
    decode facts, the figures read off the scan: free, decodes, owing, preemptions,
    running after the decodes (``run_done``), running and waiting after step 0 and
    waiting after the decodes."""
    names = ("free", "done_held", "d", "owing", "pre", "run_done", "wait")
    s = {k: z3.Int(f"{k}@end") for k in names}
    s.update({"rest_held": z3.IntVal(0), "rest_run": z3.IntVal(0)})
    p = {"N": z3.Int("N@end"), "run0": z3.Int("run0@end"), "wait0": z3.Int("wait0@end")}
    fig = {k: s[k] for k in ("d", "owing", "pre")}
    fig.update({"free1": s["free"], "run1": s["run_done"], "run0": p["run0"]})
    fig.update({"wait0": p["wait0"], "wait1": s["wait"]})
    lp = {"N": p["N"], "S": z3.Int("S@end")}
    return z3.Implies(_inv(p, s), ledger.decode_facts(lp, fig))


def _preempts(st: Step) -> z3.BoolRef:
    return st.out["victims"] > 0


def _takes_last(st: Step) -> z3.BoolRef:
    return z3.And(st.out["dec"], st.s2["free"] == 0, st.s["free"] == 0)


def _small(p: Vars) -> z3.BoolRef:
    return z3.And(p["N"] <= 4, p["run0"] <= 3)


def decode_obligation(bs: int = LIFE_BLOCK_SIZE, ledger: PassLedger | None = None) -> Obligation:
    """S11 at block size ``bs``, its lemmas about ``ledger``'s facts (default: the pass
    ledger's); it refutes S10's leaking preemption on the decode scan."""
    ledger = PassLedger() if ledger is None else ledger
    scan = _scan(SchedulerMachine(1, bs))
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
        machine=scan,
        prop=_prop,
        invariant=_inv,
        mutants=[broken],
        readable=_small,
        trace_depth=6,
        lemmas=[lambda: starts_from_step_zero(scan), lambda: ends_in_decode_facts(ledger)],
        triggers=[_preempts, _takes_last],
        trigger_names=["a turn preempts", "a decode takes the last free block after a preemption"],
        scope=decode_scope(bs),
        parametric=True,
    )


DECODE_OBLIGATIONS: list[Obligation] = [decode_obligation(LIFE_BLOCK_SIZE)]
