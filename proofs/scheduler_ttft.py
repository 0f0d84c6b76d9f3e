"""S6: time to first token as a proof obligation over ``densegate.spec.scheduler``.

A tracked request ``t`` (any slot: the monitor ``tr`` starts at an arbitrary
value) opens a *window* in the first pass it is the head of the queue with no
token yet. The window closes when ``t`` samples its first token, and is
*disturbed* (closed, no claim) by a pass that preempts a request or aborts one.
Arrivals join behind ``t`` and are allowed. When the window closes undisturbed,
the passes it took (both ends included) are at most

    K * (ceil((O + P) / c) + 1) + D + 1,    c = min(cap, T - S + 1),

with ``O`` the prefill owed by running requests and ``D`` the longest remaining
output (``max_tokens`` minus tokens generated) among them, both when the window
opened, and ``P`` the prompt of ``t``; and at most ``K * (ceil((O + P) / c) +
2)`` if no pass of the window was a *capacity wait* (``t`` waiting with nothing
owed ahead and not fitting, which the gate sees as nothing planned: EMPTY).

The argument the invariant records: a window pass either has prefill owed at
or before ``t`` (a PW pass: every such pass is planned prefill, each fire runs
at least ``min(owed, c)`` of it, at most two fires run less, and at most K-1
holds precede a fire) or not (``t`` waits and every running request decodes,
so there are at most ``D + 1`` of them, the last admitting ``t``; without a
capacity wait they are one run of holds, at most K with the admitting fire).
Monitors: ``wt`` passes, ``nf`` PW fires (``kn``, ``cn``: K and c per fire,
kept linear), ``np`` other passes, ``hpw`` PW holds since the last fire, ``sh``
short fires, ``cw`` capacity waits, ``w0 = O + P`` and ``d0 = D``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import z3

from densegate.proofs.obligation import Monitor, Step
from densegate.spec.gate import reason
from densegate.spec.machine import Vars
from densegate.spec.scheduler import RUNNING, WAITING, PassPlan, SchedulerMachine
from densegate.spec.scheduler_summary import chunk_room

__all__ = [
    "closed_form",
    "ttft_invariant",
    "ttft_monitors",
    "ttft_prop",
    "ttft_triggers",
]


def _at(xs: Sequence[z3.ExprRef], t: z3.ArithRef) -> z3.ExprRef:
    out = xs[-1]
    for i in reversed(range(len(xs) - 1)):
        out = z3.If(t == i, xs[i], out)
    return out


_PLANS: dict[int, tuple[Step, PassPlan]] = {}


def _plan(st: Step) -> PassPlan:
    hit = _PLANS.get(id(st))
    if hit is None or hit[0] is not st:
        m: SchedulerMachine = st.machine  # type: ignore[assignment]
        hit = _PLANS[id(st)] = (st, m.plan(st.p, st.s, st.o))
    return hit[1]


def _owed(
    p: Vars,
    st: Sequence[z3.ArithRef],
    c: Sequence[z3.ArithRef],
    g: Sequence[z3.ArithRef],
    before: z3.ArithRef,
) -> z3.ArithRef:
    """Prefill owed by running requests in slots before ``before`` (decoding ones owe none)."""
    total: z3.ArithRef = z3.IntVal(0)
    for i in range(len(st)):
        P = p[f"P{i}"]
        dec = z3.And(g[i] >= 1, c[i] == P + g[i] - 1)
        left = z3.If(z3.And(st[i] == RUNNING, z3.Not(dec)), P + g[i] - c[i], 0)
        total = total + z3.If(i < before, left, 0)
    return total


class _Pass:
    """The window's view of one step: whether it opens, lives, what kind of pass it is."""

    def __init__(self, st: Step) -> None:
        m: SchedulerMachine = st.machine  # type: ignore[assignment]
        plan, p, s, o = _plan(st), st.p, st.s, st.o
        R = m.R
        t = s["tr"]
        self.t = t
        head = z3.And(
            _at(plan.st, t) == WAITING,
            *[z3.Implies(i < t, plan.st[i] != WAITING) for i in range(R)],
        )
        aborts = z3.Or(*[o[f"abort{i}"] for i in range(R)])
        calm = z3.And(plan.preempted == 0, z3.Not(aborts))
        self.opens = z3.And(s["win"] == 0, head, _at(plan.g, t) == 0, calm)
        self.live = z3.Or(self.opens, z3.And(s["win"] == 1, calm))
        oa = _owed(p, plan.st, plan.c, plan.g, t)
        waiting = _at(plan.st, t) == WAITING
        self.pw = z3.Not(z3.And(waiting, oa == 0))
        fire = st.out["fire"]
        self.pw_fire = z3.And(self.pw, fire)
        ran = z3.Sum([z3.If(z3.And(fire, i <= t), plan.chunk[i], 0) for i in range(R)])
        self.short = z3.And(self.pw_fire, ran < chunk_room(p))
        # a capacity wait: t waits with nothing owed ahead and does not fit, so
        # nothing is planned and the gate fires EMPTY (the only EMPTY a window sees)
        self.capacity_wait = z3.And(z3.Not(self.pw), st.out["reason"] == reason("EMPTY"))
        self.sample = _at([st.s2[f"g{i}"] for i in range(R)], t) > _at(plan.g, t)
        self.work0 = oa + _at([p[f"P{i}"] for i in range(R)], t)
        longest: z3.ArithRef = z3.IntVal(0)
        for i in range(R):
            rest = p[f"M{i}"] - plan.g[i]
            longest = z3.If(z3.And(plan.st[i] == RUNNING, rest > longest), rest, longest)
        self.longest = longest


