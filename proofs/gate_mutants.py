"""Deliberately broken gate machines: each must be refuted by some obligation.

Each is a small subclass of the one spec machine that changes a single rule, so
the relation is still written once; a mutant that an obligation fails to refute
means that obligation proves less than it claims.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import z3

from densegate.proofs.common import named_mutant, patch
from densegate.proofs.prover import Mutant
from densegate.spec.gate import GateConditions, GateMachine
from densegate.spec.machine import Command, Vars

__all__ = ["GATE_MUTANTS", "gate_mutant"]


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


def gate_mutant(name: str) -> Mutant:
    cls, description = _CATALOG[name]
    return named_mutant("gate", name, description, cls())


GATE_MUTANTS: dict[str, Mutant] = {name: gate_mutant(name) for name in _CATALOG}
