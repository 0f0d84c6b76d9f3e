"""One request's wait for its first token, for any number of requests: the TTFT window.

A *window* opens in the pass a request ``t`` is the head of the queue with no
token yet, and closes in the pass ``t`` samples its first token. ``TtftWindow``
has no request slots: it keeps the gate's counter, whether ``t`` still waits
(``tw``), the prefill ``t`` still owes (``ot``), the prefill owed by the
running requests ahead of it (``oa``) and the longest remaining output among
them (``ra``, 0 when none runs), plus the figures at headship (``o0 = oa +
prompt``, ``d0 = ra``). Everything running is ahead of a waiting ``t``
(admission is FCFS and arrivals join behind), so at headship ``oa`` and ``ra``
are the owed prefill and longest remaining output of all running requests.

Each step is an *undisturbed* pass (none preempted, none aborted), observed
through its figures and constrained only by ``window_facts``; each fact is meant
as a sum over requests of what S10 proves of one request, or a scan's result
(S7, S9 applied to the requests up to ``t``). S6 is proved of the window for any
number of requests given those facts; S15 proves that every undisturbed per-slot
pass of an open window meets them, for any number of requests (folding the
figures one request per step, ``densegate.spec.window_scan``), and S8 checks it
again at its slot count.
"""

from __future__ import annotations

from collections.abc import Sequence

import z3

from densegate.spec.gate import GATE, GateMachine
from densegate.spec.machine import Command, Vars
from densegate.spec.scheduler_summary import GatedPasses, chunk_room

__all__ = [
    "WINDOW_INTS",
    "WINDOW_STATE",
    "TtftWindow",
    "owed_up_to",
    "owing",
    "window_facts",
    "window_start",
]

WINDOW_STATE = ("tw", "oa", "ot", "ra")
"""The window's figures: t waits (0/1), owed ahead, owed by t, longest output ahead."""
WINDOW_INTS = ("planned", "d", "runa", "runt", "tw2", "oa2", "ot2", "ra2")
"""A pass's figures: planned prefill, decodes, prefill a fire runs ahead of t and of t
itself, and the window's figures after the pass."""


def _min(a: z3.ArithRef, b: z3.ArithRef) -> z3.ArithRef:
    return z3.If(a < b, a, b)


def owing(s: Vars) -> z3.BoolRef:
    """Prefill is owed at or before ``t``: it runs (owing until its first token), or a
    request ahead owes; otherwise ``t`` waits behind decodes only."""
    return z3.Or(s["tw"] == 0, s["oa"] > 0)


def owed_up_to(s: Vars) -> z3.ArithRef:
    """Prefill owed by the running requests up to ``t``: ahead, and ``t`` once it runs."""
    return s["oa"] + z3.If(s["tw"] == 1, 0, s["ot"])


def window_start(p: Vars, s: Vars) -> z3.BoolRef:
    """The figures of a request that has just become head: it waits and owes its prompt;
    prefill owed ahead means something runs ahead (with >= 1 output to go)."""
    return z3.And(
        s["tw"] == 1,
        s["ot"] == p["Pt"],
        s["oa"] >= 0,
        s["ra"] >= 0,
        z3.Implies(s["oa"] > 0, s["ra"] >= 1),
    )


