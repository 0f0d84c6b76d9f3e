"""The scheduler seen by its gate, for any number of requests: one pass, summarised.

What the gate's properties need from a pass is a handful of figures: the
prefill tokens planned, the decodes, the prefill owed by running requests and
what the pass would run of it, and whether the head of the queue fits and
would be admitted by a fire. ``SchedulerSummary`` keeps the gate's counter and
takes those figures as its observation, constrained only by the *pass facts*
(``pass_facts``), each proved for every number of requests:

- the head of the queue that fits is admitted if the gate fires and gives the
  pass at least one prefill token, and admissions only add to the partial
  chunks (``AdmissionScan``, by induction over the queue: S7);
- owed prefill gets at least ``min(owed, c)`` tokens, ``c = min(cap, T-S+1)``
  (``PartialScan``, by induction over the running requests: S9);
- nothing planned is negative.

So a property proved of the summary holds for the per-slot scheduler with any
number of requests and any block size, given the per-request facts the scans
take as given (S10 and S2, for any number of requests at block size 2), and
obligation S8 checks, on the per-slot machine at 4 requests, that each of its
passes is a step of this summary.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import z3

from densegate.spec.gate import GATE, GateMachine
from densegate.spec.machine import Command, Machine, Vars

__all__ = ["FIGURES", "SchedulerSummary", "chunk_room", "pass_facts"]


FIGURES = ("planned", "d", "work", "run", "head_fits", "head_admit")
"""A pass's figures: planned prefill, decodes, owed prefill, owed prefill run, head flags."""


def chunk_room(p: Vars) -> z3.ArithRef:
    """c = min(cap, T - S + 1): the owed prefill a pass runs when it can."""
    room = p["T"] - p["S"] + 1
    return z3.If(p["cap"] < room, p["cap"], room)


def pass_facts(p: Vars, f: Mapping[str, z3.ExprRef]) -> z3.BoolRef:
    """What every pass of the scheduler guarantees, whatever the number of requests."""
    planned, work, run = f["planned"], f["work"], f["run"]
    least = z3.If(work < chunk_room(p), work, chunk_room(p))
    return z3.And(
        f["d"] >= 0,
        run >= 0,
        planned >= run,
        run >= least,
        z3.Implies(f["head_fits"], z3.And(f["head_admit"], planned > 0)),
    )


class SchedulerSummary(Machine):
    """The gate's counter ``h`` over summarised passes; parameters B, K, enabled and
    the pass budget ``T``, sequence slots ``S`` and chunk cap (for ``c``)."""

    def __init__(self, gate: GateMachine = GATE, name: str = "scheduler summary") -> None:
        self.gate = gate
        self.name = name
        self.param_sorts = {**gate.param_sorts, "T": z3.Int, "S": z3.Int, "cap": z3.Int}
        self.state_sorts = {"h": z3.Int}
        self.obs_sorts = {k: z3.Bool if k.startswith("head") else z3.Int for k in FIGURES}
        self.out_sorts = {"fire": z3.Bool, "reason": gate.out_sorts["reason"]}
        self.out_sorts.update({k: z3.Int for k in ("w", "prefill_tokens", "decode_seqs")})

    def param_ok(self, p: Vars) -> z3.BoolRef:
        more = z3.And(p["S"] >= 1, p["T"] >= p["S"], p["cap"] >= 1)
        return z3.And(self.gate.param_ok(p), more)

    def init(self, p: Vars, s: Vars) -> z3.BoolRef:
        return s["h"] == 0

    def obs_ok(self, p: Vars, s: Vars, o: Vars) -> z3.BoolRef:
        return pass_facts(p, o)

    def observe(self, p: Vars, o: Vars) -> tuple[z3.ArithRef, z3.ArithRef]:
        """The gate's observation, as ``SchedulerMachine.observe`` makes it."""
        planned = o["planned"]
        return z3.If(planned < p["B"], planned, p["B"]), o["d"]

    def commands(self, p: Vars, s: Vars, o: Vars) -> Sequence[Command]:
        w, d = self.observe(p, o)
        cmds = []
        gp = {k: p[k] for k in self.gate.param_sorts}
        for gc in self.gate.commands(gp, {"h": s["h"]}, {"w": w, "d": d}):
            fire = gc.out["fire"]
            out = dict(gc.out)
            out.update({"w": w, "decode_seqs": d})
            out["prefill_tokens"] = z3.If(fire, o["planned"], 0)
            cmds.append(Command(gc.name, gc.guard, out, {"h": gc.next["h"]}))
        return cmds
