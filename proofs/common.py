"""Proof pieces the one-rank gate and the aligned gate share, and the mutant helpers.

Both gates count held passes in ``h`` against a budget ``K`` and reset it on
every fire, so bounded hold, the counter bound and the no-deadlock rank are
stated once here and proved of each machine by its own obligations.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import z3

from densegate.proofs.obligation import Monitor, Mutant, Prop, Step
from densegate.spec.machine import Command, Machine, Vars

__all__ = [
    "AGE",
    "age_is_hold",
    "bounded_hold",
    "hold_bounded",
    "hold_rank",
    "named_mutant",
    "one_command_and_ranked",
    "patch",
    "true_invariant",
]


def true_invariant(p: Vars, s: Vars) -> z3.BoolRef:
    """No strengthening: the property follows from any state and one step."""
    return z3.BoolVal(True)


def hold_bounded(p: Vars, s: Mapping[str, z3.ExprRef]) -> z3.BoolRef:
    """The counter bound 0 <= h < K."""
    return z3.And(s["h"] >= 0, s["h"] < p["K"])


def hold_rank(p: Vars, s: Mapping[str, z3.ExprRef]) -> z3.ArithRef:
    """K-1-h: what every HOLD must decrease, so holds cannot go on forever."""
    return p["K"] - 1 - s["h"]


# age: consecutive passes (ticks) the current waiting episode has been held. The
# machine never reads it, so it measures what h only claims to count (and counts
# any hold alike: the gate's, or a broken machine's extra delayer's).
AGE = Monitor(
    "age",
    z3.Int,
    init=lambda p: z3.IntVal(0),
    update=lambda st: z3.If(st.out["fire"], 0, st.s["age"] + 1),
)


def age_is_hold(p: Vars, s: Vars) -> z3.BoolRef:
    """The invariant behind bounded hold: h is bounded and counts exactly the episode's age."""
    return z3.And(hold_bounded(p, s), s["age"] == s["h"])


def bounded_hold(budget: z3.ExprRef) -> Prop:
    """Waiting work fires within K passes (age < K); ``budget`` (BUDGET) only after K-1 holds."""

    def prop(st: Step) -> z3.BoolRef:
        K = st.p["K"]
        return z3.And(
            st.s2["age"] < K,
            z3.Implies(st.out["reason"] == budget, st.s["age"] == K - 1),
        )

    return prop


def one_command_and_ranked(st: Step) -> z3.BoolRef:
    """Exactly one command is enabled, and every HOLD decreases ``hold_rank`` from >= 0."""
    one = z3.Sum([z3.If(c.guard, 1, 0) for c in st.commands]) == 1
    holds = [c for c in st.commands if z3.is_false(z3.simplify(c.out["fire"]))]
    now = hold_rank(st.p, st.s)
    ranked = [z3.Implies(c.guard, z3.And(now >= 0, hold_rank(st.p, c.next) < now)) for c in holds]
    return z3.And(one, *ranked)


def patch(cmds: Sequence[Command], name: str, **changes: object) -> tuple[Command, ...]:
    """``cmds`` with the command called ``name`` changed: a one-rule slip."""
    return tuple(replace(c, **changes) if c.name == name else c for c in cmds)  # type: ignore[arg-type]


def named_mutant(level: str, name: str, description: str, machine: Machine) -> Mutant:
    """A mutant whose machine is named ``level[name]``, as reports and traces show it."""
    machine.name = f"{level}[{name}]"
    return Mutant(name, description, machine)
