"""Obligations P1-P7 over the one-rank gate, each proved for every parameter value.

Each obligation carries the inductive invariant that proves it and names the
broken gates it must refute.
"""

from __future__ import annotations

from collections.abc import Mapping

import z3

from densegate.proofs.gate_mutants import GATE_MUTANTS
from densegate.proofs.prover import Monitor, Obligation, Step
from densegate.spec.gate import GATE, reason
from densegate.spec.machine import Vars

__all__ = ["GATE_OBLIGATIONS"]


def _true(p: Vars, s: Vars) -> z3.BoolRef:
    return z3.BoolVal(True)


def _bounded(p: Vars, s: Vars) -> z3.BoolRef:
    return z3.And(s["h"] >= 0, s["h"] < p["K"])


def _readable(p: Vars) -> z3.BoolRef:
    return z3.And(p["B"] <= 8, p["K"] <= 4)


def _rank(p: Vars, s: Mapping[str, z3.ExprRef]) -> z3.ArithRef:
    return p["K"] - 1 - s["h"]


# age: consecutive passes the current waiting episode has been held; the
# machine never reads it, so it measures what h only claims to count.
_AGE = Monitor(
    "age",
    z3.Int,
    init=lambda p: z3.IntVal(0),
    update=lambda st: z3.If(st.out["fire"], 0, st.s["age"] + 1),
)


def _p3(st: Step) -> z3.BoolRef:
    K = st.p["K"]
    return z3.And(
        st.s2["age"] < K,
        z3.Implies(st.out["reason"] == reason("BUDGET"), st.s["age"] == K - 1),
    )


def _p7(st: Step) -> z3.BoolRef:
    one = z3.Sum([z3.If(c.guard, 1, 0) for c in st.commands]) == 1
    holds = [c for c in st.commands if z3.is_false(z3.simplify(c.out["fire"]))]
    ranked = [
        z3.Implies(c.guard, z3.And(_rank(st.p, st.s) >= 0, _rank(st.p, c.next) < _rank(st.p, st.s)))
        for c in holds
    ]
    return z3.And(one, *ranked)


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
        "counter bound: 0 <= h < K in every reachable state",
        lambda st: z3.And(st.s["h"] >= 0, st.s["h"] < st.p["K"]),
        _bounded,
        ["budget_off_by_one", "count_while_empty"],
        needs_step=False,
    ),
    _ob(
        "P2",
        "no idle pass: w > 0 and d = 0 => FIRE",
        lambda st: z3.Implies(z3.And(st.o["w"] > 0, st.o["d"] == 0), st.out["fire"]),
        _true,
        ["tail_escape_dropped"],
    ),
    _ob(
        "P3",
        "bounded hold: a waiting episode fires within K passes (age < K); "
        "BUDGET only after K-1 holds",
        _p3,
        lambda p, s: z3.And(_bounded(p, s), s["age"] == s["h"]),
        ["hold_not_counted", "budget_off_by_one", "count_while_empty", "no_reset_after_dense"],
        monitors=[_AGE],
    ),
    _ob(
        "P4",
        "dense immediacy: w >= B => FIRE",
        lambda st: z3.Implies(st.o["w"] >= st.p["B"], st.out["fire"]),
        _true,
        ["dense_strict"],
    ),
    _ob(
        "P5",
        "legacy equivalence: disabled => FIRE",
        lambda st: z3.Implies(z3.Not(st.p["enabled"]), st.out["fire"]),
        _true,
        ["disabled_ignored"],
    ),
    _ob(
        "P6",
        "hold justification: HOLD => enabled, d > 0, 0 < w < B",
        lambda st: z3.Implies(
            z3.Not(st.out["fire"]),
            z3.And(st.p["enabled"], st.o["d"] > 0, st.o["w"] > 0, st.o["w"] < st.p["B"]),
        ),
        _true,
        ["tail_escape_dropped", "dense_strict", "disabled_ignored"],
    ),
    _ob(
        "P7",
        "determinism and totality: exactly one command per state and observation; "
        "HOLD decreases the rank K-1-h >= 0 (no deadlock)",
        _p7,
        _bounded,
        ["budget_gap", "dense_overlap", "hold_not_counted"],
        needs_step=False,
    ),
]
