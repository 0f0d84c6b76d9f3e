"""The one-rank gate with the STALL valve: ``GATE`` plus a memory of how the fill grows.

A burst's last requests are held for the whole budget ``K`` when nothing new
arrives that could fill the pass: holding longer cannot make it denser. The
valve fires such a pass once the waiting fill ``w`` has not grown for ``S``
passes (``S = 0``: off, exactly ``GATE``). It is the aligned gate's STALL
(``densegate.spec.dp_gate``) on one rank, counted in passes instead of ticks.

Extra parameter ``S`` (stall_passes); extra state ``q`` (the previous pass's
``w``) and ``n`` (passes since ``w`` last grew, this one included: 0 on a pass
where it grew). The memory is updated on every pass, whatever is decided.

The commands are ``GATE``'s own, not restated: STALL takes exactly the passes
on which ``GATE`` would spend its budget or hold (BUDGET or HOLD enabled) and
the fill has stalled; those two keep their guards minus the stalled passes.
Broken variants subclass ``StallGateMachine`` (or stack it on a broken
``GateMachine``) and override ``memory``, ``stalled`` or ``commands``.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import product

import z3

from densegate.spec import gate as single
from densegate.spec.machine import Command, Machine, Vars

__all__ = [
    "REASONS",
    "STALL_GATE",
    "StallGateMachine",
    "StallReason",
    "reason",
    "same_reason",
    "valve_off",
]

REASONS = (*single.REASONS, "STALL")
"""``GATE``'s six reasons and STALL (``densegate.impl.Reason`` names)."""
StallReason, _reason_values = z3.EnumSort("StallReason", list(REASONS))
_BY_NAME = dict(zip(REASONS, _reason_values, strict=True))


def reason(name: str) -> z3.ExprRef:
    """The Z3 constant of a reason, by the name ``densegate.impl.Reason`` uses."""
    return _BY_NAME[name]


def same_reason(gate_reason: z3.ExprRef, ours: z3.ExprRef) -> z3.BoolRef:
    """``GATE``'s reason and the stall gate's have the same name."""
    names = single.REASONS
    return z3.Or(*[z3.And(gate_reason == single.reason(n), ours == reason(n)) for n in names])


def _reason_var(name: str) -> z3.ExprRef:
    return z3.Const(name, StallReason)


class StallGateMachine(single.GateMachine):
    """``GATE`` with the stall memory ``q``, ``n`` and the STALL command before BUDGET."""

    def __init__(self) -> None:
        super().__init__()
        self.name = "stall_gate"
        self.param_sorts = {**self.param_sorts, "S": z3.Int}
        self.state_sorts = {**self.state_sorts, "q": z3.Int, "n": z3.Int}
        self.out_sorts = {"fire": z3.Bool, "reason": _reason_var}

    def param_ok(self, p: Vars) -> z3.BoolRef:
        return z3.And(super().param_ok(p), p["S"] >= 0)

    def init(self, p: Vars, s: Vars) -> z3.BoolRef:
        return z3.And(super().init(p, s), s["q"] == 0, s["n"] == 0)

    def memory(self, p: Vars, s: Vars, o: Vars) -> dict[str, z3.ExprRef]:
        """Next stall memory: the fill seen, and passes since it last grew."""
        return {"q": o["w"], "n": z3.If(o["w"] > s["q"], z3.IntVal(0), s["n"] + 1)}

    def stalled(self, p: Vars, s: Vars, o: Vars) -> z3.BoolRef:
        """The valve is on and the fill has not grown for ``S`` passes, this one included."""
        return z3.And(p["S"] > 0, self.memory(p, s, o)["n"] >= p["S"])

    def commands(self, p: Vars, s: Vars, o: Vars) -> Sequence[Command]:
        mem = self.memory(p, s, o)
        stalled = self.stalled(p, s, o)
        gate = list(super().commands(p, s, o))
        thin = z3.Or(*[c.guard for c in gate if c.name in ("BUDGET", "HOLD")])
        out: list[Command] = []
        for c in gate:
            guard = c.guard
            if c.name in ("BUDGET", "HOLD"):
                guard = z3.And(guard, z3.Not(stalled))
            if c.name == "BUDGET":
                out.append(_stall(z3.And(thin, stalled), mem))
            translated = {"fire": c.out["fire"], "reason": reason(str(c.out["reason"]))}
            out.append(Command(c.name, guard, translated, {**c.next, **mem}))
        return out


def _stall(guard: z3.BoolRef, mem: dict[str, z3.ExprRef]) -> Command:
    out = {"fire": z3.BoolVal(True), "reason": reason("STALL")}
    return Command("STALL", guard, out, {"h": z3.IntVal(0), **mem})


STALL_GATE = StallGateMachine()
"""The one-rank gate with the valve as specified; proofs and lockstep tests use this one."""


class _ValveOff(Machine):
    """``gate`` and ``stall`` with ``S = 0`` fed the same passes; the stall side is ``v_*``."""

    def __init__(self, stall: StallGateMachine, gate: Machine) -> None:
        self.stall, self.gate = stall, gate
        self.name = f"valve_off({stall.name})"
        self.param_sorts = dict(gate.param_sorts)
        self.state_sorts = dict(gate.state_sorts) | {
            f"v_{k}": v for k, v in stall.state_sorts.items()
        }
        self.obs_sorts = dict(gate.obs_sorts)
        self.out_sorts = dict(gate.out_sorts) | {f"v_{k}": v for k, v in stall.out_sorts.items()}

    def _split(self, p: Vars, s: Vars) -> tuple[Vars, Vars, Vars]:
        """The stall side's parameters (S = 0), the gate's state, the stall side's state."""
        sg = {k: s[k] for k in self.gate.state_sorts}
        return {**p, "S": z3.IntVal(0)}, sg, {k: s[f"v_{k}"] for k in self.stall.state_sorts}

    def param_ok(self, p: Vars) -> z3.BoolRef:
        return z3.And(self.gate.param_ok(p), self.stall.param_ok({**p, "S": z3.IntVal(0)}))

    def init(self, p: Vars, s: Vars) -> z3.BoolRef:
        sp, sg, sv = self._split(p, s)
        return z3.And(self.gate.init(p, sg), self.stall.init(sp, sv))

    def obs_ok(self, p: Vars, s: Vars, o: Vars) -> z3.BoolRef:
        sp, sg, sv = self._split(p, s)
        return z3.And(self.gate.obs_ok(p, sg, o), self.stall.obs_ok(sp, sv, o))

    def commands(self, p: Vars, s: Vars, o: Vars) -> Sequence[Command]:
        sp, sg, sv = self._split(p, s)
        pairs = product(self.gate.commands(p, sg, o), self.stall.commands(sp, sv, o))
        return [
            Command(
                f"{g.name}~{v.name}",
                z3.And(g.guard, v.guard),
                dict(g.out) | {f"v_{k}": x for k, x in v.out.items()},
                dict(g.next) | {f"v_{k}": x for k, x in v.next.items()},
            )
            for g, v in pairs
        ]


def valve_off(stall: StallGateMachine, gate: Machine = single.GATE) -> Machine:
    """The product that states "off is today's gate": ``stall`` at ``S = 0`` beside ``gate``."""
    return _ValveOff(stall, gate)
