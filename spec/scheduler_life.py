"""One request of the scheduler through one pass, with everything else left arbitrary.

``SchedulerMachine`` changes a request only through the functions of
``densegate.spec.scheduler_request``, in this order: step 0 (abort or join),
possibly preemption as the victim of an earlier (or its own) decode turn, its
own decode turn, its partial chunk or its admission, then the commit. What
the *other* requests decide enters each function as a value: the free blocks,
whether this request is the victim, the budget left at its turn, the
admission totals before it, whether the gate fires. ``RequestLife`` makes
those values its observation, constrained only by what the per-slot machine
guarantees (only a running request is a victim: S12, for any number of slots;
budget and totals are any integers). The induction is over passes and no other
request is named, so an invariant of ``RequestLife`` holds of every request of a
scheduler that runs each request through these functions in this order, whatever
their number; that the per-slot scheduler does is a source test (only these
functions change a request, each called over every slot in order), and where its
decode phase differs in form (a request an earlier turn preempted meets its own
turn already queued) S10's lemma shows the request ends the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import z3

from densegate.spec.machine import Command, Machine, Vars
from densegate.spec.scheduler import SchedulerMachine
from densegate.spec.scheduler_request import (
    NOT_ARRIVED,
    RUNNING,
    WAITING,
    Req,
    end_or_join,
    owed,
    pass_chunk,
    preempt,
    reserve_and_run,
    sample,
    scheduled,
    take_block,
    turn,
)
from densegate.spec.scheduler_scan import AdmitScan, admit_step, partial_step

__all__ = ["RequestLife"]

_STATE = ("st", "c", "g", "b")
_ACC_INTS = ("slots", "abudget", "spare", "planned")
_ACC_BOOLS = ("stopped", "seen_waiting", "head_fits", "head_admit")


class RequestLife(Machine):
    """One request (prompt ``P0``, output ``M0``) of ``m``'s scheduler, one pass per step.

    ``m`` must have one slot: its parameters, checks and hooks (how many
    blocks a preemption frees, the chunk rule, reservation, admission) are
    this request's, so a broken scheduler's request is broken the same way.
    """

    def __init__(self, m: SchedulerMachine) -> None:
        if m.R != 1:
            raise ValueError(f"RequestLife takes a one-slot scheduler machine, got R={m.R}")
        self.m = m
        self.name = f"request life[{m.name.removeprefix('scheduler')}]"
        self.param_sorts = dict(m.param_sorts)
        self.state_sorts = {k: z3.Int for k in _STATE}
        self.obs_sorts: dict[str, Any] = {k: z3.Bool for k in ("abort", "arrive", "victim")}
        self.obs_sorts.update({k: z3.Int for k in ("free", "budget", "run0", *_ACC_INTS)})
        self.obs_sorts.update({k: z3.Bool for k in ("quiet", "fire", *_ACC_BOOLS)})
        self.out_sorts = {"freed": z3.Int, "chunk": z3.Int, "dec": z3.Bool, "admit": z3.Bool}

    def param_ok(self, p: Vars) -> z3.BoolRef:
        return self.m.param_ok(p)

    def init(self, p: Vars, s: Vars) -> z3.BoolRef:
        return z3.And(s["st"] == NOT_ARRIVED, s["c"] == 0, s["g"] == 0, s["b"] == 0)

    def _joined(self, s: Vars, o: Vars) -> tuple[Req, z3.ArithRef]:
        r = Req(s["st"], s["c"], s["g"], s["b"])
        return end_or_join(r, o["free"], abort=o["abort"], arrive=o["arrive"])

    def obs_ok(self, p: Vars, s: Vars, o: Vars) -> z3.BoolRef:
        r, _ = self._joined(s, o)
        return z3.And(
            z3.Implies(o["arrive"], s["st"] == NOT_ARRIVED),
            z3.Implies(o["abort"], z3.Or(s["st"] == WAITING, s["st"] == RUNNING)),
            # the victim search picks only a running request
            z3.Implies(o["victim"], r.st == RUNNING),
        )

    def commands(self, p: Vars, s: Vars, o: Vars) -> Sequence[Command]:
        m, P, M = self.m, p["P0"], p["M0"]
        r, free = self._joined(s, o)
        t = turn(r, P, m.bs)
        r, free = preempt(r, free, o["victim"], m.preempt_frees)
        r, free, dec = take_block(r, free, t)
        _, n_partial = partial_step(m.partial_chunk, o["budget"], owed(r, P, dec), p["cap"])
        acc = AdmitScan(o["slots"], o["abudget"], o["spare"], o["planned"],
                        *[o[k] for k in _ACC_BOOLS])  # fmt: skip
        need = m.admission_blocks(P, r.g)
        _, ok, n_admit = admit_step(
            acc, waiting=r.st == WAITING, total=P + r.g, need=need, chunked=p["chunked"],
            cap=p["cap"], quiet=o["quiet"], allowed=m.admission_allowed(o["run0"]),
        )  # fmt: skip
        chunk = pass_chunk(ok, n_admit, n_partial)
        fire = o["fire"]
        r, free = reserve_and_run(r, free, fire=fire, chunk=chunk, admit=ok, need=need, dec=dec)
        run = scheduled(dec, fire, chunk)
        r, free = sample(r, free, scheduled=run, prompt=P, most=M)
        out = {"freed": free - o["free"], "chunk": chunk, "dec": dec, "admit": ok}
        nxt = {k: getattr(r, k) for k in _STATE}
        return [Command("PASS", z3.BoolVal(True), out, nxt)]

    def display_row(self, row: dict[str, Any]) -> dict[str, Any]:
        """The request as ``<status><computed>/<generated>b<blocks>``, then the pass's inputs."""

        def show(prefix: str) -> str:
            st = row.get(f"{prefix}st")
            if st is None:
                return "?"
            return f"{'-WRFA'[st]}{row[f'{prefix}c']}/{row[f'{prefix}g']}b{row[f'{prefix}b']}"

        out: dict[str, Any] = {"pass": row["pass"], "request": show("")}
        for k in ("abort", "arrive", "victim", "fire", "budget", "spare", "slots", "abudget"):
            out[k] = row.get(k)
        for k in ("dec", "chunk", "admit", "freed"):
            out[k] = row.get(k)
        if "next_st" in row:
            out["after"] = show("next_")
        return out
