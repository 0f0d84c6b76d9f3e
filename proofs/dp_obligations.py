"""D1-D7 over the aligned gate, for every parameter value and rank count, and the broken
aligned gates they refute.

N is a symbolic parameter (N >= 1, unbounded), so nothing here is checked for "2 or 4
ranks": agreement (D1) is proved on the two-rank product, which covers every pair of the
N ranks at once; refinement (D6) on the product with the single-rank gate. Most broken
gates change one condition. ``two_budgets`` is the original's composition (flaw 4 in
docs/ARCHITECTURE.md): a cross-rank delayer with a pass budget of its own in front of a
per-rank gate with another, so the worst-case hold is their sum. The ``local_*`` and
``wall_clock_stall`` ones let a rank-local input decide, which made the original's ranks
disagree.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import ClassVar

import z3

from densegate.proofs.common import (
    AGE,
    age_is_hold,
    bounded_hold,
    hold_bounded,
    named_mutant,
    one_command_and_ranked,
    patch,
    true_invariant,
)
from densegate.proofs.obligation import Monitor, Mutant, Obligation, Prop, Step
from densegate.spec.dp_gate import DP, DpConditions, DpMachine, one_rank, pair, reason, same_reason
from densegate.spec.machine import Command, Machine, Vars
from densegate.spec.properties import statement

__all__ = ["DP_MUTANTS", "DP_OBLIGATIONS"]


def _cond(**fields: object) -> type[DpMachine]:
    """The spec machine with some atomic conditions replaced: a one-condition slip."""

    class _M(DpMachine):
        def conditions(self, p: Vars, s: Vars, o: Vars) -> DpConditions:
            c = super().conditions(p, s, o)
            return replace(c, **{k: f(self, p, s, o, c) for k, f in fields.items()})  # type: ignore[operator]

    return _M


def _counts(command: str, h: Callable[[Vars, Vars, Vars], z3.ExprRef]) -> type[DpMachine]:
    """The spec machine with one command's next counter replaced: a one-rule slip."""

    class _M(DpMachine):
        def commands(self, p: Vars, s: Vars, o: Vars) -> Sequence[Command]:
            cmds = super().commands(p, s, o)
            was = next(c for c in cmds if c.name == command)
            return patch(cmds, command, next=dict(was.next) | {"h": h(p, s, o)})

    return _M


# -- the original's composition: two budgets in short circuit ---------------------------


class _TwoBudgets(DpMachine):
    """A delayer (counter ``x``) holds until every rank is ready or ITS budget is spent;
    only then is the per-rank gate (counter ``h``) consulted, with a budget of its own."""

    delayer_first: ClassVar[bool] = False
    """True: the delayer runs even when the gate is disabled, as in the original."""

    def __init__(self) -> None:
        super().__init__()
        self.state_sorts = {**self.state_sorts, "x": z3.Int}

    def init(self, p: Vars, s: Vars) -> z3.BoolRef:
        return z3.And(super().init(p, s), s["x"] == 0)

    def commands(self, p: Vars, s: Vars, o: Vars) -> Sequence[Command]:
        c = self.conditions(p, s, o)
        mem = self.memory(p, s, o)
        allows = z3.Or(c.dense, s["x"] + 1 >= p["K"])  # delayer: all ranks ready, or expired
        reset = {"h": z3.IntVal(0), "x": z3.IntVal(0), **mem}
        gate_on = z3.BoolVal(True) if self.delayer_first else c.enabled
        gate_live = z3.And(c.waiting, c.enabled, c.decoding, allows)

        def fire(name: str, guard: z3.BoolRef) -> Command:
            return Command(name, guard, {"fire": z3.BoolVal(True), "reason": reason(name)}, reset)

        def hold(name: str, guard: z3.BoolRef, nxt: Mapping[str, z3.ExprRef]) -> Command:
            out = {"fire": z3.BoolVal(False), "reason": reason("HOLD")}
            return Command(name, guard, out, {**nxt, **mem})

        pre = allows if self.delayer_first else z3.BoolVal(True)
        delay_needs = c.waiting if self.delayer_first else z3.And(c.waiting, c.enabled, c.decoding)
        return (
            fire("EMPTY", z3.Not(c.waiting)),
            hold(
                "DELAY",
                z3.And(delay_needs, gate_on, z3.Not(allows)),
                {"h": s["h"], "x": s["x"] + 1},
            ),
            fire("DISABLED", z3.And(c.waiting, z3.Not(c.enabled), pre)),
            fire("NO_DECODE", z3.And(c.waiting, c.enabled, z3.Not(c.decoding), pre)),
            fire("DENSE", z3.And(gate_live, c.dense)),
            fire("BUDGET", z3.And(gate_live, z3.Not(c.dense), c.spent)),
            hold(
                "HOLD",
                z3.And(gate_live, z3.Not(c.dense), z3.Not(c.spent)),
                {"h": s["h"] + 1, "x": s["x"]},
            ),
        )


class _DelayerIgnoresDisabled(_TwoBudgets):
    delayer_first = True


# -- a rank-local clock leaking into the decision ----------------------------------------


