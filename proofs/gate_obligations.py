"""P1-P7 over the one-rank gate, for every parameter value, and the broken gates they refute.

Each obligation carries the inductive invariant that proves it and the broken gates it
refutes. A broken gate is a small subclass of the one spec machine that changes a single
rule, so the relation is still written once; a mutant that no obligation refutes means
the obligations prove less than they claim (every one in ``GATE_MUTANTS`` is used).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

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
from densegate.proofs.obligation import Mutant, Obligation
from densegate.spec.gate import GATE, GateConditions, GateMachine, reason
from densegate.spec.machine import Command, Vars
from densegate.spec.properties import statement

__all__ = ["GATE_MUTANTS", "GATE_OBLIGATIONS"]

# -- broken gates -------------------------------------------------------------------------


class _BudgetOffByOne(GateMachine):
    def conditions(self, p: Vars, s: Vars, o: Vars) -> GateConditions:
        return replace(super().conditions(p, s, o), spent=s["h"] >= p["K"])


class _TailEscapeDropped(GateMachine):
    def conditions(self, p: Vars, s: Vars, o: Vars) -> GateConditions:
        return replace(super().conditions(p, s, o), decoding=z3.BoolVal(True))


class _DenseStrict(GateMachine):
    def conditions(self, p: Vars, s: Vars, o: Vars) -> GateConditions:
        return replace(super().conditions(p, s, o), dense=o["w"] > p["B"])


class _DisabledIgnored(GateMachine):
    def conditions(self, p: Vars, s: Vars, o: Vars) -> GateConditions:
        return replace(super().conditions(p, s, o), enabled=z3.BoolVal(True))


class _CountWhileEmpty(GateMachine):
    def commands(self, p: Vars, s: Vars, o: Vars) -> Sequence[Command]:
        return patch(super().commands(p, s, o), "EMPTY", next={"h": s["h"] + 1})


class _NoResetAfterDense(GateMachine):
    def commands(self, p: Vars, s: Vars, o: Vars) -> Sequence[Command]:
        return patch(super().commands(p, s, o), "DENSE", next={"h": s["h"]})


class _HoldNotCounted(GateMachine):
    def commands(self, p: Vars, s: Vars, o: Vars) -> Sequence[Command]:
        return patch(super().commands(p, s, o), "HOLD", next={"h": s["h"]})


class _BudgetGap(GateMachine):
    def commands(self, p: Vars, s: Vars, o: Vars) -> Sequence[Command]:
        cmds = super().commands(p, s, o)
        budget = next(c for c in cmds if c.name == "BUDGET")
        strict = z3.And(budget.guard, s["h"] + 1 > p["K"])
        return patch(cmds, "BUDGET", guard=strict)


class _DenseOverlap(GateMachine):
    def commands(self, p: Vars, s: Vars, o: Vars) -> Sequence[Command]:
        c = self.conditions(p, s, o)
        return patch(super().commands(p, s, o), "DENSE", guard=z3.And(c.waiting, c.dense))


_CATALOG: dict[str, tuple[type[GateMachine], str]] = {
    "budget_off_by_one": (_BudgetOffByOne, "budget fires at h >= K instead of h + 1 >= K"),
    "tail_escape_dropped": (
        _TailEscapeDropped,
        "no tail escape: holds with nothing decoding (flaw 2, running-but-not-decoding)",
    ),
    "count_while_empty": (
        _CountWhileEmpty,
        "counter advances on passes where nothing waits (flaw 1)",
    ),
    "no_reset_after_dense": (_NoResetAfterDense, "a DENSE fire keeps the hold counter"),
    "hold_not_counted": (_HoldNotCounted, "a HOLD does not advance the counter"),
    "dense_strict": (_DenseStrict, "dense test w > B instead of w >= B"),
    "disabled_ignored": (_DisabledIgnored, "the enabled flag is ignored"),
    "budget_gap": (_BudgetGap, "BUDGET guard h + 1 > K leaves h + 1 = K uncovered"),
    "dense_overlap": (_DenseOverlap, "DENSE guard forgets enabled and decoding"),
}


GATE_MUTANTS: dict[str, Mutant] = {
    name: named_mutant("gate", name, description, cls())
    for name, (cls, description) in _CATALOG.items()
}
"""Every broken gate, by name; each is refuted by at least one of ``GATE_OBLIGATIONS``."""


# -- the obligations ----------------------------------------------------------------------


def _readable(p: Vars) -> z3.BoolRef:
    return z3.And(p["B"] <= 8, p["K"] <= 4)


def _ob(id: str, statement: str, prop, invariant, mutants: list[str], **kw) -> Obligation:  # type: ignore[no-untyped-def]
    return Obligation(
        id=id,
        level="gate",
        statement=statement,
        machine=GATE,
        prop=prop,
        invariant=invariant,
        mutants=[GATE_MUTANTS[m] for m in mutants],
        readable=_readable,
        **kw,
    )


GATE_OBLIGATIONS: list[Obligation] = [
    _ob(
        "P1",
        statement("P1"),
        lambda st: hold_bounded(st.p, st.s),
        hold_bounded,
        ["budget_off_by_one", "count_while_empty"],
        needs_step=False,
    ),
    _ob(
        "P2",
        statement("P2"),
        lambda st: z3.Implies(z3.And(st.o["w"] > 0, st.o["d"] == 0), st.out["fire"]),
        true_invariant,
        ["tail_escape_dropped"],
    ),
    _ob(
        "P3",
        statement("P3"),
        bounded_hold(reason("BUDGET")),
        age_is_hold,
        ["hold_not_counted", "budget_off_by_one", "count_while_empty", "no_reset_after_dense"],
        monitors=[AGE],
    ),
    _ob(
        "P4",
        statement("P4"),
        lambda st: z3.Implies(st.o["w"] >= st.p["B"], st.out["fire"]),
        true_invariant,
        ["dense_strict"],
    ),
    _ob(
        "P5",
        statement("P5"),
        lambda st: z3.Implies(z3.Not(st.p["enabled"]), st.out["fire"]),
        true_invariant,
        ["disabled_ignored"],
    ),
    _ob(
        "P6",
        statement("P6"),
        lambda st: z3.Implies(
            z3.Not(st.out["fire"]),
            z3.And(st.p["enabled"], st.o["d"] > 0, st.o["w"] > 0, st.o["w"] < st.p["B"]),
        ),
        true_invariant,
        ["tail_escape_dropped", "dense_strict", "disabled_ignored"],
    ),
    _ob(
        "P7",
        statement("P7"),
        one_command_and_ranked,
        hold_bounded,
        ["budget_gap", "dense_overlap", "hold_not_counted"],
        needs_step=False,
    ),
]
