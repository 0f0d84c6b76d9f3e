"""Obligations P1-P7 over the one-rank gate, each proved for every parameter value.

Each obligation carries the inductive invariant that proves it and names the
broken gates it must refute.
"""

from __future__ import annotations

import z3

from densegate.proofs.common import (
    AGE,
    age_is_hold,
    bounded_hold,
    hold_bounded,
    one_command_and_ranked,
    true_invariant,
)
from densegate.proofs.gate_mutants import GATE_MUTANTS
from densegate.proofs.prover import Obligation
from densegate.spec.gate import GATE, reason
from densegate.spec.machine import Vars
from densegate.spec.properties import statement

__all__ = ["GATE_OBLIGATIONS"]


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
