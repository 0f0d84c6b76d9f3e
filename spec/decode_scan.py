"""The decode phase (step 1 of a pass) as one step per request, for any number of requests.

``SchedulerMachine`` runs the decodes in slot order; a decode that needs a
block when none is free preempts the newest running request, possibly
itself. The victim is named by the requests *after* the one whose turn it
is, so the scan keeps what it needs of them as totals: the blocks they hold
and how many of them run. A victim other than the decoding request is then
"some running request after it, holding at least one block" (the per-slot
machine's pick, the newest, is one such), which is all that free >= 0 and
progress need. What the scan proves is an induction over the turns, one
request per step, so it holds for every number of turns; that each decode turn
of the per-slot machine (its victim search a fold over the later slots) is a
step of the scan is S12's lemma, for any number of requests.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import z3

from densegate.spec.machine import Command, Machine, Vars
from densegate.spec.scheduler import SchedulerMachine
from densegate.spec.scheduler_request import (
    RUNNING,
    Req,
    preempt,
    take_block,
    turn,
)

__all__ = ["DecodeScan", "RequestOk"]

RequestOk = Callable[[z3.ArithRef, z3.ArithRef, Req], z3.BoolRef]
"""``(prompt, max_tokens, request) -> bool``: what every request satisfies (S10)."""

_STATE = ("free", "done_held", "rest_held", "rest_run", "d", "owing", "pre", "run_done", "wait")


class DecodeScan(Machine):
    """Step 1 over the turns of a pass; ``m`` (one slot) gives the block size and the
    preemption hook, ``request_ok`` the per-request facts every turn's request meets.

    Parameters: KV blocks ``N`` and the running and waiting requests ``run0``,
    ``wait0`` after step 0. State: free blocks; blocks held by requests whose turn
    is done and by the rest; running requests in the rest; decodes, owing partial
    prefills and preemptions so far; running requests whose turn is done; waiting
    requests (every preemption queues one).
    """

    def __init__(self, m: SchedulerMachine, request_ok: RequestOk) -> None:
        self.m = m
        self.request_ok = request_ok
        self.name = f"decode scan[{m.name.removeprefix('scheduler')}]"
        self.param_sorts = {"N": z3.Int, "run0": z3.Int, "wait0": z3.Int}
        self.state_sorts = {k: z3.Int for k in _STATE}
        self.obs_sorts = {k: z3.Int for k in ("st", "c", "g", "b", "P", "M", "vb")}
        self.out_sorts = {"dec": z3.Bool, "victims": z3.Int}

    def param_ok(self, p: Vars) -> z3.BoolRef:
        """Blocks for at least the smallest request (prompt 1, one output), as the per-slot
        machine's parameters demand of each of its requests: else no turn could follow."""
        enough = self.m.blocks_for(z3.IntVal(2)) <= p["N"]
        return z3.And(p["N"] >= 1, enough, p["run0"] >= 0, p["wait0"] >= 0)

    def init(self, p: Vars, s: Vars) -> z3.BoolRef:
        """The pass after step 0: blocks conserved, each running request holds >= 1."""
        zero = [s[k] == 0 for k in ("done_held", "d", "owing", "pre", "run_done")]
        return z3.And(
            s["free"] >= 0,
            s["free"] + s["rest_held"] == p["N"],
            s["rest_run"] == p["run0"],
            s["rest_held"] >= s["rest_run"],
            z3.Implies(s["rest_run"] == 0, s["rest_held"] == 0),
            s["wait"] == p["wait0"],
            *zero,
        )

    def _req(self, o: Vars) -> Req:
        return Req(o["st"], o["c"], o["g"], o["b"])

    def obs_ok(self, p: Vars, s: Vars, o: Vars) -> z3.BoolRef:
        """The next request is well-formed and one of the rest: its blocks and running
        status are part of the rest's totals; ``vb`` is what another running one holds."""
        r = self._req(o)
        running = r.st == RUNNING
        m = self.m
        return z3.And(
            o["P"] >= 1,
            o["M"] >= 1,
            m.blocks_for(o["P"] + o["M"]) <= p["N"],
            self.request_ok(o["P"], o["M"], r),
            z3.Implies(
                running, z3.And(s["rest_run"] >= 1, r.b <= s["rest_held"] - s["rest_run"] + 1)
            ),
            z3.Implies(z3.And(running, s["rest_run"] == 1), r.b == s["rest_held"]),
            z3.Implies(z3.Not(running), r.b == 0),
            z3.Implies(
                z3.And(running, s["rest_run"] >= 2),
                z3.And(o["vb"] >= 1, o["vb"] <= s["rest_held"] - r.b - (s["rest_run"] - 2)),
            ),
            z3.Implies(z3.And(running, s["rest_run"] == 2), o["vb"] == s["rest_held"] - r.b),
        )

    def commands(self, p: Vars, s: Vars, o: Vars) -> Sequence[Command]:
        m, r, P = self.m, self._req(o), o["P"]
        was_running = r.st == RUNNING
        free = s["free"]
        t = turn(r, P, m.bs)
        short = t.short(free)
        other = s["rest_run"] >= 2  # a running request after this one: the newest is the victim
        self_victim = z3.And(short, z3.Not(other))
        other_victim = z3.And(short, other)
        free = z3.If(other_victim, free + m.preempt_frees(o["vb"]), free)
        r2, free = preempt(r, free, self_victim, m.preempt_frees)
        r2, free, dec = take_block(r2, free, t)
        still = r2.st == RUNNING
        victims = z3.If(short, 1, 0)
        nxt = {
            "free": free,
            "done_held": s["done_held"] + r2.b,
            "rest_held": s["rest_held"] - r.b - z3.If(other_victim, o["vb"], 0),
            "rest_run": s["rest_run"] - z3.If(was_running, 1, 0) - z3.If(other_victim, 1, 0),
            "d": s["d"] + z3.If(dec, 1, 0),
            "owing": s["owing"] + z3.If(z3.And(still, z3.Not(dec)), 1, 0),
            "pre": s["pre"] + victims,
            "run_done": s["run_done"] + z3.If(still, 1, 0),
            "wait": s["wait"] + victims,
        }
        return [Command("TURN", z3.BoolVal(True), {"dec": dec, "victims": victims}, nxt)]

    def display_row(self, row: dict[str, Any]) -> dict[str, Any]:
        """One turn per row: the request, then the totals before and after it."""
        out: dict[str, Any] = {"turn": row["pass"]}
        out.update({k: row.get(k) for k in ("st", "c", "g", "b", "P", "M", "vb", "dec")})
        out.update({k: row.get(k) for k in _STATE})
        if "next_free" in row:
            out["after"] = " ".join(f"{k}={row[f'next_{k}']}" for k in _STATE)
        return out
