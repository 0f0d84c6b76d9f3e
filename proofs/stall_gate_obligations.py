"""Obligations V1-V4 over the one-rank gate with the STALL valve, for every parameter value.

V for valve: proved at the gate level beside P1-P7 (which stay about ``GATE``).
The stall property is stated over monitors (the previous pass's fill and the
passes since it last grew) that the machine never reads, so a machine that
miscounts its own memory cannot make the property agree with it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import z3

from densegate.proofs.common import (
    AGE,
    age_is_hold,
    bounded_hold,
    hold_bounded,
    one_command_and_ranked,
)
from densegate.proofs.prover import Monitor, Mutant, Obligation, Prop, Step
from densegate.proofs.stall_gate_mutants import STALL_GATE_MUTANTS
from densegate.spec.machine import Machine, Vars
from densegate.spec.properties import statement
from densegate.spec.stall_gate import (
    STALL_GATE,
    StallGateMachine,
    reason,
    same_reason,
    valve_off,
)

__all__ = ["STALL_GATE_OBLIGATIONS"]


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
