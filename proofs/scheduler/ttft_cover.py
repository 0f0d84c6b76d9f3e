"""The per-slot scheduler's passes seen as steps of the TTFT window (checked by S8).

A tracked request ``t`` (any slot: ``TRACKED`` is an unconstrained constant,
so the check holds for each) is in a window while it has no token yet and
either waits at the head of the queue or runs. For such a pass with no
preemption and no abort, ``window_figures`` reads the window's figures
before and after it off the slots (prefill owed ahead of ``t`` and by ``t``,
the longest remaining output ahead, the chunks a fire runs), and
``meets_window`` is the claim S8 proves at 3 requests: the pass meets
``window_facts`` and a state at headship meets ``window_start``.
"""

from __future__ import annotations

from collections.abc import Sequence

import z3

from densegate.proofs.obligation import Step
from densegate.spec.machine import Vars
from densegate.spec.scheduler import RUNNING, WAITING, PassPlan, SchedulerMachine
from densegate.spec.ttft_window import TtftWindow, window_start

__all__ = ["TRACKED", "first_token", "meets_window", "window_figures"]

TRACKED = z3.Int("tracked")
"""The tracked request's slot: unconstrained, so a proof about it holds for every slot."""
_WINDOW = TtftWindow()
"""The window as specified: its facts (progress and admission rules) are the claim."""


def _at(xs: Sequence[z3.ExprRef], t: z3.ArithRef) -> z3.ExprRef:
    out = xs[-1]
    for i in reversed(range(len(xs) - 1)):
        out = z3.If(t == i, xs[i], out)
    return out


def _ahead(m: SchedulerMachine, p: Vars, s: Vars, t: z3.ArithRef) -> dict[str, z3.ArithRef]:
    """Owed prefill and longest remaining output of the running requests before ``t``."""
    owed: z3.ArithRef = z3.IntVal(0)
    longest: z3.ArithRef = z3.IntVal(0)
    for i in range(m.R):
        P, M = p[f"P{i}"], p[f"M{i}"]
        st, c, g = s[f"st{i}"], s[f"c{i}"], s[f"g{i}"]
        run = z3.And(i < t, st == RUNNING)
        decoding = z3.And(g >= 1, c == P + g - 1)
        owed = owed + z3.If(z3.And(run, z3.Not(decoding)), P + g - c, 0)
        longest = z3.If(z3.And(run, M - g > longest), M - g, longest)
    return {"oa": owed, "ra": longest}


def _window_state(m: SchedulerMachine, p: Vars, s: Vars, t: z3.ArithRef) -> dict[str, z3.ArithRef]:
    waits = _at(m.slot(s, "st"), t) == WAITING
    P, c, g = _at(m.slot(p, "P"), t), _at(m.slot(s, "c"), t), _at(m.slot(s, "g"), t)
    return {
        "tw": z3.If(waits, 1, 0),
        "ot": z3.If(g >= 1, 0, P - c),
        **_ahead(m, p, s, t),
    }


def _in_window(m: SchedulerMachine, s: Vars, t: z3.ArithRef) -> z3.BoolRef:
    """``t`` has no token yet and waits at the head of the queue, or runs."""
    st = m.slot(s, "st")
    head = z3.And(_at(st, t) == WAITING, *[z3.Implies(i < t, st[i] != WAITING) for i in range(m.R)])
    return z3.And(t >= 0, t < m.R, _at(m.slot(s, "g"), t) == 0, z3.Or(head, _at(st, t) == RUNNING))


def window_figures(st: Step, plan: PassPlan, t: z3.ArithRef) -> tuple[Vars, Vars]:
    """The window's state before the pass, and the pass's figures (``WINDOW_INTS``)."""
    m: SchedulerMachine = st.machine  # type: ignore[assignment]
    p, fire = st.p, st.out["fire"]
    before = _window_state(m, p, st.s, t)
    after = _window_state(m, p, st.s2, t)
    chunk = [z3.If(fire, n, 0) for n in plan.chunk]
    figures: dict[str, z3.ExprRef] = {
        "planned": plan.planned,
        "d": plan.d,
        "runa": z3.Sum([z3.If(i < t, chunk[i], 0) for i in range(m.R)]),
        "runt": _at(chunk, t),
        "fits": plan.head_fits,
    }
    figures.update({f"{k}2": v for k, v in after.items()})
    return before, figures


def _calm(m: SchedulerMachine, plan: PassPlan, o: Vars) -> z3.BoolRef:
    return z3.And(plan.preempted == 0, *[z3.Not(x) for x in m.slot(o, "abort")])


def first_token(st: Step) -> z3.BoolRef:
    """An undisturbed pass of ``TRACKED``'s window that gives it its first token."""
    m: SchedulerMachine = st.machine  # type: ignore[assignment]
    t = TRACKED
    plan = m.plan(st.p, st.s, st.o)
    sampled = _at(m.slot(st.s2, "g"), t) >= 1
    return z3.And(_in_window(m, st.s, t), _calm(m, plan, st.o), sampled)


def meets_window(st: Step) -> z3.BoolRef:
    """An undisturbed pass of ``TRACKED``'s window meets the window facts, and a state where
    it is head with no token meets the window's start."""
    m: SchedulerMachine = st.machine  # type: ignore[assignment]
    t, p, o = TRACKED, st.p, st.o
    plan = m.plan(p, st.s, o)
    calm = _calm(m, plan, o)
    s, fig = window_figures(st, plan, t)
    wp = {**p, "Pt": _at(m.slot(p, "P"), t)}
    facts = _WINDOW.facts(wp, s, fig, st.out["fire"])
    starts = z3.Implies(s["tw"] == 1, window_start(wp, s))
    return z3.Implies(z3.And(_in_window(m, st.s, t), calm), z3.And(facts, starts))
