"""V1-V4 over the one-rank gate with the STALL valve, for every parameter value, and the
broken stall gates they refute.

V for valve: proved at the gate level beside P1-P7 (which stay about ``GATE``).
The stall property is stated over monitors (the previous pass's fill and the
passes since it last grew) that the machine never reads, so a machine that
miscounts its own memory cannot make the property agree with it. Most broken
stall gates change one rule of ``StallGateMachine``; the ``lifted`` ones stack the
real valve on a broken ``GATE`` (one of ``GATE_MUTANTS``), so the gate's own slips
are shown to stay visible with the valve in front of them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import z3

from densegate.proofs.common import (
    AGE,
    age_is_hold,
    bounded_hold,
    hold_bounded,
    named_mutant,
    one_command_and_ranked,
    patch,
)
from densegate.proofs.gate_obligations import GATE_MUTANTS
from densegate.proofs.obligation import Monitor, Mutant, Obligation, Prop, Step
from densegate.spec.gate import GateMachine
from densegate.spec.machine import Command, Machine, Vars
from densegate.spec.properties import statement
from densegate.spec.stall_gate import (
    STALL_GATE,
    StallGateMachine,
    reason,
    same_reason,
    valve_off,
)

__all__ = ["STALL_GATE_MUTANTS", "STALL_GATE_OBLIGATIONS"]

# -- broken stall gates -------------------------------------------------------------------


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


STALL_GATE_MUTANTS: dict[str, Mutant] = {
    name: named_mutant("stall_gate", name, description, cls())
    for name, (cls, description) in _CATALOG.items()
}
"""Every broken stall gate, by name; each is refuted by at least one V obligation."""


# -- the obligations ----------------------------------------------------------------------


# The property's own record of the fill, kept apart from the machine's q and n.
LAST = Monitor("last", z3.Int, init=lambda p: z3.IntVal(0), update=lambda st: st.o["w"])
QUIET = Monitor(
    "quiet",
    z3.Int,
    init=lambda p: z3.IntVal(0),
    update=lambda st: z3.If(st.o["w"] > st.s["last"], 0, st.s["quiet"] + 1),
)


def _readable(p: Vars) -> z3.BoolRef:
    return z3.And(p["B"] <= 8, p["K"] <= 4, *([p["S"] <= 3] if "S" in p else []))


def _stalled(st: Step) -> z3.BoolRef:
    return z3.And(st.p["S"] > 0, st.s2["quiet"] >= st.p["S"])


def _thin(st: Step) -> z3.BoolRef:
    p, o = st.p, st.o
    return z3.And(p["enabled"], o["d"] > 0, o["w"] > 0, o["w"] < p["B"])


def _v2(st: Step) -> z3.BoolRef:
    return z3.And(
        z3.Implies(z3.And(_stalled(st), st.o["w"] > 0), st.out["fire"]),
        z3.Implies(st.out["reason"] == reason("STALL"), z3.And(_stalled(st), _thin(st))),
        z3.Implies(z3.Not(st.out["fire"]), z3.And(_thin(st), z3.Not(_stalled(st)))),
    )


def _v2_inv(p: Vars, s: Vars) -> z3.BoolRef:
    return z3.And(s["q"] == s["last"], s["n"] == s["quiet"], s["quiet"] >= 0)


def _v3(st: Step) -> z3.BoolRef:
    return z3.And(
        st.out["fire"] == st.out["v_fire"],
        same_reason(st.out["reason"], st.out["v_reason"]),
        st.s2["h"] == st.s2["v_h"],
    )


def _off(m: Mutant) -> Mutant:
    assert isinstance(m.machine, StallGateMachine)
    return Mutant(m.name, m.description, valve_off(m.machine))


def _ob(
    id: str,
    prop: Prop,
    invariant: Callable[[Vars, Vars], z3.BoolRef],
    mutants: Sequence[str],
    machine: Machine = STALL_GATE,
    wrap: Callable[[Mutant], Mutant] | None = None,
    monitors: Sequence[Monitor] = (),
    needs_step: bool = True,
) -> Obligation:
    ms = [STALL_GATE_MUTANTS[m] for m in mutants]
    return Obligation(
        id=id,
        level="gate",
        statement=statement(id),
        machine=machine,
        prop=prop,
        invariant=invariant,
        mutants=[wrap(m) for m in ms] if wrap else ms,
        monitors=monitors,
        needs_step=needs_step,
        readable=_readable,
    )


STALL_GATE_OBLIGATIONS: list[Obligation] = [
    _ob(
        "V1",
        bounded_hold(reason("BUDGET")),
        age_is_hold,
        [
            "stall_keeps_counter",
            "growth_resets_budget",
            "lifted_hold_not_counted",
            "lifted_budget_off_by_one",
        ],
        monitors=[AGE],
    ),
    _ob(
        "V2",
        _v2,
        _v2_inv,
        [
            "stall_off_by_one",
            "stall_zero_not_off",
            "growth_not_seen",
            "memory_only_when_thin",
            "stall_ignores_enabled",
            "stall_before_dense",
            "lifted_tail_escape_dropped",
        ],
        monitors=[LAST, QUIET],
    ),
    _ob(
        "V3",
        _v3,
        lambda p, s: s["h"] == s["v_h"],
        ["stall_zero_not_off", "growth_resets_budget"],
        machine=valve_off(STALL_GATE),
        wrap=_off,
    ),
    _ob(
        "V4",
        one_command_and_ranked,
        hold_bounded,
        ["stall_gap", "stall_ignores_enabled", "lifted_hold_not_counted"],
        needs_step=False,
    ),
]
