"""R6's checks of step 1 (the decode walk): a request's turn, the walk's turn over the running
list, the block a growing decode takes, and a preemption, each as one view pair.

``densegate.proofs.refinement.scheduler_requests`` registers them with the rest of R6.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping
from typing import Any

import z3

from densegate.impl.sched.request import Request, RequestStatus
from densegate.proofs.refinement.one_request import (
    SPEC,
    STATUS,
    Ends,
    code_view,
    length,
    newest_other,
    req_of,
    setup,
    spec_view,
    terms,
    well,
)
from densegate.proofs.refinement.step_checks import Pre, Val, View, snapshot
from densegate.proofs.refinement.symbolic import NoTracing, guarded
from densegate.proofs.scheduler.life import request_ok
from densegate.spec.decode_scan import DecodeScan
from densegate.spec.scheduler import SchedulerMachine
from densegate.spec.scheduler_request import RUNNING, WAITING, Req, preempt, take_block, turn

__all__ = ["grows", "preempt_views", "take_views", "turn_views", "walk_views", "walks"]


def grows(bs: int) -> Pre:
    def pre(e: Mapping[str, z3.ExprRef]) -> z3.BoolRef:
        t = turn(req_of(e, RUNNING), e["P"], bs)
        return z3.And(well(RUNNING, bs)(e), t.grow, e["free"] >= 1)

    return pre


def walks(bs: int) -> Pre:
    """A running request's turn at index ``i`` of ``n`` running; the newest, when another,
    running and well-formed too."""

    def pre(e: Mapping[str, z3.ExprRef]) -> z3.BoolRef:
        newest = Req(z3.IntVal(RUNNING), e["cv"], e["gv"], e["bv"])
        other = z3.And(*request_ok(e["Pv"], e["Mv"], newest, bs))
        last = e["n"] == e["i"] + 1
        return z3.And(well(RUNNING, bs)(e), e["n"] >= e["i"] + 1, z3.Or(last, other))

    return pre


def turn_views(cls: type, v: Mapping[str, Any], val: Val, bs: int) -> tuple[View, View]:
    sched, r = setup(cls, v, bs, RequestStatus.RUNNING)
    before = snapshot(sched, sched.blocks, r)
    dec, grow = guarded(lambda: sched._turn(r), v)
    with NoTracing():
        t = turn(terms(v, val, RUNNING), val(v["P"]), bs)
        code: View = {"decodes": dec, "needs a block": grow}
        code["unchanged"] = snapshot(sched, sched.blocks, r) == before
        return code, {"decodes": t.dec, "needs a block": t.grow, "unchanged": True}


def take_views(cls: type, v: Mapping[str, Any], val: Val, bs: int) -> tuple[View, View]:
    sched, r = setup(cls, v, bs, RequestStatus.RUNNING)
    guarded(lambda: sched._take_block(r), v)
    with NoTracing():
        mine = terms(v, val, RUNNING)
        r2, free, _ = take_block(mine, val(v["free"]), turn(mine, val(v["P"]), bs))
        return code_view(sched, r), spec_view(r2, free)


def preempt_views(cls: type, v: Mapping[str, Any], val: Val) -> tuple[View, View]:
    sched, r = setup(cls, v, 2, RequestStatus.RUNNING)
    queued = bool(v["queued"])
    with NoTracing():
        other = Request("o", 1, [1], 1, 0, 0.0)
        other.head_pass = 0
        sched.running = [r]
        sched.waiting = collections.deque([other] if queued else [])
    guarded(lambda: sched._preempt(r), v)
    with NoTracing():
        mine = terms(v, val, RUNNING)
        r2, free = preempt(mine, val(v["free"]), z3.BoolVal(True), SPEC.preempt_frees)
        code, spec = code_view(sched, r), spec_view(r2, free)
        code["queue"] = "front" if sched.waiting and sched.waiting[0] is r else "elsewhere"
        code["running list"] = "without it" if r not in sched.running else "with it"
        code["queued tokens"], spec["queued tokens"] = sched._queued_tokens, val(v["P"]) + r2.g
        moved = r.head_pass == sched._pass and (not queued or other.head_pass is None)
        code["head"] = "restamped" if moved else "stale"
        spec.update({"queue": "front", "running list": "without it", "head": "restamped"})
        return code, spec


def walk_views(cls: type, v: Mapping[str, Any], val: Val, bs: int) -> tuple[View, View]:
    sched, r = setup(cls, v, bs, RequestStatus.RUNNING)
    last = v["n"] == v["i"] + 1
    with NoTracing():
        back = r if last else newest_other(v)
        ends = Ends(v["n"], v["i"], r, back)
        sched.running, sched.waiting = ends, collections.deque()
        decodes: list[Request] = []
        preempted: list[Request] = []
        owed: list[Request] = []
    nxt_i = guarded(lambda: sched._walk_turn(ends, v["i"], decodes, preempted, owed), v)
    with NoTracing():
        scan = DecodeScan(SchedulerMachine(1, bs), lambda P, M, r: z3.BoolVal(True))
        b, bv = val(v["b"]), z3.IntVal(0) if last else val(v["bv"])
        zero = z3.IntVal(0)
        s = {k: zero for k in scan.state_sorts}
        s.update(
            {"free": val(v["free"]), "rest_held": b + bv, "rest_run": val(v["n"]) - val(v["i"])}
        )
        p = {"N": val(v["free"]) + b + bv, "run0": s["rest_run"], "wait0": zero}
        o = {
            "st": z3.IntVal(RUNNING),
            "c": val(v["c"]),
            "g": val(v["g"]),
            "b": b,
            "P": val(v["P"]),
            "M": val(v["M"]),
            "vb": bv,
        }
        (turn_cmd,) = scan.commands(p, s, o)
        nxt, out = turn_cmd.next, turn_cmd.out
        idle = dict(o, st=z3.IntVal(WAITING), b=zero)
        (skip,) = scan.commands(p, s, idle)
        code: View = {
            "free": length(sched.blocks._free),
            "decodes": len(decodes),
            "owed": len(owed),
            "preempted": len(preempted),
            "its blocks": length(r.block_table),
            "still running": r.status is RequestStatus.RUNNING,
            "running list": ends.n,
            "next turn": nxt_i,
            "newest": STATUS[back.status],
        }
        ok = all(x is r for x in decodes + owed) and all(x is back for x in preempted)
        code["lists hold"] = "its own" if ok else "others"
        spec: View = {
            "free": nxt["free"],
            "decodes": nxt["d"],
            "owed": nxt["owing"],
            "preempted": out["victims"],
            "its blocks": nxt["done_held"],
            "still running": nxt["run_done"] == 1,
            "running list": val(v["n"]) - out["victims"],
            "next turn": val(v["i"]) + nxt["run_done"],
            "newest": z3.If(out["victims"] == 1, WAITING, RUNNING),
            "lists hold": "its own",
        }
        code["others skipped"] = True
        spec["others skipped"] = z3.And(*[skip.next[k] == s[k] for k in s])
        return code, spec
