"""The TTFT window's figures as one step per request, and an undisturbed pass as their fold.

The window of a tracked request ``t`` (``densegate.spec.ttft_window``) reads a pass
through figures: prefill owed by the requests *ahead* of ``t`` and by ``t``, the
longest remaining output ahead, and what a fire runs of each. ``ahead_step`` is the
one-request step those figures are folded from, in slot order: a running request is
ahead while ``t`` waits (whatever its slot), and, once ``t`` runs, when its slot is
before ``t``'s. The per-slot check (``densegate.proofs.scheduler.ttft_cover``) folds it
over the slots; ``WindowScan`` folds it over an undisturbed pass (none preempted, none
aborted), one request per transition, beside the pass's own folds after the decodes
(``PassTail``: partial chunks, admission, reserve-and-run, sample), so an induction
over its steps is an induction over the requests (S15).

A request is in ``t``'s window while ``t`` has no token, waits or runs, and every
request before it has arrived and none of them waits: at headship (``t`` the head of
the queue), and kept so by every undisturbed pass (S15 proves it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import z3

from densegate.spec.machine import Command, Vars
from densegate.spec.pass_tail import PassTail, RequestOk, Sample
from densegate.spec.scheduler import SchedulerMachine
from densegate.spec.scheduler_request import (
    ABORTED,
    FINISHED,
    RUNNING,
    WAITING,
    Req,
    sample,
)

__all__ = [
    "AHEAD_SUMS",
    "TRACKED_INTS",
    "Ahead",
    "WindowScan",
    "ahead_start",
    "ahead_step",
    "settled",
    "tracked_figures",
]

AHEAD_SUMS = ("oa", "ra", "runa", "oa2", "ra2")
"""Owed and longest output ahead before the pass, run ahead by a fire, owed and longest
output ahead after the pass."""
TRACKED_INTS = ("n", "tw", "ot", "tw2", "ot2", "runt", "Pt", "pa", "wa", "pat", "wat")
"""Requests passed; ``t``'s figures before and after and its chunk; its prompt; the
partial fold's chunks and owed prefill before ``t`` and up to ``t``."""


@dataclass(frozen=True)
class Ahead:
    """The window's sums over the requests passed."""

    oa: z3.ArithRef
    ra: z3.ArithRef
    runa: z3.ArithRef
    oa2: z3.ArithRef
    ra2: z3.ArithRef


def ahead_start() -> Ahead:
    zero = z3.IntVal(0)
    return Ahead(zero, zero, zero, zero, zero)


def _owed(r: Req, prompt: z3.ArithRef) -> z3.ArithRef:
    """Prefill a running request owes: all but what it has computed, unless it decodes
    next (every token but the last generated one computed)."""
    decoding = z3.And(r.g >= 1, r.c == prompt + r.g - 1)
    return z3.If(z3.And(r.st == RUNNING, z3.Not(decoding)), prompt + r.g - r.c, 0)


def _max(a: z3.ArithRef, b: z3.ArithRef) -> z3.ArithRef:
    return z3.If(b > a, b, a)


def ahead_step(
    acc: Ahead,
    before: Req,
    after: Req,
    *,
    prompt: z3.ArithRef,
    most: z3.ArithRef,
    earlier: z3.BoolRef,
    waits: z3.BoolRef,
    waits2: z3.BoolRef,
    run: z3.ArithRef,
) -> Ahead:
    """One request other than ``t``: ``earlier`` its slot is before ``t``'s, ``waits`` /
    ``waits2`` whether ``t`` waits before / after the pass, ``run`` the prefill a fire
    runs for it (0 on a hold)."""
    in1 = z3.And(before.st == RUNNING, z3.Or(earlier, waits))
    in2 = z3.And(after.st == RUNNING, z3.Or(earlier, waits2))
    return Ahead(
        oa=acc.oa + z3.If(in1, _owed(before, prompt), 0),
        ra=_max(acc.ra, z3.If(in1, most - before.g, 0)),
        runa=acc.runa + z3.If(in1, run, 0),
        oa2=acc.oa2 + z3.If(in2, _owed(after, prompt), 0),
        ra2=_max(acc.ra2, z3.If(in2, most - after.g, 0)),
    )


def tracked_figures(r: Req, prompt: z3.ArithRef) -> tuple[z3.ArithRef, z3.ArithRef]:
    """``t``'s own figures: waits (0/1), and the prefill it owes until its first token."""
    return z3.If(r.st == WAITING, 1, 0), z3.If(r.g >= 1, 0, prompt - r.c)


