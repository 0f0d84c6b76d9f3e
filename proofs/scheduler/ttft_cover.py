"""The per-slot scheduler's passes seen as steps of the TTFT window (S8's window clause).

A tracked request ``t`` (any slot: ``TRACKED`` is an unconstrained constant,
so the check holds for each) is in a window while it has no token yet and
waits or runs, every request before it arrived and none of them waiting (at
headship: ``t`` is the head of the queue). For such a pass with no preemption
and no abort, ``window_figures`` reads the window's figures before and after it
off the slots, folding ``ahead_step`` (``densegate.spec.window_scan``) over them:
prefill owed ahead of ``t`` and by ``t``, the longest remaining output ahead, the
chunks a fire runs. ``meets_window`` is the claim S8 checks again at its slot
count: the pass meets ``window_facts`` and a state where ``t`` waits meets
``window_start``. S15 proves the same of every such pass for any number of
requests, folding the same step over an undisturbed pass.
"""

from __future__ import annotations

from collections.abc import Sequence

import z3

from densegate.proofs.obligation import Prop, Step
from densegate.spec.machine import Vars
from densegate.spec.scheduler import RUNNING, WAITING, PassPlan, SchedulerMachine
from densegate.spec.scheduler_request import Req
from densegate.spec.ttft_window import TtftWindow, window_start
from densegate.spec.window_scan import (
    AHEAD_SUMS,
    Ahead,
    ahead_start,
    ahead_step,
    settled,
    tracked_figures,
)

__all__ = ["TRACKED", "first_token", "meets_window", "meets_window_of", "window_figures"]

TRACKED = z3.Int("tracked")
"""The tracked request's slot: unconstrained, so a proof about it holds for every slot."""


def _at(xs: Sequence[z3.ExprRef], t: z3.ArithRef) -> z3.ExprRef:
    out = xs[-1]
    for i in reversed(range(len(xs) - 1)):
        out = z3.If(t == i, xs[i], out)
    return out


def _in_window(m: SchedulerMachine, s: Vars, t: z3.ArithRef) -> z3.BoolRef:
    """``t`` has no token yet and waits or runs, and every request before it has arrived
    and does not wait (at headship: ``t`` is the head of the queue)."""
    st = m.slot(s, "st")
    earlier = [z3.Implies(i < t, settled(st[i])) for i in range(m.R)]
    here = z3.Or(_at(st, t) == WAITING, _at(st, t) == RUNNING)
    return z3.And(t >= 0, t < m.R, _at(m.slot(s, "g"), t) == 0, here, *earlier)


def window_figures(st: Step, plan: PassPlan, t: z3.ArithRef) -> tuple[Vars, Vars]:
    """The window's state before the pass, and the pass's figures (``WINDOW_INTS``): the
    sums ahead of ``t`` a fold of ``ahead_step`` over the slots but ``t``'s."""
    m: SchedulerMachine = st.machine  # type: ignore[assignment]
    p, fire = st.p, st.out["fire"]
    P = m.slot(p, "P")
    req = [Req(*x) for x in zip(*(m.slot(st.s, k) for k in ("st", "c", "g", "b")), strict=True)]
    req2 = [Req(*x) for x in zip(*(m.slot(st.s2, k) for k in ("st", "c", "g", "b")), strict=True)]
    tw, ot = tracked_figures(_req_at(req, t), _at(P, t))
    tw2, ot2 = tracked_figures(_req_at(req2, t), _at(P, t))
    chunk = [z3.If(fire, n, 0) for n in plan.chunk]
    acc = ahead_start()
    for i in range(m.R):
        nxt = ahead_step(
            acc, req[i], req2[i], prompt=P[i], most=p[f"M{i}"], earlier=i < t,
            waits=tw == 1, waits2=tw2 == 1, run=chunk[i],
        )  # fmt: skip
        acc = Ahead(*[z3.If(t == i, getattr(acc, k), getattr(nxt, k)) for k in AHEAD_SUMS])
    before: dict[str, z3.ExprRef] = {"tw": tw, "ot": ot, "oa": acc.oa, "ra": acc.ra}
    figures: dict[str, z3.ExprRef] = {
        "planned": plan.planned,
        "d": plan.d,
        "runa": acc.runa,
        "runt": _at(chunk, t),
        "fits": plan.head_fits,
        "tw2": tw2,
        "ot2": ot2,
        "oa2": acc.oa2,
        "ra2": acc.ra2,
    }
    return before, figures


def _req_at(reqs: Sequence[Req], t: z3.ArithRef) -> Req:
    return Req(*[_at([getattr(r, k) for r in reqs], t) for k in ("st", "c", "g", "b")])


def _calm(m: SchedulerMachine, plan: PassPlan, o: Vars) -> z3.BoolRef:
    return z3.And(plan.preempted == 0, *[z3.Not(x) for x in m.slot(o, "abort")])


def first_token(st: Step) -> z3.BoolRef:
    """An undisturbed pass of ``TRACKED``'s window that gives it its first token."""
    m: SchedulerMachine = st.machine  # type: ignore[assignment]
    t = TRACKED
    plan = m.plan(st.p, st.s, st.o)
    sampled = _at(m.slot(st.s2, "g"), t) >= 1
    return z3.And(_in_window(m, st.s, t), _calm(m, plan, st.o), sampled)


def meets_window_of(window: TtftWindow) -> Prop:
    """An undisturbed pass of ``TRACKED``'s window meets ``window``'s facts, and a state
    where it waits meets the window's start."""

    def meets(st: Step) -> z3.BoolRef:
        m: SchedulerMachine = st.machine  # type: ignore[assignment]
        t, p, o = TRACKED, st.p, st.o
        plan = m.plan(p, st.s, o)
        calm = _calm(m, plan, o)
        s, fig = window_figures(st, plan, t)
        wp = {**p, "Pt": _at(m.slot(p, "P"), t)}
        facts = window.facts(wp, s, fig, st.out["fire"])
        starts = z3.Implies(s["tw"] == 1, window_start(wp, s))
        return z3.Implies(z3.And(_in_window(m, st.s, t), calm), z3.And(facts, starts))

    return meets


meets_window = meets_window_of(TtftWindow())
"""The claim for the window as specified (its progress and admission rules)."""
