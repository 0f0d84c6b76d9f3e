"""Step 0 of a pass (aborts, then arrivals) as one step per request, and the fold as a machine.

``SchedulerMachine`` runs step 0 by folding ``end_or_join`` over its request
slots, threading the free blocks. ``JoinScan`` is that fold as a machine: the
free blocks and the sums the pass ledger reads (blocks held and running requests
before the step, and held, running and waiting after it) are the state, one
request the observation. An induction over its steps is an induction over the
requests, so what it proves of the sums (the ledger's step-0 facts, S13) holds
for every number of requests.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import z3

from densegate.spec.machine import Command, Machine, Vars
from densegate.spec.scheduler_request import (
    NOT_ARRIVED,
    RUNNING,
    WAITING,
    Req,
    end_or_join,
)

__all__ = ["JOIN_SUMS", "JoinScan"]

JOIN_SUMS = ("free", "held", "run", "held0", "run0", "wait0")
"""Free blocks (threaded), held and running before step 0, held, running, waiting after."""

RequestOk = Callable[[z3.ArithRef, z3.ArithRef, Req], z3.BoolRef]
Join = Callable[..., tuple[Req, z3.ArithRef]]
"""``(request, free, *, abort, arrive) -> (request, free)``: step 0 for one request."""


class JoinScan(Machine):
    """Step 0 over the requests, one per transition.

    Parameter: the free blocks before the pass (``free_s``). Observation: the next
    request (meeting ``request_ok``, S10's per-request facts), its prompt and output
    lengths, and whether it is aborted or arrives (as the per-slot machine admits
    them: an arrival was not there, an abort ends a waiting or running request).
    """

    def __init__(self, request_ok: RequestOk, join: Join = end_or_join, name: str = "") -> None:
        self.request_ok = request_ok
        self.join = join
        self.name = f"join scan[{name}]" if name else "join scan"
        self.param_sorts = {"free_s": z3.Int}
        self.state_sorts = {k: z3.Int for k in JOIN_SUMS}
        self.obs_sorts: dict[str, Any] = {k: z3.Int for k in ("st", "c", "g", "b", "P", "M")}
        self.obs_sorts.update({"abort": z3.Bool, "arrive": z3.Bool})
        self.out_sorts = {k: z3.Int for k in ("st2", "c2", "g2", "b2")}

    def init(self, p: Vars, s: Vars) -> z3.BoolRef:
        return z3.And(s["free"] == p["free_s"], *[s[k] == 0 for k in JOIN_SUMS[1:]])

    def obs_ok(self, p: Vars, s: Vars, o: Vars) -> z3.BoolRef:
        r = Req(o["st"], o["c"], o["g"], o["b"])
        return z3.And(
            o["P"] >= 1,
            o["M"] >= 1,
            self.request_ok(o["P"], o["M"], r),
            z3.Implies(o["arrive"], r.st == NOT_ARRIVED),
            z3.Implies(o["abort"], z3.Or(r.st == WAITING, r.st == RUNNING)),
        )

    def commands(self, p: Vars, s: Vars, o: Vars) -> Sequence[Command]:
        r = Req(o["st"], o["c"], o["g"], o["b"])
        r2, free = self.join(r, s["free"], abort=o["abort"], arrive=o["arrive"])

        def one(cond: z3.BoolRef) -> z3.ArithRef:
            return z3.If(cond, 1, 0)

        nxt = {
            "free": free,
            "held": s["held"] + r.b,
            "run": s["run"] + one(r.st == RUNNING),
            "held0": s["held0"] + r2.b,
            "run0": s["run0"] + one(r2.st == RUNNING),
            "wait0": s["wait0"] + one(r2.st == WAITING),
        }
        out = {"st2": r2.st, "c2": r2.c, "g2": r2.g, "b2": r2.b}
        return [Command("JOIN", z3.BoolVal(True), out, nxt)]

    def display_row(self, row: dict[str, Any]) -> dict[str, Any]:
        """One request per row: it, whether it is aborted or arrives, the sums after."""
        out: dict[str, Any] = {"request": row["pass"]}
        keys = ("st", "c", "g", "b", "P", "M", "abort", "arrive", *JOIN_SUMS)
        out.update({k: row.get(k) for k in keys})
        if "next_free" in row:
            out["after"] = " ".join(f"{k}={row[f'next_{k}']}" for k in JOIN_SUMS)
        return out
