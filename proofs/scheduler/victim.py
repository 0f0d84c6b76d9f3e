"""S12: the per-slot victim search, for any number of slots, is a victim the decode scan allows.

``SchedulerMachine`` finds a short decode turn's victim by folding its
``victim_step`` from the last slot back to the turn's own (``VictimSearch``: the
fold as a machine, one slot per step, each step told its slot). S12 proves by
induction over the slots passed that the search preempts exactly one request when
the turn is short and some request runs among them, the first running one it meets
(the newest), holding >= 1 block, returns its blocks and changes nothing else. Its
lemma composes one whole turn (the search over the later slots, then the turn's own
slot, then the decode) and shows it is a step of S11's decode scan: S11's
observation constraints hold of it (its victim is a running request after the turn
holding >= 1 block, or itself when none runs after it) and the scan's totals move
exactly as the per-slot turn moves the slots' sums. So the per-slot decode phase is
the decode scan, for every number of requests.

The broken searches here (``VICTIM_HOOKS``) include one that looks only at the first
six slots: no pass with at most six requests tells it apart, so S8 cannot refute it;
this induction does, with a trace at slot 6.
"""

from __future__ import annotations

from collections.abc import Callable

import z3

from densegate.proofs.common import named_mutant
from densegate.proofs.obligation import Mutant, Obligation, Step
from densegate.proofs.scheduler.life import LIFE_BLOCK_SIZE, LIFE_HOOKS, request_ok
from densegate.proofs.scheduler.scopes import fold_scope
from densegate.spec.decode_scan import DecodeScan
from densegate.spec.machine import Vars
from densegate.spec.scheduler import SchedulerMachine
from densegate.spec.scheduler_request import (
    RUNNING,
    WAITING,
    Req,
    decodes,
    take_block,
    turn,
)
from densegate.spec.victim_search import Search, VictimSearch

__all__ = [
    "VICTIM_HOOKS",
    "VICTIM_OBLIGATIONS",
    "search_of",
    "turn_is_a_scan_step",
    "victim_obligation",
]

FIRST_SLOTS = 6
"""The slots the broken ``victim_among_first_six`` search looks at."""


class _VictimAmongFirstSix(SchedulerMachine):
    """The victim is searched for among the first six slots only (the same as the real
    search for every pass of at most six requests)."""

    def victim_step(
        self, acc: Search, r: Req, slot: z3.ArithRef, short: z3.BoolRef
    ) -> tuple[Search, Req, z3.BoolRef]:
        return super().victim_step(acc, r, slot, z3.And(short, slot < FIRST_SLOTS))


class _PreemptsEveryRunning(SchedulerMachine):
    """A short turn preempts every running request the search meets, not only the newest."""

    def victim_step(
        self, acc: Search, r: Req, slot: z3.ArithRef, short: z3.BoolRef
    ) -> tuple[Search, Req, z3.BoolRef]:
        fresh = Search(acc.free, z3.BoolVal(False), acc.victims)
        nxt, r2, victim = super().victim_step(fresh, r, slot, short)
        return Search(nxt.free, z3.Or(acc.later, nxt.later), nxt.victims), r2, victim


VICTIM_HOOKS: dict[str, tuple[type[SchedulerMachine], str]] = {
    "victim_among_first_six": (
        _VictimAmongFirstSix,
        "the decode victim is searched for among the first six slots only",
    ),
    "preempts_every_running": (
        _PreemptsEveryRunning,
        "a short decode turn preempts every running request, not only the newest",
    ),
}
"""Broken victim searches (name -> class, description): S12 refutes them."""


def _ok_at(bs: int) -> Callable[[z3.ArithRef, z3.ArithRef, Req], z3.BoolRef]:
    def ok(P: z3.ArithRef, M: z3.ArithRef, r: Req) -> z3.BoolRef:
        return z3.And(*request_ok(P, M, r, bs))

    return ok


