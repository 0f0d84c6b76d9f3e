"""The decode phase's victim search as one step per request, and the search as a machine.

When a decode turn needs a block and none is free, ``SchedulerMachine`` preempts
the newest running request: it folds ``search_step`` over the slots from the last
one back to the turn's own, and the first running request met is the victim. The
fold is a machine too (``VictimSearch``: the search's totals are the state, one
request, with its slot, the observation), so an induction over its steps is an
induction over the requests the search passes: what it proves (exactly one victim
when the turn is short, the newest running request, holding >= 1 block, its blocks
returned, nothing else changed) holds for every number of slots. Each step takes
the slot it is at, so a search that looks at some slots only is a different step,
and the induction sees it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import z3

from densegate.spec.machine import Command, Machine, Vars
from densegate.spec.scheduler_request import RUNNING, WAITING, Req, preempt

__all__ = ["Search", "SearchStep", "VictimSearch", "search_start", "search_step"]

Frees = Callable[[z3.ArithRef], z3.ArithRef]


@dataclass(frozen=True)
class Search:
    """The search's totals after the slots it has passed (from the last slot back)."""

    free: z3.ArithRef
    """Free blocks, the victim's returned once it is met."""
    later: z3.BoolRef
    """A running request was met: the victim, if any, is chosen."""
    victims: z3.ArithRef
    """Requests preempted so far (0 or 1)."""


def search_start(free: z3.ArithRef) -> Search:
    """Before the last slot: nothing met, nothing preempted."""
    return Search(free, z3.BoolVal(False), z3.IntVal(0))


def search_step(
    acc: Search, r: Req, slot: z3.ArithRef, short: z3.BoolRef, frees: Frees
) -> tuple[Search, Req, z3.BoolRef]:
    """One slot, going back from the last: a short turn preempts the first running
    request it meets (the newest). ``slot`` is where the step is (the rule ignores it)."""
    running = r.st == RUNNING
    victim = z3.And(short, running, z3.Not(acc.later))
    r2, free = preempt(r, acc.free, victim, frees)
    nxt = Search(free, z3.Or(acc.later, running), acc.victims + z3.If(victim, 1, 0))
    return nxt, r2, victim


SearchStep = Callable[[Search, Req, z3.ArithRef, z3.BoolRef], tuple[Search, Req, z3.BoolRef]]
"""``(totals, request, slot, short) -> (totals, request, victim)``: a machine's search step."""

RequestOk = Callable[[z3.ArithRef, z3.ArithRef, Req], z3.BoolRef]

_STATE_INTS = (
    "free",
    "victims",
    "held",
    "run",
    "held_after",
    "run_after",
    "vb",
    "wait",
    "wait_after",
)


class VictimSearch(Machine):
    """The victim search of one decode turn as a machine: one transition per slot passed.

    Parameters: whether the turn is short of a block (``short``) and the free blocks
    when the search starts (``free0``). State: the search's totals (``Search``), and
    what the proof reads of the slots passed: blocks held, running and waiting requests
    before the search (``held``, ``run``, ``wait``) and after it, and the blocks the
    victim held (``vb``). Observation: the next request back, with its prompt and output lengths
    (meeting ``request_ok``, S10's per-request facts) and its slot (any >= 0).
    """

    def __init__(self, step: SearchStep, request_ok: RequestOk, bs: int, name: str) -> None:
        self.step = step
        self.request_ok = request_ok
        self.name = f"victim search[{name}]"
        self.param_sorts = {"short": z3.Bool, "free0": z3.Int}
        self.state_sorts: dict[str, Any] = {k: z3.Int for k in _STATE_INTS}
        self.state_sorts["later"] = z3.Bool
        self.obs_sorts = {k: z3.Int for k in ("st", "c", "g", "b", "P", "M", "slot")}
        self.bs = bs
        self.out_sorts = {"victim": z3.Bool, "st2": z3.Int, "c2": z3.Int, "b2": z3.Int}

    def param_ok(self, p: Vars) -> z3.BoolRef:
        return p["free0"] >= 0

    def init(self, p: Vars, s: Vars) -> z3.BoolRef:
        zero = [s[k] == 0 for k in _STATE_INTS if k != "free"]
        return z3.And(s["free"] == p["free0"], z3.Not(s["later"]), *zero)

    def obs_ok(self, p: Vars, s: Vars, o: Vars) -> z3.BoolRef:
        r = Req(o["st"], o["c"], o["g"], o["b"])
        return z3.And(o["P"] >= 1, o["M"] >= 1, o["slot"] >= 0, self.request_ok(o["P"], o["M"], r))

    def commands(self, p: Vars, s: Vars, o: Vars) -> Sequence[Command]:
        r = Req(o["st"], o["c"], o["g"], o["b"])
        acc = Search(s["free"], s["later"], s["victims"])
        nxt, r2, victim = self.step(acc, r, o["slot"], p["short"])
        running = z3.If(r.st == RUNNING, 1, 0)
        state = {
            "free": nxt.free,
            "later": nxt.later,
            "victims": nxt.victims,
            "held": s["held"] + r.b,
            "run": s["run"] + running,
            "held_after": s["held_after"] + r2.b,
            "run_after": s["run_after"] + z3.If(r2.st == RUNNING, 1, 0),
            "vb": z3.If(victim, r.b, s["vb"]),
            "wait": s["wait"] + z3.If(r.st == WAITING, 1, 0),
            "wait_after": s["wait_after"] + z3.If(r2.st == WAITING, 1, 0),
        }
        out = {"victim": victim, "st2": r2.st, "c2": r2.c, "b2": r2.b}
        return [Command("SEARCH", z3.BoolVal(True), out, state)]

    def display_row(self, row: dict[str, Any]) -> dict[str, Any]:
        """One slot per row (from the last back): the request, then the totals."""
        out: dict[str, Any] = {"step": row["pass"]}
        out.update({k: row.get(k) for k in ("slot", "st", "c", "g", "b", "P", "M", "victim")})
        out.update({k: row.get(k) for k in ("free", "later", *_STATE_INTS[1:])})
        if "next_free" in row:
            keys = ("free", "later", *_STATE_INTS[1:])
            out["after"] = " ".join(f"{k}={row[f'next_{k}']}" for k in keys)
        return out
