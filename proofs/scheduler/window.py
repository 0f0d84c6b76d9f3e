"""S6, time to first token, proved of the TTFT window for any number of requests given its facts
(which S15 proves of the per-slot scheduler's undisturbed window passes, any number of requests).

``TtftWindow`` (``densegate.spec.ttft_window``) starts at headship and steps
through the window's undisturbed passes (none preempted, none aborted;
arrivals join behind ``t`` and are allowed). When ``t`` samples its first
token the passes the window took (both ends included) are at most

    K * (ceil((O + P) / c) + 1) + D + 1,    c = min(cap, T - S + 1),

(``O``: prefill owed by running requests and ``D``: their longest remaining
output, both at headship; ``P``: the prompt of ``t``), and at most
``K * (ceil((O + P) / c) + 2)`` if no pass was a *capacity wait* (``t``
waiting with nothing owed ahead and not fitting, which the gate sees as
nothing planned: EMPTY). A window still open after ``n`` passes has ``n <=
K * (ceil((O + P) / c) + 1) + D``, so every undisturbed window closes within
the bound.

The argument the invariant records: a window pass either has prefill owed at
or before ``t`` (*owing*: each fire runs at least ``min(owed, c)`` of it, at
most two fires run less, and at most K-1 holds precede a fire) or not (``t``
waits and every running request decodes, so there are at most ``D + 1`` of
them, the last admitting ``t``; without a capacity wait they are one run of
holds, at most K with the admitting fire). Monitors: ``wt`` passes, ``nf``
owing fires (``kn``, ``cn``: K and c per fire, kept linear), ``np`` other
passes, ``hpw`` owing holds since the last fire, ``sh`` short fires, ``cw``
capacity waits.
"""

from __future__ import annotations

from collections.abc import Callable

import z3

from densegate.proofs.common import named_mutant
from densegate.proofs.gate_obligations import GATE_MUTANTS
from densegate.proofs.obligation import Monitor, Mutant, Obligation, Step
from densegate.proofs.scheduler.life import LIFE_BLOCK_SIZE
from densegate.proofs.scheduler.scopes import window_scope
from densegate.spec.gate import reason
from densegate.spec.machine import Vars
from densegate.spec.scheduler_summary import chunk_room
from densegate.spec.ttft_window import TtftWindow, owing

__all__ = ["WINDOW", "WINDOW_OBLIGATIONS", "WINDOW_SCOPE", "closed_form", "open_form"]

WINDOW = TtftWindow()
WINDOW_SCOPE = window_scope(LIFE_BLOCK_SIZE)


def _counter(name: str, step: Callable[[Step], z3.ArithRef]) -> Monitor:
    """A window counter: moves on the window's passes, frozen once it closes."""

    def update(st: Step) -> z3.ExprRef:
        return z3.If(st.s["open"] == 1, st.s[name] + step(st), st.s[name])

    return Monitor(name, z3.Int, lambda p: z3.IntVal(0), update)


def _by(cond: Callable[[Step], z3.BoolRef]) -> Callable[[Step], z3.ArithRef]:
    return lambda st: z3.If(cond(st), 1, 0)


def _owing_fire(st: Step) -> z3.BoolRef:
    return z3.And(owing(st.s), st.out["fire"])


def _short(st: Step) -> z3.BoolRef:
    return z3.And(_owing_fire(st), st.o["runa"] + st.o["runt"] < chunk_room(st.p))


def _capacity_wait(st: Step) -> z3.BoolRef:
    return z3.And(z3.Not(owing(st.s)), st.out["reason"] == reason("EMPTY"))


def _hpw(st: Step) -> z3.ExprRef:
    held = z3.And(owing(st.s), z3.Not(st.out["fire"]))
    return z3.If(st.s["open"] == 1, z3.If(held, st.s["hpw"] + 1, 0), st.s["hpw"])