def search_of(m: SchedulerMachine) -> VictimSearch:
    """``m``'s victim search as a machine (its step, its block size's request facts)."""
    return VictimSearch(m.victim_step, _ok_at(m.bs), m.bs, m.name)


def _relation(p: Vars, s: Vars) -> z3.BoolRef:
    """The search's totals against the slots passed: one victim iff the turn is short and
    a request runs among them, holding 1..(held - run + 1) blocks (all, if it is the only
    one), returned to the free pool; nothing else changes."""
    one = s["victims"] == 1
    return z3.And(
        s["later"] == (s["run"] >= 1),
        s["run"] >= 0,
        s["held"] >= s["run"],
        z3.Implies(s["run"] == 0, s["held"] == 0),
        s["victims"] == z3.If(z3.And(p["short"], s["run"] >= 1), 1, 0),
        s["free"] == p["free0"] + s["vb"],
        s["held_after"] == s["held"] - s["vb"],
        s["run_after"] == s["run"] - s["victims"],
        z3.Implies(one, z3.And(s["vb"] >= 1, s["vb"] <= s["held"] - s["run"] + 1)),
        z3.Implies(z3.And(one, s["run"] == 1), s["vb"] == s["held"]),
        z3.Implies(z3.Not(one), s["vb"] == 0),
        s["wait"] >= 0,
        s["wait_after"] == s["wait"] + s["victims"],
    )


def _prop(st: Step) -> z3.BoolRef:
    """After every slot: the relation, the victim is the first running request met, and
    a request is changed only as the victim (back to the queue, nothing computed or held)."""
    o, out = st.o, st.out
    same = z3.And(out["st2"] == o["st"], out["c2"] == o["c"], out["b2"] == o["b"])
    sent_back = z3.And(out["st2"] == WAITING, out["c2"] == 0, out["b2"] == 0)
    newest = z3.And(o["st"] == RUNNING, o["b"] >= 1, st.s["run"] == 0)
    r2 = Req(out["st2"], out["c2"], o["g"], out["b2"])
    return z3.And(
        _relation(st.p, st.s2),
        z3.Implies(out["victim"], z3.And(newest, sent_back)),
        z3.Implies(z3.Not(out["victim"]), same),
        *request_ok(o["P"], o["M"], r2, st.machine.bs),  # type: ignore[attr-defined]
    )


