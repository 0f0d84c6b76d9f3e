"""Deliberately broken stall gates: each must be refuted by some V obligation.

Most change one rule of ``StallGateMachine``; the ``lifted`` ones stack the real
valve on a broken ``GATE`` (a ``densegate.proofs.gate_mutants`` class), so the
gate's own slips are shown to stay visible with the valve in front of them.
"""

from __future__ import annotations

from collections.abc import Sequence

import z3

from densegate.proofs.common import named_mutant, patch
from densegate.proofs.gate_mutants import GATE_MUTANTS
from densegate.proofs.prover import Mutant
from densegate.spec.gate import GateMachine
from densegate.spec.machine import Command, Vars
from densegate.spec.stall_gate import StallGateMachine

__all__ = ["STALL_GATE_MUTANTS", "stall_gate_mutant"]


class _StallOffByOne(StallGateMachine):
    def stalled(self, p: Vars, s: Vars, o: Vars) -> z3.BoolRef:
        return z3.And(p["S"] > 0, self.memory(p, s, o)["n"] > p["S"])


class _StallZeroNotOff(StallGateMachine):
    def stalled(self, p: Vars, s: Vars, o: Vars) -> z3.BoolRef:
        return self.memory(p, s, o)["n"] >= p["S"]


class _GrowthNotSeen(StallGateMachine):
    def memory(self, p: Vars, s: Vars, o: Vars) -> dict[str, z3.ExprRef]:
        return {"q": o["w"], "n": s["n"] + 1}


class _MemoryOnlyWhenThin(StallGateMachine):
    """The memory is kept on BUDGET/HOLD/STALL passes only: a fire leaves it stale."""

    def commands(self, p: Vars, s: Vars, o: Vars) -> Sequence[Command]:
        cmds = super().commands(p, s, o)
        for name in ("EMPTY", "DISABLED", "NO_DECODE", "DENSE"):
            cmds = patch(cmds, name, next={"h": z3.IntVal(0), "q": s["q"], "n": s["n"]})
        return cmds


class _StallKeepsCounter(StallGateMachine):
    def commands(self, p: Vars, s: Vars, o: Vars) -> Sequence[Command]:
        cmds = super().commands(p, s, o)
        stall = next(c for c in cmds if c.name == "STALL")
        return patch(cmds, "STALL", next=dict(stall.next) | {"h": s["h"]})


class _GrowthResetsBudget(StallGateMachine):
    def commands(self, p: Vars, s: Vars, o: Vars) -> Sequence[Command]:
        cmds = super().commands(p, s, o)
        hold = next(c for c in cmds if c.name == "HOLD")
        restarted = z3.If(o["w"] > s["q"], z3.IntVal(1), s["h"] + 1)
        return patch(cmds, "HOLD", next=dict(hold.next) | {"h": restarted})


class _StallGap(StallGateMachine):
    def commands(self, p: Vars, s: Vars, o: Vars) -> Sequence[Command]:
        cmds = super().commands(p, s, o)
        stall = next(c for c in cmds if c.name == "STALL")
        strict = z3.And(stall.guard, self.memory(p, s, o)["n"] > p["S"])
        return patch(cmds, "STALL", guard=strict)


class _StallIgnoresEnabled(StallGateMachine):
    def commands(self, p: Vars, s: Vars, o: Vars) -> Sequence[Command]:
        c = self.conditions(p, s, o)
        thin = z3.And(c.waiting, c.decoding, z3.Not(c.dense))  # forgets enabled
        guard = z3.And(thin, self.stalled(p, s, o))
        return patch(super().commands(p, s, o), "STALL", guard=guard)


class _StallBeforeDense(StallGateMachine):
    """STALL judged before DENSE: a stalled dense pass is reported as STALL."""

    def commands(self, p: Vars, s: Vars, o: Vars) -> Sequence[Command]:
        c = self.conditions(p, s, o)
        live = z3.And(c.waiting, c.enabled, c.decoding)
        stalled = self.stalled(p, s, o)
        cmds = patch(super().commands(p, s, o), "STALL", guard=z3.And(live, stalled))
        dense = next(x for x in cmds if x.name == "DENSE")
        return patch(cmds, "DENSE", guard=z3.And(dense.guard, z3.Not(stalled)))


def _lifted(gate_mutant: str) -> type[StallGateMachine]:
    """The real valve stacked on one of ``GATE``'s broken variants."""
    base = type(GATE_MUTANTS[gate_mutant].machine)
    assert issubclass(base, GateMachine)
    return type(f"_Stall_{gate_mutant}", (StallGateMachine, base), {})


_CATALOG: dict[str, tuple[type[StallGateMachine], str]] = {
    "stall_off_by_one": (_StallOffByOne, "STALL needs n > S: one more quiet pass than asked"),
    "stall_zero_not_off": (
        _StallZeroNotOff,
        "stall_passes = 0 means 'stalled at once' instead of 'valve off'",
    ),
    "growth_not_seen": (_GrowthNotSeen, "the quiet count never restarts when the fill grows"),
    "memory_only_when_thin": (
        _MemoryOnlyWhenThin,
        "the stall memory is not updated on EMPTY/DISABLED/NO_DECODE/DENSE passes",
    ),
    "stall_keeps_counter": (_StallKeepsCounter, "a STALL fire leaves the hold counter as it was"),
    "growth_resets_budget": (
        _GrowthResetsBudget,
        "a growing fill restarts the hold budget (steady arrivals hold forever)",
    ),
    "stall_gap": (_StallGap, "STALL guard n > S leaves n = S with no command"),
    "stall_ignores_enabled": (
        _StallIgnoresEnabled,
        "STALL guard forgets enabled, overlapping DISABLED",
    ),
    "stall_before_dense": (_StallBeforeDense, "STALL judged before DENSE"),
    "lifted_hold_not_counted": (
        _lifted("hold_not_counted"),
        "GATE's hold_not_counted under the valve: a HOLD does not advance the counter",
    ),
    "lifted_budget_off_by_one": (
        _lifted("budget_off_by_one"),
        "GATE's budget_off_by_one under the valve: BUDGET at h >= K",
    ),
    "lifted_tail_escape_dropped": (
        _lifted("tail_escape_dropped"),
        "GATE's tail_escape_dropped under the valve: holds with nothing decoding",
    ),
}


def stall_gate_mutant(name: str) -> Mutant:
    cls, description = _CATALOG[name]
    return named_mutant("stall_gate", name, description, cls())


STALL_GATE_MUTANTS: dict[str, Mutant] = {name: stall_gate_mutant(name) for name in _CATALOG}
