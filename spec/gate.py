"""The dense prefill gate (one rank) as a Z3 guarded-command machine.

Parameters ``B`` (dense_tokens), ``K`` (max_hold_passes), ``enabled``; state
``h`` (passes the current waiting episode has been held); observation ``w``
(tokens the pass could really admit, capped by the caller) and ``d`` (sequences
that decode this pass). The six commands mirror the rule order in docs/ARCHITECTURE.md, each
guard spelled out so that the prover, not the order of an if/else chain, shows
they partition every (state, observation).

Broken variants for the proofs subclass ``GateMachine`` and override
``conditions`` or ``commands``; nothing else restates the machine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import z3

from densegate.spec.machine import Command, Machine, Vars

__all__ = ["GATE", "REASONS", "GateConditions", "GateMachine", "Reason", "reason"]

REASONS = ("EMPTY", "DISABLED", "NO_DECODE", "DENSE", "BUDGET", "HOLD")
Reason, _reason_values = z3.EnumSort("Reason", list(REASONS))
_BY_NAME = dict(zip(REASONS, _reason_values, strict=True))


def reason(name: str) -> z3.ExprRef:
    """The Z3 constant of a reason, by the name ``densegate.impl.Reason`` uses."""
    return _BY_NAME[name]


def _reason_var(name: str) -> z3.ExprRef:
    return z3.Const(name, Reason)


@dataclass(frozen=True)
class GateConditions:
    """The gate's atomic tests; commands are built from these alone."""

    waiting: z3.BoolRef
    enabled: z3.BoolRef
    decoding: z3.BoolRef
    dense: z3.BoolRef
    spent: z3.BoolRef


class GateMachine(Machine):
    """FIRE/HOLD per pass; every FIRE resets ``h``, every HOLD increments it."""

    def __init__(self) -> None:
        self.name = "gate"
        self.param_sorts = {"B": z3.Int, "K": z3.Int, "enabled": z3.Bool}
        self.state_sorts = {"h": z3.Int}
        self.obs_sorts = {"w": z3.Int, "d": z3.Int}
        self.out_sorts = {"fire": z3.Bool, "reason": _reason_var}

    def param_ok(self, p: Vars) -> z3.BoolRef:
        return z3.And(p["B"] >= 1, p["K"] >= 1)

    def init(self, p: Vars, s: Vars) -> z3.BoolRef:
        return s["h"] == 0

    def obs_ok(self, p: Vars, s: Vars, o: Vars) -> z3.BoolRef:
        return z3.And(o["w"] >= 0, o["d"] >= 0)

    def conditions(self, p: Vars, s: Vars, o: Vars) -> GateConditions:
        return GateConditions(
            waiting=o["w"] > 0,
            enabled=p["enabled"],
            decoding=o["d"] > 0,
            dense=o["w"] >= p["B"],
            spent=s["h"] + 1 >= p["K"],
        )

    def commands(self, p: Vars, s: Vars, o: Vars) -> Sequence[Command]:
        c = self.conditions(p, s, o)
        live = z3.And(c.waiting, c.enabled, c.decoding)
        under = z3.And(live, z3.Not(c.dense))
        return (
            _fire("EMPTY", z3.Not(c.waiting)),
            _fire("DISABLED", z3.And(c.waiting, z3.Not(c.enabled))),
            _fire("NO_DECODE", z3.And(c.waiting, c.enabled, z3.Not(c.decoding))),
            _fire("DENSE", z3.And(live, c.dense)),
            _fire("BUDGET", z3.And(under, c.spent)),
            Command(
                "HOLD",
                z3.And(under, z3.Not(c.spent)),
                {"fire": z3.BoolVal(False), "reason": reason("HOLD")},
                {"h": s["h"] + 1},
            ),
        )


def _fire(name: str, guard: z3.BoolRef) -> Command:
    return Command(
        name, guard, {"fire": z3.BoolVal(True), "reason": reason(name)}, {"h": z3.IntVal(0)}
    )


GATE = GateMachine()
"""The gate as specified; proofs and agreement tests use this one instance."""