MONITORS = [
    _counter("wt", lambda st: z3.IntVal(1)),
    _counter("nf", _by(_owing_fire)),
    _counter("kn", lambda st: z3.If(_owing_fire(st), st.p["K"], 0)),
    _counter("cn", lambda st: z3.If(_owing_fire(st), chunk_room(st.p), 0)),
    _counter("np", _by(lambda st: z3.Not(owing(st.s)))),
    _counter("sh", _by(_short)),
    _counter("cw", _by(_capacity_wait)),
    Monitor("hpw", z3.Int, lambda p: z3.IntVal(0), _hpw),
]


def window_inv(p: Vars, s: Vars) -> z3.BoolRef:
    """What an open window keeps true; the gate's counter stays in 0 <= h < K."""
    K, room = p["K"], chunk_room(p)
    waits, oa, ot, ra = s["tw"] == 1, s["oa"], s["ot"], s["ra"]
    nothing_ahead = z3.And(waits, oa == 0)
    window = z3.And(
        z3.Or(waits, s["tw"] == 0),
        ot >= 1,
        ot <= p["Pt"],
        z3.Implies(waits, ot == p["Pt"]),
        oa >= 0,
        ra >= 0,
        z3.Implies(z3.And(waits, oa > 0), ra >= 1),
        z3.Implies(ra > 0, ra <= s["d0"] - s["np"]),
        s["np"] >= 0,
        s["np"] <= s["d0"] + 1,
        z3.Implies(waits, s["np"] <= s["d0"]),
        s["hpw"] >= 0,
        s["hpw"] <= s["h"],
        z3.Implies(nothing_ahead, s["hpw"] == 0),
        s["nf"] >= 0,
        s["kn"] == K * s["nf"],
        s["cn"] == room * s["nf"],
        s["wt"] <= s["kn"] + s["np"] + s["hpw"],
        s["sh"] >= 0,
        s["sh"] <= 1,
        z3.Implies(s["sh"] == 1, oa == 0),
        # no capacity wait yet: the passes with nothing owed are one run of holds
        # (counted by h) ended by the fire that admits t
        s["cw"] >= 0,
        z3.Implies(s["cw"] == 0, s["np"] <= K),
        z3.Implies(z3.And(s["cw"] == 0, nothing_ahead), s["np"] <= s["h"]),
        z3.Implies(z3.And(waits, oa > 0), s["np"] == 0),
        s["cn"] <= s["o0"] - oa - ot + z3.If(s["sh"] == 1, room, 0),
    )
    return z3.And(
        s["h"] >= 0,
        s["h"] < K,
        z3.Or(s["open"] == 0, s["open"] == 1),
        z3.Implies(s["open"] == 1, window),
    )


def _closes(st: Step) -> z3.BoolRef:
    return z3.And(st.s["open"] == 1, st.s2["open"] == 0)


def ttft_prop(st: Step) -> z3.BoolRef:
    """A closing window took <= K F + D + 1 passes, with c F < O + P + 2c; one still open
    has taken <= K F + K - 1 + D + 1 passes, with c F < O + P + c."""
    p, s2 = st.p, st.s2
    room = chunk_room(p)
    linear = z3.And(s2["kn"] == p["K"] * s2["nf"], s2["cn"] == room * s2["nf"])
    closed = z3.And(
        linear,
        s2["wt"] <= s2["kn"] + s2["d0"] + 1,
        s2["cn"] < s2["o0"] + 2 * room,
        z3.Implies(s2["cw"] == 0, s2["wt"] <= s2["kn"] + p["K"]),
    )
    still_open = z3.And(
        linear, s2["wt"] <= s2["kn"] + p["K"] + s2["d0"], s2["cn"] < s2["o0"] + room
    )
    return z3.And(z3.Implies(_closes(st), closed), z3.Implies(s2["open"] == 1, still_open))


def closed_form() -> z3.BoolRef:
    """c F < W + 2c and q = ceil(W / c) give K F <= K (q + 1), for every K, c >= 1."""
    K, c, F, W, q = z3.Ints("K c F W q")
    given = z3.And(K >= 1, c >= 1, F >= 0, W >= 1, c * (q - 1) < W, c * q >= W, c * F < W + 2 * c)
    return z3.ForAll([K, c, F, W, q], z3.Implies(given, K * (q + 1) >= K * F))