class _WallClockStall(DpMachine):
    def memory(self, p: Vars, s: Vars, o: Vars) -> dict[str, z3.ExprRef]:
        return {"q": o["F"], "g": z3.If(o["F"] > s["q"], o["clock"], s["g"])}

    def conditions(self, p: Vars, s: Vars, o: Vars) -> DpConditions:
        c = super().conditions(p, s, o)
        quiet = o["clock"] - self.memory(p, s, o)["g"]
        return replace(c, stalled=z3.And(p["S"] > 0, quiet >= p["S"]))


class _StallGap(DpMachine):
    def commands(self, p: Vars, s: Vars, o: Vars) -> Sequence[Command]:
        cmds = super().commands(p, s, o)
        stall = next(c for c in cmds if c.name == "STALL")
        quiet = o["t"] - self.memory(p, s, o)["g"]
        return patch(cmds, "STALL", guard=z3.And(stall.guard, quiet > p["S"]))


class _KvOverlap(DpMachine):
    def commands(self, p: Vars, s: Vars, o: Vars) -> Sequence[Command]:
        c = self.conditions(p, s, o)
        guard = z3.And(c.waiting, c.decoding, c.pressured)  # forgets enabled
        return patch(super().commands(p, s, o), "KV_PRESSURE", guard=guard)


_CATALOG: dict[str, tuple[type[DpMachine], str]] = {
    "two_budgets": (
        _TwoBudgets,
        "cross-rank delayer with its own K-pass budget in front of a per-rank gate with another "
        "(flaw 4): the holds add up",
    ),
    "delayer_ignores_disabled": (
        _DelayerIgnoresDisabled,
        "the cross-rank delayer holds even when the gate is disabled",
    ),
    "local_dense": (
        _cond(dense=lambda m, p, s, o, c: o["lf"] >= p["T"]),
        "density judged on this rank's own queue (the original's local 'prefillable')",
    ),
    "local_tail_escape": (
        _cond(decoding=lambda m, p, s, o, c: o["ld"] > 0),
        "tail escape on this rank's decodes only",
    ),
    "wall_clock_stall": (
        _WallClockStall,
        "stall valve timed by this rank's wall clock instead of the shared tick",
    ),
    "local_hold_counter": (
        _counts("HOLD", lambda p, s, o: z3.If(o["lw"] == 1, s["h"] + 1, s["h"])),
        "hold counter advances only on ranks with waiting work of their own",
    ),
    "tail_escape_dropped": (
        _cond(decoding=lambda m, p, s, o, c: z3.BoolVal(True)),
        "no tail escape: holds while no rank decodes",
    ),
    "budget_off_by_one": (
        _cond(spent=lambda m, p, s, o, c: s["h"] >= p["K"]),
        "budget fires at h >= K instead of h + 1 >= K",
    ),
    "count_while_empty": (
        _counts("EMPTY", lambda p, s, o: s["h"] + 1),
        "counter advances on ticks where nothing waits",
    ),
    "hold_not_counted": (
        _counts("HOLD", lambda p, s, o: s["h"]),
        "a HOLD does not advance the counter",
    ),
    "growth_resets_budget": (
        _counts("HOLD", lambda p, s, o: z3.If(o["F"] > s["q"], z3.IntVal(1), s["h"] + 1)),
        "a growing queue restarts the hold budget (steady arrivals hold forever)",
    ),
    "stall_gap": (_StallGap, "STALL guard t - g > S leaves t - g = S uncovered"),
    "kv_overlap": (_KvOverlap, "KV_PRESSURE guard forgets enabled, overlapping DISABLED"),
    "disabled_ignored": (
        _cond(enabled=lambda m, p, s, o, c: z3.BoolVal(True)),
        "the enabled flag is ignored",
    ),
    "dense_strict": (
        _cond(dense=lambda m, p, s, o, c: z3.And(o["W"] == p["N"], o["F"] > p["T"] * p["N"])),
        "dense test F > T*N instead of F >= T*N",
    ),
    "dense_any_rank": (
        _cond(dense=lambda m, p, s, o, c: z3.And(o["W"] >= 1, o["F"] >= p["T"] * p["N"])),
        "dense without every rank waiting: idle ranks decode through a mixed tick",
    ),
    "dense_unscaled": (
        _cond(dense=lambda m, p, s, o, c: z3.And(o["W"] == p["N"], o["F"] >= p["T"])),
        "fill threshold not scaled by the number of ranks",
    ),
    "stall_zero_not_off": (
        _cond(
            stalled=lambda m, p, s, o, c: o["t"] - m.memory(p, s, o)["g"] >= p["S"],
        ),
        "stall_ticks = 0 means 'stalled at once' instead of 'valve off'",
    ),
    "kv_valve_ignores_flag": (
        _cond(pressured=lambda m, p, s, o, c: o["P"] > 0),
        "KV-pressure valve fires even when configured off",
    ),
}


DP_MUTANTS: dict[str, Mutant] = {
    name: named_mutant("dp", name, description, cls())
    for name, (cls, description) in _CATALOG.items()
}
"""Every broken aligned gate (as a single rank), by name; each is refuted by a D obligation."""


# -- the obligations ----------------------------------------------------------------------


