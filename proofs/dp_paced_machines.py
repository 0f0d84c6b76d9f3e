"""The two small machines the paced obligations D11 and D12 are proved of.

``PacedQueue`` (D11) is one request's rank queue composed with the aligned gate: the
gate's own commands (``densegate.spec.dp_gate.DP``, or a broken one), each also moving
``r``, the prefill tokens still ahead of the request on its rank (its own included),
from ``Q`` at the start. The scheduler is not modelled; what the bound needs of it is
an *assumption*, stated as the observation's constraints on ``x``, the tokens of those
``r`` that the tick prefills: a HOLD prefills none, and a FIRE prefills at least
``min(r, cmin)`` of them, or ``min(r, cmin, cap)`` under a cap (all a cap below ``cmin``
would allow). ``cmin`` is the spec's least prefill a fire runs; the gate's cap is
any value in ``[cmin, cmax]`` (``DP.param_ok``). D12 proves the cap rule never cuts a
fire below ``min(planned, cap)`` with chunked prefill on, which is where the assumption
comes from; it is not proved of the scheduler here.

``CapRule`` (D12) is ``densegate.impl.sched.cap.capped_prefill`` as a fold: one planned
item per step (an owed chunk, or, once they are done, an admission), ``left`` of the cap
still to give. An item is cut to what is left; the fold stops at the first item that
gets nothing: nothing is left, or an admission does not fit whole with chunked prefill
off. ``tests/test_sched_cap.py`` runs the shipped function beside it.
"""

from __future__ import annotations

from collections.abc import Sequence

import z3

from densegate.spec.dp_gate import DP, DpMachine
from densegate.spec.machine import Command, Machine, Vars

__all__ = ["CAP_RULE", "PACED_QUEUE", "CapRule", "PacedQueue", "least", "outcome"]


def least(*xs: z3.ArithRef) -> z3.ArithRef:
    """The smallest of ``xs``, as one z3 term."""
    out = xs[0]
    for x in xs[1:]:
        out = z3.If(x < out, x, out)
    return out


def outcome(cmds: Sequence[Command], key: str) -> z3.ExprRef:
    """Output ``key`` of the enabled command (exactly one is: D4)."""
    out = cmds[-1].out[key]
    for c in reversed(cmds[:-1]):
        out = z3.If(c.guard, c.out[key], out)
    return out


class PacedQueue(Machine):
    """``gate`` on one tick, and the request's tokens ahead on its rank, ``r``."""

    def __init__(self, gate: DpMachine = DP, name: str = "paced queue") -> None:
        self.gate = gate
        self.name = name
        self.param_sorts = dict(gate.param_sorts) | {"Q": z3.Int}
        self.state_sorts = dict(gate.state_sorts) | {"r": z3.Int}
        self.obs_sorts = dict(gate.obs_sorts) | {"x": z3.Int}
        self.out_sorts = dict(gate.out_sorts)

    def _gate(self, s: Vars, o: Vars) -> tuple[Vars, Vars]:
        return self._state(s), {k: o[k] for k in self.gate.obs_sorts}

    def _state(self, s: Vars) -> Vars:
        return {k: s[k] for k in self.gate.state_sorts}

    def param_ok(self, p: Vars) -> z3.BoolRef:
        return z3.And(self.gate.param_ok(p), p["Q"] >= 1)

    def init(self, p: Vars, s: Vars) -> z3.BoolRef:
        return z3.And(self.gate.init(p, self._state(s)), s["r"] == p["Q"])

    def obs_ok(self, p: Vars, s: Vars, o: Vars) -> z3.BoolRef:
        """The gate's reduced vector, any of them, and the scheduler's assumption on ``x``."""
        gs, go = self._gate(s, o)
        cmds = self.gate.commands(p, gs, go)
        fire, cap = outcome(cmds, "fire"), outcome(cmds, "cap")
        r, x = s["r"], o["x"]
        floor = z3.If(cap > 0, least(r, p["cmin"], cap), least(r, p["cmin"]))
        return z3.And(
            self.gate.obs_ok(p, gs, go),
            x >= 0,
            x <= r,
            z3.Implies(z3.Not(fire), x == 0),
            z3.Implies(fire, x >= floor),
        )

    def commands(self, p: Vars, s: Vars, o: Vars) -> Sequence[Command]:
        gs, go = self._gate(s, o)
        return [
            Command(c.name, c.guard, c.out, dict(c.next) | {"r": s["r"] - o["x"]})
            for c in self.gate.commands(p, gs, go)
        ]


class CapRule(Machine):
    """``capped_prefill`` one planned item per step: ``n`` tokens, ``a`` an admission."""

    def __init__(self, name: str = "cap rule") -> None:
        self.name = name
        self.param_sorts = {"cap": z3.Int, "chunked": z3.Bool}
        self.state_sorts = {"left": z3.Int, "stop": z3.Bool, "adm": z3.Bool}
        self.obs_sorts = {"n": z3.Int, "a": z3.Bool}
        self.out_sorts = {"take": z3.Int}

    def param_ok(self, p: Vars) -> z3.BoolRef:
        return p["cap"] >= 1

    def init(self, p: Vars, s: Vars) -> z3.BoolRef:
        return z3.And(s["left"] == p["cap"], z3.Not(s["stop"]), z3.Not(s["adm"]))

    def obs_ok(self, p: Vars, s: Vars, o: Vars) -> z3.BoolRef:
        """Planned items are >= 1 token; the owed chunks come first, then admissions."""
        return z3.And(o["n"] >= 1, z3.Implies(s["adm"], o["a"]))

    def stops(self, p: Vars, s: Vars, o: Vars) -> z3.BoolRef:
        """The item gets nothing, nor does any after it."""
        whole_only = z3.And(o["a"], z3.Not(p["chunked"]))
        return z3.Or(s["stop"], s["left"] == 0, z3.And(whole_only, o["n"] > s["left"]))

    def take(self, p: Vars, s: Vars, o: Vars) -> z3.ArithRef:
        """What a kept item gets: its planned size, cut to what is left of the cap."""
        return least(o["n"], s["left"])

    def commands(self, p: Vars, s: Vars, o: Vars) -> Sequence[Command]:
        stop = self.stops(p, s, o)
        adm = z3.Or(s["adm"], o["a"])
        take = self.take(p, s, o)
        return [
            Command(
                "STOP",
                stop,
                {"take": z3.IntVal(0)},
                {"left": s["left"], "stop": z3.BoolVal(True), "adm": adm},
            ),
            Command(
                "KEEP",
                z3.Not(stop),
                {"take": take},
                {"left": s["left"] - take, "stop": s["stop"], "adm": adm},
            ),
        ]


PACED_QUEUE = PacedQueue()
CAP_RULE = CapRule()