def open_form() -> z3.BoolRef:
    """c F < W + c and q = ceil(W / c) give K F + K <= K (q + 1): an open window is short
    of the closed bound by at least one pass."""
    K, c, F, W, q = z3.Ints("K c F W q")
    given = z3.And(K >= 1, c >= 1, F >= 0, W >= 1, c * (q - 1) < W, c * q >= W, c * F < W + c)
    return z3.ForAll([K, c, F, W, q], z3.Implies(given, K * (q + 1) >= K * F + K))


class _PartialWaitsForFullChunk(TtftWindow):
    """A fire runs owed prefill only when a whole chunk of it is owed."""

    def progress(self, p: Vars, owed: z3.ArithRef) -> z3.ArithRef:
        return z3.If(owed >= chunk_room(p), chunk_room(p), 0)


class _HeadSkipped(TtftWindow):
    """A fire passes over the head that fits (admission is not FCFS from the head)."""

    def admits_head(self, fire: z3.BoolRef) -> z3.BoolRef:
        return z3.BoolVal(False)


def _mutants() -> list[Mutant]:
    out = [
        named_mutant(
            "ttft window", "partial_waits_for_full_chunk",
            "a fire runs owed prefill only when a whole chunk is owed",
            _PartialWaitsForFullChunk(),
        ),
        named_mutant(
            "ttft window", "head_skipped", "a fire passes over the head that fits",
            _HeadSkipped(),
        ),
    ]  # fmt: skip
    for name in ("budget_off_by_one", "hold_not_counted"):
        broken = GATE_MUTANTS[name]
        over = TtftWindow(gate=broken.machine)  # type: ignore[arg-type]
        out.append(named_mutant("ttft window", f"gate_{name}", broken.description, over))
    return out


def _readable(p: Vars) -> z3.BoolRef:
    return z3.And(p["T"] <= 6, p["S"] <= 2, p["cap"] <= 3, p["B"] <= 4, p["K"] <= 3, p["Pt"] <= 4)


def _ttft_obligation() -> Obligation:
    return Obligation(
        id="S6",
        level="scheduler",
        statement="time to first token: from the pass a request becomes head of the queue "
        "to its first token, with no preemption or abort in between, at most K*F + D + 1 "
        "passes, and K*F + K if it never waited for capacity (nothing planned: EMPTY), "
        "where the F prefill fires satisfy c*F < O + P + 2c, so F <= ceil((O+P)/c) + 1 "
        "(O: prefill owed by running requests and D: their longest remaining output, both "
        "at headship; P: its prompt; c = min(cap, T-S+1)); a window still open after n "
        "passes has n <= K*(ceil((O+P)/c) + 1) + D, so every undisturbed window closes "
        "within the bound (on the TTFT window: any number of requests given its facts, which "
        "S15 proves of the folds of every undisturbed pass of the window for any number of "
        f"requests; block size {LIFE_BLOCK_SIZE})",
        machine=WINDOW,
        prop=ttft_prop,
        invariant=window_inv,
        mutants=_mutants(),
        monitors=MONITORS,
        lemmas=[closed_form, open_form],
        triggers=[
            lambda st: z3.And(_closes(st), st.s2["cw"] == 0),
            lambda st: z3.And(_closes(st), st.s2["cw"] > 0),
            lambda st: z3.And(st.s2["open"] == 1, st.s2["np"] > 0, st.s2["nf"] > 0),
            lambda st: z3.And(st.s["open"] == 1, st.s["tw"] == 0, st.s["oa"] > 0),
        ],
        trigger_names=[
            "a window closes with no capacity wait",
            "a window closes after a capacity wait",
            "an open window has had owing fires and passes behind decodes",
            "the tracked request runs while prefill is owed ahead of it",
        ],
        readable=_readable,
        trace_depth=10,
        scope=WINDOW_SCOPE,
        parametric=True,
    )


WINDOW_OBLIGATIONS: list[Obligation] = [_ttft_obligation()]