_READABLE = {"B": 8, "K": 4, "N": 3, "S": 3}


def _readable(p: Vars) -> z3.BoolRef:
    return z3.And(*[p[k] <= v for k, v in _READABLE.items() if k in p])


def _two_budgets_visible(p: Vars) -> z3.BoolRef:
    """K >= 3 so a composed hold shows one budget spent and the next one started."""
    return z3.And(_readable(p), p["K"] >= 3)


def _dense(p: Vars, o: Vars) -> z3.BoolRef:
    """Every rank waits and the aggregate reaches T tokens per rank: stated apart from the
    machine, so a mutant that changes the machine's test cannot change the property."""
    return z3.And(o["W"] == p["N"], o["F"] >= p["T"] * p["N"])


def _d1(st: Step) -> z3.BoolRef:
    same_out = [st.out[f"{k}1"] == st.out[f"{k}2"] for k in ("fire", "reason")]
    keys = sorted({k[:-1] for k in st.s2})
    same_next = [st.s2[f"{k}1"] == st.s2[f"{k}2"] for k in keys]
    return z3.And(*same_out, *same_next)


def _d1_inv(p: Vars, s: Vars) -> z3.BoolRef:
    keys = sorted({k[:-1] for k in s})
    return z3.And(*[s[f"{k}1"] == s[f"{k}2"] for k in keys])


def _d3(st: Step) -> z3.BoolRef:
    o = st.o
    return z3.And(
        z3.Implies(z3.And(o["W"] > 0, o["D"] == 0), st.out["fire"]),
        z3.Implies(st.out["reason"] == reason("NO_DECODE"), o["D"] == 0),
    )


def _d5(st: Step) -> z3.BoolRef:
    return z3.Implies(z3.Not(st.p["enabled"]), z3.And(st.out["fire"], st.s2["h"] == 0))


def _d6(st: Step) -> z3.BoolRef:
    return z3.And(
        st.out["fire"] == st.out["dp_fire"],
        same_reason(st.out["reason"], st.out["dp_reason"]),
        st.s2["h"] == st.s2["dp_h"],
    )


def _d7(st: Step) -> z3.BoolRef:
    p, o = st.p, st.o
    return z3.And(
        z3.Implies(st.out["reason"] == reason("DENSE"), _dense(p, o)),
        z3.Implies(
            z3.Not(st.out["fire"]),
            z3.And(p["enabled"], o["W"] > 0, o["D"] > 0, z3.Not(_dense(p, o))),
        ),
    )


def _wrap(wrap: Callable[[DpMachine], Machine], m: Mutant) -> Mutant:
    machine = m.machine
    assert isinstance(machine, DpMachine)
    return Mutant(m.name, m.description, wrap(machine))


def _ob(
    id: str,
    prop: Prop,
    invariant: Callable[[Vars, Vars], z3.BoolRef],
    mutants: Sequence[str],
    machine: Machine = DP,
    wrap: Callable[[DpMachine], Machine] | None = None,
    monitors: Sequence[Monitor] = (),
    needs_step: bool = True,
    readable: Callable[[Vars], z3.BoolRef] = _readable,
) -> Obligation:
    ms = [DP_MUTANTS[m] for m in mutants]
    return Obligation(
        id=id,
        level="dp",
        statement=statement(id),
        machine=machine,
        prop=prop,
        invariant=invariant,
        mutants=[_wrap(wrap, m) for m in ms] if wrap else ms,
        monitors=monitors,
        needs_step=needs_step,
        readable=readable,
    )


DP_OBLIGATIONS: list[Obligation] = [
    _ob(
        "D1",
        _d1,
        _d1_inv,
        ["local_dense", "local_tail_escape", "wall_clock_stall", "local_hold_counter"],
        machine=pair(DP),
        wrap=pair,
    ),
    _ob(
        "D2",
        bounded_hold(reason("BUDGET")),
        age_is_hold,
        [
            "two_budgets",
            "budget_off_by_one",
            "count_while_empty",
            "hold_not_counted",
            "growth_resets_budget",
        ],
        monitors=[AGE],
        readable=_two_budgets_visible,
    ),
    _ob(
        "D3",
        _d3,
        true_invariant,
        ["tail_escape_dropped", "local_tail_escape"],
    ),
    _ob(
        "D4",
        one_command_and_ranked,
        hold_bounded,
        ["stall_gap", "kv_overlap", "hold_not_counted", "growth_resets_budget"],
        needs_step=False,
    ),
    _ob(
        "D5",
        _d5,
        true_invariant,
        ["disabled_ignored", "delayer_ignores_disabled"],
    ),
    _ob(
        "D6",
        _d6,
        lambda p, s: s["h"] == s["dp_h"],
        [
            "two_budgets",
            "dense_strict",
            "stall_zero_not_off",
            "kv_valve_ignores_flag",
            "count_while_empty",
        ],
        machine=one_rank(DP),
        wrap=one_rank,
    ),
    _ob(
        "D7",
        _d7,
        true_invariant,
        ["dense_any_rank", "dense_unscaled", "dense_strict", "tail_escape_dropped"],
    ),
]