def turn_is_a_scan_step(m: SchedulerMachine) -> z3.BoolRef:
    """Lemma: one decode turn of ``m`` at slot ``i`` (the search over the later slots,
    ending in any state S12's relation allows, then slot ``i`` itself, then the decode)
    meets the decode scan's observation constraints, with the scan's rest being slot
    ``i`` and the later slots, and moves the scan's totals exactly as it moves the slots'."""
    search, scan = search_of(m), DecodeScan(m, _ok_at(m.bs))
    p, e = search.params("turn"), search.state("later")
    i = z3.Int("slot@turn")
    req = {k: z3.Int(f"{k}@turn") for k in ("st", "c", "g", "b", "P", "M")}
    r, P = Req(req["st"], req["c"], req["g"], req["b"]), req["P"]
    N = z3.Int("N@turn")
    # the turn, as ``SchedulerMachine._plan`` runs it
    t = turn(r, P, m.bs)
    short = t.short(p["free0"])
    acc = Search(e["free"], e["later"], e["victims"])
    done, r2, _ = m.victim_step(acc, r, i, short)
    r3, free3, dec3 = take_block(r2, done.free, t)
    # the same turn as a step of the decode scan
    sp = {"N": N, "run0": z3.Int("run0@turn"), "wait0": z3.Int("wait0@turn")}
    ss = scan.state("turn")
    running = z3.If(r.st == RUNNING, 1, 0)

    def waits(x: Req) -> z3.ArithRef:
        return z3.If(x.st == WAITING, 1, 0)

    given = [ss["free"] == p["free0"], ss["rest_held"] == e["held"] + r.b]
    given.append(ss["rest_run"] == e["run"] + running)
    vb = z3.If(e["victims"] == 1, e["vb"], e["held"] - e["run"] + 1)
    so = {**req, "vb": vb}
    (cmd,) = scan.commands(sp, ss, so)
    still = r3.st == RUNNING
    moved = {
        "free": free3,
        "done_held": ss["done_held"] + r3.b,
        "rest_held": e["held_after"],
        "rest_run": e["run_after"],
        "d": ss["d"] + z3.If(dec3, 1, 0),
        "owing": ss["owing"] + z3.If(z3.And(still, z3.Not(dec3)), 1, 0),
        "pre": ss["pre"] + done.victims,
        "run_done": ss["run_done"] + z3.If(still, 1, 0),
        # the waiting requests among slot i and the later ones, as the turn leaves them
        "wait": ss["wait"] + e["wait_after"] - e["wait"] + waits(r3) - waits(r),
    }
    premise = z3.And(
        p["short"] == short,
        p["free0"] >= 0,
        i >= 0,
        _relation(p, e),
        P >= 1,
        req["M"] >= 1,
        m.blocks_for(P + req["M"]) <= N,
        *request_ok(P, req["M"], r, m.bs),
    )
    # the request leaves its turn as the pass's later folds take it (S14's observation)
    after = z3.And(
        *request_ok(P, req["M"], r3, m.bs),
        z3.Implies(r3.st == RUNNING, dec3 == decodes(r3, P)),
        z3.Implies(r3.st != RUNNING, z3.Not(dec3)),
        z3.Implies(dec3, r3.b * m.bs >= P + r3.g),
    )
    claim = z3.And(
        scan.obs_ok(sp, ss, so),
        cmd.out["dec"] == dec3,
        *[cmd.next[k] == v for k, v in moved.items()],
        after,
    )
    return z3.Implies(z3.And(premise, *given), claim)


def _preempts(st: Step) -> z3.BoolRef:
    return st.out["victim"]


def _passes_over(st: Step) -> z3.BoolRef:
    return z3.And(st.s["victims"] == 1, st.o["st"] == RUNNING)


def _readable(p: Vars) -> z3.BoolRef:
    return p["free0"] <= 2


def victim_obligation(
    bs: int = LIFE_BLOCK_SIZE, scheduler: type[SchedulerMachine] = SchedulerMachine
) -> Obligation:
    """S12 at block size ``bs`` for ``scheduler``'s victim step (a spec edit is a subclass):
    its search's induction, and the turn lemma."""
    m = scheduler(1, bs)
    broken: list[Mutant] = [
        named_mutant("victim search", name, description, search_of(cls(1, bs)))
        for name, (cls, description) in VICTIM_HOOKS.items()
    ]
    leaks, description = LIFE_HOOKS["preemption_leaks"]
    broken.append(
        named_mutant("victim search", "preemption_leaks", description, search_of(leaks(1, bs)))
    )
    return Obligation(
        id="S12",
        level="scheduler",
        statement=f"victim search (block size {bs}): over any number of slots, a decode turn "
        "short of a block preempts exactly one request, the newest running one (the first "
        "met from the last slot back, itself if none runs after it), which holds >= 1 block "
        "and gets them back to the free pool, and changes no other request; so each decode "
        "turn of the per-slot scheduler is a step of S11's decode scan (a lemma: its "
        "constraints hold and its totals move as the slots' sums do), for any number of "
        "requests (by induction over the slots, one per step)",
        machine=search_of(m),
        prop=_prop,
        invariant=_relation,
        mutants=broken,
        readable=_readable,
        trace_depth=8,
        lemmas=[lambda: turn_is_a_scan_step(m)],
        scope=fold_scope(bs, "the victim search of one decode turn, from the last slot back"),
        parametric=True,
        triggers=[_preempts, _passes_over],
        trigger_names=[
            "the search preempts a request",
            "the search passes a running request after its victim",
        ],
    )


VICTIM_OBLIGATIONS: list[Obligation] = [victim_obligation(LIFE_BLOCK_SIZE)]
