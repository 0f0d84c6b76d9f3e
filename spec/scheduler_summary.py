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

So a property proved of the summary holds of every run of summarised passes,
whatever the number of requests behind them, given the pass facts. S14 proves the
pass facts of every pass of the per-slot scheduler, whatever its number of
requests (the scans read over its folds, at block size 2); S8 checks them again at
3 request slots.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import z3

from densegate.spec.gate import GATE, GateMachine
from densegate.spec.machine import Command, Machine, Sort, Vars

__all__ = ["FIGURES", "GatedPasses", "SchedulerSummary", "chunk_room", "pass_facts"]


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


class GatedPasses(Machine):
    """What the slot-free scheduler machines share: the gate (its commands, reused) over a
    pass observed through figures, ``planned`` prefill and ``d`` decodes among them.

    Parameters: the gate's B, K, enabled, the pass budget ``T``, sequence slots ``S`` and
    chunk cap (for ``c``). Subclasses add their state, figures and facts."""

    param_sorts: dict[str, Sort]
    out_sorts: dict[str, Sort]

    def __init__(self, gate: GateMachine, name: str) -> None:
        self.gate = gate
        self.name = name
        self.param_sorts = {**gate.param_sorts, "T": z3.Int, "S": z3.Int, "cap": z3.Int}
        self.out_sorts = {"fire": z3.Bool, "reason": gate.out_sorts["reason"], "w": z3.Int}

    def param_ok(self, p: Vars) -> z3.BoolRef:
        more = z3.And(p["S"] >= 1, p["T"] >= p["S"], p["cap"] >= 1)
        return z3.And(self.gate.param_ok(p), more)

    def observe(self, p: Vars, o: Vars) -> tuple[z3.ArithRef, z3.ArithRef]:
        """The gate's observation, as ``SchedulerMachine.observe`` makes it."""
        planned = o["planned"]
        return z3.If(planned < p["B"], planned, p["B"]), o["d"]

    def gate_commands(self, p: Vars, s: Vars, o: Vars) -> list[Command]:
        """The gate's commands on this pass's observation."""
        w, d = self.observe(p, o)
        gp = {k: p[k] for k in self.gate.param_sorts}
        return list(self.gate.commands(gp, {"h": s["h"]}, {"w": w, "d": d}))

    def fires(self, p: Vars, s: Vars, o: Vars) -> z3.BoolRef:
        """Whether the gate fires on this pass (for facts that depend on it)."""
        return z3.Or(*[z3.And(c.guard, c.out["fire"]) for c in self.gate_commands(p, s, o)])


class SchedulerSummary(GatedPasses):
    """The gate's counter ``h`` over summarised passes."""

    def __init__(self, gate: GateMachine = GATE, name: str = "scheduler summary") -> None:
        super().__init__(gate, name)
        self.state_sorts = {"h": z3.Int}
        self.obs_sorts = {k: z3.Bool if k.startswith("head") else z3.Int for k in FIGURES}
        self.out_sorts.update({k: z3.Int for k in ("prefill_tokens", "decode_seqs")})

    def init(self, p: Vars, s: Vars) -> z3.BoolRef:
        return s["h"] == 0

    def obs_ok(self, p: Vars, s: Vars, o: Vars) -> z3.BoolRef:
        return pass_facts(p, o)

    def commands(self, p: Vars, s: Vars, o: Vars) -> Sequence[Command]:
        w, d = self.observe(p, o)
        cmds = []
        for gc in self.gate_commands(p, s, o):
            out = dict(gc.out)
            out.update({"w": w, "decode_seqs": d})
            out["prefill_tokens"] = z3.If(gc.out["fire"], o["planned"], 0)
            cmds.append(Command(gc.name, gc.guard, out, {"h": gc.next["h"]}))
        return cmds
