"""D1-D8 over the aligned gate, for every parameter value and rank count, paced mode on
and off alike (a free parameter; D6 fixes it off). D9-D12, the paced mode's own, are in
``densegate.proofs.dp_paced``.

N is a symbolic parameter (N >= 1, unbounded), so nothing here is checked for "2 or 4
ranks": agreement (D1) is proved on the two-rank product, which covers every pair of the
N ranks at once; refinement (D6) on the product with the single-rank gate. The broken
aligned gates each obligation must refute are in ``densegate.proofs.dp_mutants``.
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
    true_invariant,
)
from densegate.proofs.dp_mutants import DP_MUTANTS
from densegate.proofs.obligation import Monitor, Mutant, Obligation, Prop, Step
from densegate.spec.dp_gate import DP, DpMachine, reason, same_reason
from densegate.spec.dp_products import one_rank, pair
from densegate.spec.machine import Machine, Vars
from densegate.spec.properties import statement

__all__ = ["DP_MUTANTS", "DP_OBLIGATIONS"]


# -- the obligations ----------------------------------------------------------------------


_READABLE = {"B": 8, "K": 4, "N": 3, "S": 3, "A": 3, "Cp": 4, "Cs": 6, "cmax": 6, "Db": 6}


def _small(p: Vars) -> z3.BoolRef:
    return z3.And(*[p[k] <= v for k, v in _READABLE.items() if k in p])


def _readable(p: Vars) -> z3.BoolRef:
    """Small numbers, the paced mode off: what D2-D8's traces need (D1 has a paced mutant,
    so its traces keep only the small numbers; searching 12 ticks without it costs more)."""
    return z3.And(_small(p), *([z3.Not(p["pc"])] if "pc" in p else []))


def _two_budgets_visible(p: Vars) -> z3.BoolRef:
    """K >= 3 so a composed hold shows one budget spent and the next one started."""
    return z3.And(_readable(p), p["K"] >= 3)


def _dense(p: Vars, o: Vars) -> z3.BoolRef:
    """Every rank waits and the aggregate reaches T tokens per rank, or (paced mode off)
    some rank is filled on its own: stated apart from the machine, so a mutant that
    changes the machine's test cannot change the property."""
    everyone = z3.And(o["W"] == p["N"], o["F"] >= p["T"] * p["N"])
    return z3.Or(everyone, z3.And(o["Fl"] > 0, z3.Not(p["pc"])))


def _unheld(p: Vars, o: Vars) -> z3.BoolRef:
    """Work waits and no rank decodes, or some waiting rank has no decode of its own."""
    return z3.And(o["W"] > 0, z3.Or(o["D"] == 0, o["Nd"] > 0))


def _d1(st: Step) -> z3.BoolRef:
    same_out = [st.out[f"{k}1"] == st.out[f"{k}2"] for k in ("fire", "reason", "cap")]
    keys = sorted({k[:-1] for k in st.s2})
    same_next = [st.s2[f"{k}1"] == st.s2[f"{k}2"] for k in keys]
    return z3.And(*same_out, *same_next)


def _d1_inv(p: Vars, s: Vars) -> z3.BoolRef:
    keys = sorted({k[:-1] for k in s})
    return z3.And(*[s[f"{k}1"] == s[f"{k}2"] for k in keys])


def _d3(st: Step) -> z3.BoolRef:
    p, o = st.p, st.o
    return z3.And(
        z3.Implies(_unheld(p, o), st.out["fire"]),
        z3.Implies(
            st.out["reason"] == reason("NO_DECODE"),
            z3.Or(o["D"] == 0, z3.And(o["Nd"] > 0, z3.Not(p["pc"]))),
        ),
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
            z3.And(p["enabled"], o["W"] > 0, z3.Not(_unheld(p, o)), z3.Not(_dense(p, o))),
        ),
    )


def _d8(st: Step) -> z3.BoolRef:
    p, o, h = st.p, st.o, st.s["h"]
    ready = z3.And(p["al"], o["W"] + o["Va"] == p["N"], h >= p["A"])
    return z3.And(
        z3.Implies(st.out["reason"] == reason("ALIGNED"), ready),
        z3.Implies(z3.And(ready, p["enabled"], o["D"] > 0), st.out["fire"]),
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
        [
            "local_dense",
            "local_tail_escape",
            "wall_clock_stall",
            "local_hold_counter",
            "aligned_local",
            "paced_local_cap",
            "surge_local",
            "busy_local",
        ],
        machine=pair(DP),
        wrap=pair,
        readable=_small,
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
            "aligned_keeps_count",
        ],
        monitors=[AGE],
        readable=_two_budgets_visible,
    ),
    _ob(
        "D3",
        _d3,
        true_invariant,
        ["tail_escape_dropped", "local_tail_escape", "idle_rank_held"],
    ),
    _ob(
        "D4",
        one_command_and_ranked,
        hold_bounded,
        ["stall_gap", "kv_overlap", "aligned_overlap", "hold_not_counted", "growth_resets_budget"],
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
            "stall_zero_not_off",
            "kv_valve_ignores_flag",
            "count_while_empty",
            "aligned_ignores_flag",
        ],
        machine=one_rank(DP),
        wrap=one_rank,
    ),
    _ob(
        "D7",
        _d7,
        true_invariant,
        [
            "dense_any_rank",
            "dense_unscaled",
            "dense_strict",
            "dense_world_fill",
            "tail_escape_dropped",
        ],
    ),
    _ob(
        "D8",
        _d8,
        true_invariant,
        [
            "aligned_any_rank",
            "aligned_off_by_one",
            "aligned_ignores_flag",
            "aligned_waits_for_vacant",
        ],
    ),
]