def settled(st: z3.ArithRef) -> z3.BoolRef:
    """A request before ``t`` in its window: arrived and not waiting."""
    return z3.Or(st == RUNNING, st == FINISHED, st == ABORTED)


class WindowScan(PassTail):
    """An undisturbed pass after its decodes, one request per transition, with ``t``'s
    window figures folded beside the pass's own folds.

    Adds to ``PassTail``: the parameter ``t`` (the tracked request's slot, any >= 0), the
    pass ``quiet`` (nothing preempted), the window sums (``AHEAD_SUMS``) and ``t``'s
    figures (``TRACKED_INTS``) as state, and to the observation whether the request
    arrived this pass (``arr``). In an undisturbed pass step 0 and the decode turns change
    a request only by an arrival (not arrived -> waiting) and the blocks a decode takes
    (S15's lemma), so the request as the decodes left it gives its figures before the
    pass. The observation is constrained to ``t``'s window: the requests before ``t``
    settled, ``t`` waiting or running with no token and not just arrived.
    """

    def __init__(self, m: SchedulerMachine, request_ok: RequestOk, sample_step: Sample = sample):
        super().__init__(m, request_ok, sample_step)
        self.name = f"window scan[{m.name.removeprefix('scheduler')}]"
        self.param_sorts["t"] = z3.Int
        self.state_sorts.update({k: z3.Int for k in (*AHEAD_SUMS, *TRACKED_INTS)})
        self.state_sorts["tok"] = z3.Bool
        self.obs_sorts["arr"] = z3.Bool

    def param_ok(self, p: Vars) -> z3.BoolRef:
        return z3.And(super().param_ok(p), p["quiet"], p["t"] >= 0)

    def init(self, p: Vars, s: Vars) -> z3.BoolRef:
        zero = [s[k] == 0 for k in (*AHEAD_SUMS, *TRACKED_INTS)]
        return z3.And(super().init(p, s), *zero, z3.Not(s["tok"]))

    def obs_ok(self, p: Vars, s: Vars, o: Vars) -> z3.BoolRef:
        st, idx, t = o["st"], s["n"], p["t"]
        arrived = z3.And(st == WAITING, o["c"] == 0, o["g"] == 0, o["b"] == 0)
        return z3.And(
            super().obs_ok(p, s, o),
            z3.Implies(o["arr"], arrived),
            z3.Implies(idx < t, settled(st)),
            z3.Implies(
                idx == t,
                z3.And(z3.Or(st == WAITING, st == RUNNING), o["g"] == 0, z3.Not(o["arr"])),
            ),
        )

    def commands(self, p: Vars, s: Vars, o: Vars) -> Sequence[Command]:
        (cmd,) = super().commands(p, s, o)
        chunk, ok = cmd.out["chunk"], cmd.out["admit"]
        before = Req(o["st"], o["c"], o["g"], o["b"])
        r3 = Req(*(cmd.out[k] for k in ("st3", "c3", "g3", "b3")))
        idx, t, fire = s["n"], p["t"], p["fire"]
        at, earlier = idx == t, idx < t
        run = z3.If(fire, chunk, 0)
        tw, ot = tracked_figures(before, o["P"])
        tw2, ot2 = tracked_figures(r3, o["P"])
        acc = Ahead(*[s[k] for k in AHEAD_SUMS])
        nxt_acc = ahead_step(
            acc, before, r3, prompt=o["P"], most=o["M"], earlier=earlier,
            waits=s["tw"] == 1, waits2=s["tw2"] == 1, run=run,
        )  # fmt: skip
        nxt: dict[str, z3.ExprRef] = dict(cmd.next)
        for k in AHEAD_SUMS:
            nxt[k] = z3.If(at, s[k], getattr(nxt_acc, k))
        mine = {"tw": tw, "ot": ot, "tw2": tw2, "ot2": ot2, "runt": run, "Pt": o["P"]}
        mine.update({"pa": s["prun"], "wa": s["work"], "pat": cmd.next["prun"]})
        mine["wat"] = cmd.next["work"]
        for k, v in mine.items():
            nxt[k] = z3.If(at, v, s[k])
        nxt["tok"] = z3.If(at, ok, s["tok"])
        nxt["n"] = idx + 1
        return [Command(cmd.name, cmd.guard, cmd.out, nxt)]

    def display_row(self, row: dict[str, Any]) -> dict[str, Any]:
        """``PassTail``'s row, then the window's sums and ``t``'s figures."""
        out = super().display_row(row)
        out.update({k: row.get(k) for k in ("arr", "c3", "g3", *AHEAD_SUMS, *TRACKED_INTS)})
        return out