_PASSES: dict[int, tuple[Step, _Pass]] = {}


def _pass(st: Step) -> _Pass:
    hit = _PASSES.get(id(st))
    if hit is None or hit[0] is not st:
        hit = _PASSES[id(st)] = (st, _Pass(st))
    return hit[1]


def _counter(name: str, step: Callable[[Step], z3.ArithRef]) -> Monitor:
    """A window counter: restarts at 0 when the window opens, moves on live passes."""

    def update(st: Step) -> z3.ExprRef:
        w = _pass(st)
        base = z3.If(w.opens, 0, st.s[name])
        return z3.If(w.live, base + step(st), st.s[name])

    return Monitor(name, z3.Int, lambda p: z3.IntVal(0), update)


def _by(cond_of: Callable[[_Pass], z3.BoolRef]) -> Callable[[Step], z3.ArithRef]:
    """1 on passes where ``cond_of`` holds, else 0."""
    return lambda st: z3.If(cond_of(_pass(st)), 1, 0)


def _when(cond_of: Callable[[_Pass], z3.BoolRef], amount: Callable[[Vars], z3.ArithRef]):  # type: ignore[no-untyped-def]
    """``amount(p)`` on passes where ``cond_of`` holds, else 0 (K F and c F kept linear)."""
    return lambda st: z3.If(cond_of(_pass(st)), amount(st.p), 0)


def _hpw(st: Step) -> z3.ExprRef:
    w = _pass(st)
    base = z3.If(w.opens, 0, st.s["hpw"])
    nxt = z3.If(z3.And(w.pw, z3.Not(st.out["fire"])), base + 1, 0)
    return z3.If(w.live, nxt, st.s["hpw"])


def _ghost(name: str, value: Callable[[_Pass], z3.ArithRef]) -> Monitor:
    """A value read when the window opens, kept until it opens again."""

    def update(st: Step) -> z3.ExprRef:
        return z3.If(_pass(st).opens, value(_pass(st)), st.s[name])

    return Monitor(name, z3.Int, lambda p: z3.IntVal(0), update)


def ttft_monitors(slots: int) -> list[Monitor]:
    """The window's monitors; ``tr`` starts at any slot (an unconstrained constant)."""
    return [
        Monitor("tr", z3.Int, lambda p: _tracked(slots), lambda st: st.s["tr"]),
        Monitor(
            "win",
            z3.Int,
            lambda p: z3.IntVal(0),
            lambda st: z3.If(z3.And(_pass(st).live, z3.Not(_pass(st).sample)), 1, 0),
        ),
        _counter("wt", lambda st: z3.IntVal(1)),
        _counter("nf", _by(lambda w: w.pw_fire)),
        _counter("kn", _when(lambda w: w.pw_fire, lambda p: p["K"])),
        _counter("cn", _when(lambda w: w.pw_fire, chunk_room)),
        _counter("np", _by(lambda w: z3.Not(w.pw))),
        _counter("sh", _by(lambda w: w.short)),
        _counter("cw", _by(lambda w: w.capacity_wait)),
        Monitor("hpw", z3.Int, lambda p: z3.IntVal(0), _hpw),
        _ghost("w0", lambda w: w.work0),
        _ghost("d0", lambda w: w.longest),
    ]