def window_facts(
    p: Vars, s: Vars, o: Vars, fire: z3.BoolRef, progress: z3.ArithRef, admit: z3.BoolRef
) -> z3.BoolRef:
    """What an undisturbed pass of an open window guarantees (the owner of each fact in
    brackets). ``progress`` is the least a fire runs of ``owed`` prefill at or before ``t``
    (S9: ``min(owed, c)``); ``admit``: the pass admits the head that fits (S7: if it fires)."""
    tw, oa, ot, ra = (s[k] for k in WINDOW_STATE)
    tw2, oa2, ot2, ra2 = o["tw2"], o["oa2"], o["ot2"], o["ra2"]
    fits = o["fits"]
    waits = tw == 1
    owes = owing(s)
    return z3.And(
        o["planned"] >= 0,
        o["d"] >= 0,
        o["runa"] >= 0,
        o["runt"] >= 0,
        z3.Or(tw2 == 0, tw2 == 1),
        ra2 >= 0,
        # (S10) nothing is preempted: t never waits again, and a waiting t runs nothing
        z3.Implies(tw2 == 1, z3.And(waits, o["runt"] == 0)),
        # (S10) owed prefill drops by what a fire runs (ahead, by one more where a
        # re-admitted request's last token is left to its decode); a hold runs nothing
        oa2 <= oa - o["runa"],
        ot2 == ot - o["runt"],
        z3.Implies(z3.Not(fire), z3.And(o["runa"] == 0, o["runt"] == 0, oa2 == oa, tw2 == tw)),
        oa2 >= 0,
        ot2 >= 0,
        # (S9 on the requests ahead of t, and on those up to t)
        z3.Implies(fire, o["runa"] >= _min(oa, progress)),
        z3.Implies(z3.And(fire, z3.Not(waits)), o["runa"] + o["runt"] >= progress),
        # (S10) no request joins ahead of t; each ahead that owes nothing decodes and samples
        ra2 <= ra,
        z3.Implies(z3.And(z3.Not(owes), ra > 0), ra2 < ra),
        z3.Implies(z3.And(tw2 == 1, oa2 > 0), ra2 >= 1),
        # (S2, S7) nothing runs ahead of a waiting head: the pool is free and it fits
        z3.Implies(z3.And(waits, ra == 0), z3.And(o["d"] == 0, fits)),
        # (S7) a head that fits plans >= 1 token and a fire admits it; one that does not
        # fit, with nothing owed ahead, leaves nothing planned
        z3.Implies(z3.And(waits, fits), z3.And(o["planned"] > 0, z3.Implies(admit, tw2 == 0))),
        z3.Implies(z3.And(z3.Not(owes), z3.Not(fits)), z3.And(o["planned"] == 0, tw2 == 1)),
    )


class TtftWindow(GatedPasses):
    """The gate's counter and a window's figures over its undisturbed passes.

    Parameters: the gate's and the pass's (``GatedPasses``) and ``Pt``, the tracked
    request's prompt. ``open`` is 1 until ``t`` has no prefill left to run (its first
    token), then 0 and nothing is claimed."""

    def __init__(self, gate: GateMachine = GATE, name: str = "ttft window") -> None:
        super().__init__(gate, name)
        self.param_sorts["Pt"] = z3.Int
        self.state_sorts = {k: z3.Int for k in ("h", "open", *WINDOW_STATE, "o0", "d0")}
        self.obs_sorts = {k: z3.Int for k in WINDOW_INTS}
        self.obs_sorts["fits"] = z3.Bool

    def param_ok(self, p: Vars) -> z3.BoolRef:
        return z3.And(super().param_ok(p), p["Pt"] >= 1)

    def init(self, p: Vars, s: Vars) -> z3.BoolRef:
        """Headship at any gate state the gate can reach (0 <= h < K, proved by P1)."""
        return z3.And(
            s["h"] >= 0,
            s["h"] < p["K"],
            s["open"] == 1,
            window_start(p, s),
            s["o0"] == s["oa"] + p["Pt"],
            s["d0"] == s["ra"],
        )

    def progress(self, p: Vars, owed: z3.ArithRef) -> z3.ArithRef:
        """The least a fire runs of ``owed`` prefill (a hook for a broken variant)."""
        return _min(owed, chunk_room(p))

    def admits_head(self, fire: z3.BoolRef) -> z3.BoolRef:
        """Whether a pass admits the head that fits: when it fires (a hook for a broken
        variant)."""
        return fire

    def facts(self, p: Vars, s: Vars, o: Vars, fire: z3.BoolRef) -> z3.BoolRef:
        """``window_facts`` with this window's progress and admission rules."""
        progress = self.progress(p, owed_up_to(s))
        return window_facts(p, s, o, fire, progress, self.admits_head(fire))

    def obs_ok(self, p: Vars, s: Vars, o: Vars) -> z3.BoolRef:
        return z3.Implies(s["open"] == 1, self.facts(p, s, o, self.fires(p, s, o)))

    def commands(self, p: Vars, s: Vars, o: Vars) -> Sequence[Command]:
        w, _ = self.observe(p, o)
        out_cmds = []
        for gc in self.gate_commands(p, s, o):
            nxt: dict[str, z3.ExprRef] = {"h": gc.next["h"], "o0": s["o0"], "d0": s["d0"]}
            nxt.update({k: o[f"{k}2"] for k in WINDOW_STATE})
            nxt["open"] = z3.If(z3.And(s["open"] == 1, o["ot2"] > 0), 1, 0)
            out_cmds.append(Command(gc.name, gc.guard, {**gc.out, "w": w}, nxt))
        return out_cmds
