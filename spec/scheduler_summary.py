"""The scheduler seen by its gate, for any number of requests: one pass, summarised.

What the gate's properties need from a pass is a handful of figures: the
prefill tokens planned, the decodes, and whether the head of the queue fits
and would be admitted by a fire. ``SchedulerSummary`` keeps the gate's counter
and takes those figures as its observation, constrained only by the *pass
facts* that hold for every queue length:

- the head of the queue that fits is admitted if the gate fires, and gives the
  pass at least one prefill token (``AdmissionScan``, proved by induction over
  the queue: obligation S7);
- nothing planned is negative (partial chunks and admissions never are).

So a property proved of the summary holds for the per-slot scheduler with any
number of requests and any block size, and obligation S8 checks, on the
per-slot machine itself, that each of its passes is a step of this summary.
"""

from __future__ import annotations

from collections.abc import Sequence

import z3

from densegate.spec.gate import GATE, GateMachine
from densegate.spec.machine import Command, Machine, Vars

__all__ = ["SchedulerSummary", "pass_facts"]


def pass_facts(
    planned: z3.ArithRef, d: z3.ArithRef, head_fits: z3.BoolRef, head_admit: z3.BoolRef
) -> z3.BoolRef:
    """What every pass of the scheduler guarantees, whatever the number of requests."""
    return z3.And(
        planned >= 0,
        d >= 0,
        z3.Implies(head_fits, z3.And(head_admit, planned > 0)),
    )


class SchedulerSummary(Machine):
    """The gate's counter ``h`` over summarised passes; parameters B, K, enabled."""

    def __init__(self, gate: GateMachine = GATE, name: str = "scheduler summary") -> None:
        self.gate = gate
        self.name = name
        self.param_sorts = dict(gate.param_sorts)
        self.state_sorts = {"h": z3.Int}
        self.obs_sorts = {
            "planned": z3.Int,
            "d": z3.Int,
            "head_fits": z3.Bool,
            "head_admit": z3.Bool,
        }
        self.out_sorts = {"fire": z3.Bool, "reason": gate.out_sorts["reason"]}
        self.out_sorts.update({k: z3.Int for k in ("w", "prefill_tokens", "decode_seqs")})

    def param_ok(self, p: Vars) -> z3.BoolRef:
        return self.gate.param_ok(p)

    def init(self, p: Vars, s: Vars) -> z3.BoolRef:
        return s["h"] == 0

    def obs_ok(self, p: Vars, s: Vars, o: Vars) -> z3.BoolRef:
        return pass_facts(o["planned"], o["d"], o["head_fits"], o["head_admit"])

    def observe(self, p: Vars, o: Vars) -> tuple[z3.ArithRef, z3.ArithRef]:
        """The gate's observation, as ``SchedulerMachine.observe`` makes it."""
        planned = o["planned"]
        return z3.If(planned < p["B"], planned, p["B"]), o["d"]

    def commands(self, p: Vars, s: Vars, o: Vars) -> Sequence[Command]:
        w, d = self.observe(p, o)
        cmds = []
        for gc in self.gate.commands(p, {"h": s["h"]}, {"w": w, "d": d}):
            fire = gc.out["fire"]
            out = dict(gc.out)
            out.update({"w": w, "decode_seqs": d})
            out["prefill_tokens"] = z3.If(fire, o["planned"], 0)
            cmds.append(Command(gc.name, gc.guard, out, {"h": gc.next["h"]}))
        return cmds