def _tracked(slots: int) -> z3.ArithRef:
    x = z3.Int("tracked")
    return z3.If(z3.And(x >= 0, x < slots), x, 0)


def ttft_invariant(machine: SchedulerMachine):  # type: ignore[no-untyped-def]
    """What an open window keeps true (on top of the scheduler's reachable-state invariant)."""
    R = machine.R

    def inv(p: Vars, s: Vars) -> z3.BoolRef:
        t = s["tr"]
        st, c, g = ([s[f"{k}{i}"] for i in range(R)] for k in ("st", "c", "g"))
        P, M = [p[f"P{i}"] for i in range(R)], [p[f"M{i}"] for i in range(R)]
        waiting = _at(st, t) == WAITING
        oa = _owed(p, st, c, g, t)
        now = oa + _at(P, t) - z3.If(waiting, 0, _at(c, t))
        K, room = p["K"], chunk_room(p)
        window = z3.And(
            _at(g, t) == 0,
            z3.Or(waiting, _at(st, t) == RUNNING),
            *[z3.Implies(z3.And(waiting, i < t), st[i] != WAITING) for i in range(R)],
            *[
                z3.Implies(z3.And(i < t, st[i] == RUNNING), M[i] - g[i] <= s["d0"] - s["np"])
                for i in range(R)
            ],
            s["np"] >= 0,
            s["np"] <= s["d0"] + 1,
            z3.Implies(waiting, s["np"] <= s["d0"]),
            s["hpw"] >= 0,
            s["hpw"] <= s["h"],
            z3.Implies(z3.And(waiting, oa == 0), s["hpw"] == 0),
            s["nf"] >= 0,
            s["kn"] == K * s["nf"],
            s["cn"] == room * s["nf"],
            s["wt"] <= s["kn"] + s["np"] + s["hpw"],
            s["sh"] >= 0,
            s["sh"] <= 1,
            z3.Implies(s["sh"] == 1, oa == 0),
            # no capacity wait yet: the waiting-with-nothing-owed passes are one run of
            # holds (counted by h) ended by the fire that admits t
            s["cw"] >= 0,
            z3.Implies(s["cw"] == 0, s["np"] <= K),
            z3.Implies(z3.And(s["cw"] == 0, waiting, oa == 0), s["np"] <= s["h"]),
            z3.Implies(z3.And(waiting, oa > 0), s["np"] == 0),
            s["cn"] <= s["w0"] - now + z3.If(s["sh"] == 1, room, 0),
        )
        return z3.And(
            t >= 0, t < R, z3.Or(s["win"] == 0, s["win"] == 1), z3.Implies(s["win"] == 1, window)
        )

    return inv


def ttft_prop(st: Step) -> z3.BoolRef:
    """A window that closes undisturbed took at most K F + D + 1 passes, c F < O + P + 2c."""
    w = _pass(st)
    p, s2 = st.p, st.s2
    room = chunk_room(p)
    closes = z3.And(w.live, w.sample)
    return z3.Implies(
        closes,
        z3.And(
            s2["wt"] <= s2["kn"] + s2["d0"] + 1,
            s2["cn"] < s2["w0"] + 2 * room,
            s2["kn"] == p["K"] * s2["nf"],
            s2["cn"] == room * s2["nf"],
            z3.Implies(s2["cw"] == 0, s2["wt"] <= s2["kn"] + p["K"]),
        ),
    )


def closed_form() -> z3.BoolRef:
    """The arithmetic step to the closed form: c F < W + 2c and q = ceil(W / c) give
    K F <= K (q + 1), for every K, c >= 1 (checked by the prover as a lemma)."""
    K, c, F, W, q = z3.Ints("K c F W q")
    given = z3.And(K >= 1, c >= 1, F >= 0, W >= 1, c * (q - 1) < W, c * q >= W, c * F < W + 2 * c)
    return z3.ForAll([K, c, F, W, q], z3.Implies(given, K * (q + 1) >= K * F))


def ttft_triggers() -> list[Callable[[Step], z3.BoolRef]]:
    """Windows that close, with and without a capacity wait: both conclusions must bite."""

    def closes(st: Step) -> z3.BoolRef:
        return z3.And(_pass(st).live, _pass(st).sample)

    return [
        lambda st: z3.And(closes(st), st.s2["cw"] == 0),
        lambda st: z3.And(closes(st), st.s2["cw"] > 0),
    ]
