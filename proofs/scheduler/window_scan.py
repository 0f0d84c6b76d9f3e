"""S15: every undisturbed per-slot pass of a window meets the TTFT window's facts, any R.

``WindowScan`` runs an undisturbed pass (none preempted, none aborted) after its
decodes as the per-slot scheduler runs it (``PassTail``'s four folds, one request per
step) and folds the window's figures beside it (``ahead_step``). S15 proves by
induction over the requests that the sums keep the relation below (S14's relation
with it), and reads at every step, as if it were the last (the later folds started
where the earlier ended, as S14's lemma reads them), that the figures meet
``window_facts`` of the window it is built from and a state where ``t`` waits meets
``window_start``; and that the pass leaves ``t`` in its window while it has no token
(the requests before it stay settled). The arrival-order facts the window needs are
pairwise facts about slots before ``t`` and ``t``, carried by the window itself: at
headship every earlier request has arrived (a pass leaves a request not arrived
exactly when it was and does not arrive, lemma 2, and arrivals come in slot order,
lemma 3 for any two adjacent slots) and none waits (``t`` is the head); an
undisturbed pass keeps both.

Lemma 1: in an undisturbed pass, step 0 with no abort and a decode turn that is not
short of a block (a short one preempts, S12) change a request only by its arrival and
the block a decode takes, so the request as the decodes left it gives the figures
before the pass. Built from a window (``window_scan_obligation``), so a window fact
true only for a few requests (say, at most six decodes) fails here with a trace.
"""

from __future__ import annotations

import z3

from densegate.proofs.common import named_mutant
from densegate.proofs.obligation import Mutant, Obligation, Step
from densegate.proofs.scheduler.life import LIFE_BLOCK_SIZE, request_ok
from densegate.proofs.scheduler.scans import SCAN_HOOKS
from densegate.proofs.scheduler.scopes import fold_scope
from densegate.proofs.scheduler.tail import folds_closed, relation
from densegate.spec.machine import Vars
from densegate.spec.scheduler import SchedulerMachine
from densegate.spec.scheduler_request import (
    NOT_ARRIVED,
    RUNNING,
    WAITING,
    Req,
    end_or_join,
    owed,
    pass_chunk,
    reserve_and_run,
    sample,
    take_block,
    turn,
)
from densegate.spec.scheduler_scan import AdmitScan, admit_step, partial_step
from densegate.spec.scheduler_summary import chunk_room
from densegate.spec.ttft_window import TtftWindow, window_start
from densegate.spec.victim_search import Search
from densegate.spec.window_scan import WindowScan, settled

__all__ = ["WINDOW_SCAN_OBLIGATIONS", "window_scan_obligation"]


def _ok_at(bs: int):  # type: ignore[no-untyped-def]
    def ok(P: z3.ArithRef, M: z3.ArithRef, r: Req) -> z3.BoolRef:
        return z3.And(*request_ok(P, M, r, bs))

    return ok


def _least(p: Vars, x: z3.ArithRef) -> z3.ArithRef:
    return z3.If(x < chunk_room(p), x, chunk_room(p))


def window_relation(m: SchedulerMachine, p: Vars, s: Vars) -> z3.BoolRef:
    """The window's sums after any prefix of the requests (``past``: ``t`` passed)."""
    t, n, fire = p["t"], s["n"], p["fire"]
    past, waits, waits2 = n > t, s["tw"] == 1, s["tw2"] == 1
    all_ahead = z3.Or(z3.Not(past), waits)
    allowed = m.admission_allowed(p["prun_e"])
    return z3.And(
        n >= 0,
        z3.Implies(z3.Not(past), z3.And(s["nwait1"] == 0, s["tw"] == 0, s["tw2"] == 0)),
        z3.Implies(z3.Not(past), z3.And(s["runt"] == 0, z3.Not(s["tok"]))),
        z3.Or(s["tw"] == 0, waits),
        z3.Or(s["tw2"] == 0, waits2),
        *[s[k] >= 0 for k in ("oa", "ra", "runa", "oa2", "ra2", "runt", "ot2")],
        s["oa2"] <= s["oa"] - s["runa"],
        s["ra2"] <= s["ra"],
        z3.Implies(s["oa"] > 0, s["ra"] >= 1),
        z3.Implies(s["oa2"] > 0, s["ra2"] >= 1),
        z3.Implies(z3.Not(fire), z3.And(s["runa"] == 0, s["oa2"] == s["oa"], s["runt"] == 0)),
        z3.Implies(z3.Not(fire), s["tw2"] == s["tw"]),
        # what t's own step leaves
        z3.Implies(past, z3.And(s["ot2"] == s["ot"] - s["runt"], s["Pt"] >= 1)),
        z3.Implies(z3.And(past, waits), s["ot"] == s["Pt"]),
        z3.Implies(z3.And(past, waits2), z3.And(waits, s["runt"] == 0)),
        z3.Implies(z3.And(past, waits), waits2 == z3.Not(z3.And(fire, s["tok"]))),
        # while t waits every running request is ahead: the sums are the partial fold's
        z3.Implies(all_ahead, z3.And(s["oa"] == s["work"], s["runa"] == z3.If(fire, s["prun"], 0))),
        z3.Implies(z3.And(all_ahead, s["oa"] == 0), z3.Or(s["ra2"] == 0, s["ra2"] < s["ra"])),
        z3.Implies(z3.And(all_ahead, s["ra"] == 0), s["nrun1"] == 0),
        # t the head: its admission is the plan's, nothing after it joins unless it did
        z3.Implies(
            z3.And(past, waits),
            z3.And(
                s["seen_waiting"],
                s["head_admit"] == s["tok"],
                z3.Implies(s["tok"], s["head_fits"]),
                z3.Implies(z3.And(fire, z3.Not(s["tok"])), z3.Or(s["stopped"], z3.Not(allowed))),
            ),
        ),
        # once t runs, the requests ahead are those before it: S9's prefix bound there
        z3.Implies(
            z3.And(past, z3.Not(waits)),
            z3.And(
                s["oa"] == s["wa"],
                s["runa"] == z3.If(fire, s["pa"], 0),
                s["pa"] >= _least(p, s["wa"]),
                s["pat"] >= _least(p, s["wat"]),
                s["wat"] == s["wa"] + s["ot"],
                s["runt"] == z3.If(fire, s["pat"] - s["pa"], 0),
            ),
        ),
    )


def _closing(p: Vars, e: Vars) -> z3.BoolRef:
    """The later folds started where the earlier ended, the decode totals the requests'
    sums, the pool conserved after the decodes (as S14's lemma reads its end)."""
    return z3.And(folds_closed(p, e), e["n"] > p["t"])


def _figures(p: Vars, e: Vars) -> tuple[Vars, Vars, Vars]:
    """The window's parameters, its state before the pass and the pass's figures."""
    wp = {k: p[k] for k in ("T", "S", "cap")}
    wp["Pt"] = e["Pt"]
    ws = {k: e[k] for k in ("tw", "oa", "ot", "ra")}
    fig: dict[str, z3.ExprRef] = {"planned": e["planned"], "d": p["d_t"], "runa": e["runa"]}
    fig.update({"runt": e["runt"], "fits": e["head_fits"]})
    fig.update({k: e[k] for k in ("tw2", "oa2", "ot2", "ra2")})
    return wp, ws, fig


def _inv_of(m: SchedulerMachine):  # type: ignore[no-untyped-def]
    def inv(p: Vars, s: Vars) -> z3.BoolRef:
        return z3.And(relation(p, s), window_relation(m, p, s))

    return inv


def _prop_of(m: SchedulerMachine, window: TtftWindow):  # type: ignore[no-untyped-def]
    inv = _inv_of(m)

    def prop(st: Step) -> z3.BoolRef:
        p, s2, o, out = st.p, st.s2, st.o, st.out
        wp, ws, fig = _figures(p, s2)
        # read as the last request: the window's facts and start
        facts = z3.And(
            window.facts(wp, ws, fig, p["fire"]), z3.Implies(ws["tw"] == 1, window_start(wp, ws))
        )
        idx = st.s["n"]
        # the pass leaves t in its window while it has no token
        kept = z3.And(
            z3.Implies(idx < p["t"], settled(out["st3"])),
            z3.Implies(
                z3.And(idx == p["t"], out["g3"] == 0),
                z3.Or(out["st3"] == WAITING, out["st3"] == RUNNING),
            ),
        )
        r3 = Req(out["st3"], out["c3"], out["g3"], out["b3"])
        well = request_ok(o["P"], o["M"], r3, m.bs)
        return z3.And(inv(p, s2), kept, *well, z3.Implies(_closing(p, s2), facts))

    return prop


def undisturbed_is_figures(m: SchedulerMachine) -> z3.BoolRef:
    """Lemma 1: step 0 with no abort, a victim search step of a turn that is not short and
    the turn's own decode leave a request's status, computed and generated tokens as they
    were, but for an arrival (not arrived -> waiting)."""
    r = Req(*z3.Ints("st@u c@u g@u b@u"))
    P, free, slot = z3.Ints("P@u free@u slot@u")
    arrive = z3.Bool("arrive@u")
    acc = Search(z3.Int("sf@u"), z3.Bool("later@u"), z3.Int("victims@u"))
    r0, f0 = end_or_join(r, free, abort=z3.BoolVal(False), arrive=arrive)
    nxt, r1, victim = m.victim_step(acc, r0, slot, z3.BoolVal(False))
    r2, _, _ = take_block(r1, f0, turn(r1, P, m.bs))
    st = z3.If(arrive, WAITING, r.st)
    return z3.Implies(
        z3.Implies(arrive, r.st == NOT_ARRIVED),
        z3.And(r2.st == st, r2.c == r.c, r2.g == r.g, z3.Not(victim),
               nxt.victims == acc.victims),
    )  # fmt: skip


def arrival_only(m: SchedulerMachine) -> z3.BoolRef:
    """Lemma 2: a pass, with whatever the other requests decide, leaves a request not
    arrived exactly when it was not arrived and did not arrive (so arrivals in slot order
    keep every request before an arrived one arrived)."""
    r = Req(*z3.Ints("st@a c@a g@a b@a"))
    P, M, free, slot, budget, cap, need = z3.Ints("P@a M@a free@a slot@a bud@a cap@a need@a")
    arrive, abort, short, fire = z3.Bools("arrive@a abort@a short@a fire@a")
    acc = Search(z3.Int("sf@a"), z3.Bool("later@a"), z3.Int("victims@a"))
    r0, f0 = end_or_join(r, free, abort=abort, arrive=arrive)
    _, r1, _ = m.victim_step(acc, r0, slot, short)
    r2, _, dec2 = take_block(r1, f0, turn(r1, P, m.bs))
    _, n = partial_step(m.partial_chunk, budget, owed(r2, P, dec2), cap)
    adm = AdmitScan(*z3.Ints("sl@a ab@a sp@a pl@a"), *z3.Bools("sto@a sw@a hf@a ha@a"))
    _, ok, n_admit = admit_step(
        adm, waiting=r2.st == WAITING, total=P + r2.g, need=need, chunked=z3.Bool("ch@a"),
        cap=cap, quiet=z3.Bool("q@a"), allowed=z3.Bool("al@a"),
    )  # fmt: skip
    chunk = pass_chunk(ok, n_admit, n)
    r3, f3 = reserve_and_run(r2, f0, fire=fire, chunk=chunk, admit=ok, need=need, dec=dec2)
    r4, _ = sample(r3, f3, scheduled=z3.Or(dec2, z3.And(fire, chunk > 0)), prompt=P, most=M)
    given = z3.And(
        P >= 1, M >= 1, cap >= 1,
        z3.Implies(arrive, r.st == NOT_ARRIVED),
        z3.Implies(abort, z3.Or(r.st == WAITING, r.st == RUNNING)),
        *request_ok(P, M, r, m.bs),
    )  # fmt: skip
    return z3.Implies(given, (r4.st == NOT_ARRIVED) == z3.And(r.st == NOT_ARRIVED, z3.Not(arrive)))


def arrivals_keep_order(m: SchedulerMachine) -> z3.BoolRef:
    """Lemma 3: two adjacent slots, each leaving "not arrived" as lemma 2 says, under the
    per-slot machine's own arrival rule (its ``obs_ok`` over two slots): if the later has
    arrived only when the earlier has, the same holds after the pass."""
    two = type(m)(2, m.bs)
    p, s, o = two.params("k"), two.state("k"), two.fresh(two.obs_sorts, "k")
    after = [z3.Int(f"st{i}@k2") for i in range(2)]
    st, arrive = two.slot(s, "st"), two.slot(o, "arrive")
    stays = [(after[i] == NOT_ARRIVED) == z3.And(st[i] == NOT_ARRIVED, z3.Not(arrive[i]))
             for i in range(2)]  # fmt: skip
    before = z3.Implies(st[1] != NOT_ARRIVED, st[0] != NOT_ARRIVED)
    return z3.Implies(
        z3.And(two.obs_ok(p, s, o), before, *stays),
        z3.Implies(after[1] != NOT_ARRIVED, after[0] != NOT_ARRIVED),
    )


class _ChunkWhileWaiting(SchedulerMachine):
    """A waiting request's partial chunk: owed prefill is read off the queue too."""

    def partial_chunk(
        self, left: z3.ArithRef, cap: z3.ArithRef, budget: z3.ArithRef
    ) -> z3.ArithRef:
        return z3.If(budget > 0, z3.If(left < 1, 1, super().partial_chunk(left, cap, budget)), 0)


def _mutants(bs: int, window: TtftWindow) -> list[Mutant]:
    ok = _ok_at(bs)
    out = [
        named_mutant(
            "window scan", name, SCAN_HOOKS[name][1], WindowScan(SCAN_HOOKS[name][0](1, bs), ok)
        )
        for name in ("partial_waits_for_full_chunk", "serialized_chunks")
    ]
    description = "a request with nothing owed still gets a one-token partial chunk"
    out.append(named_mutant("window scan", "chunk_while_waiting", description,
                            WindowScan(_ChunkWhileWaiting(1, bs), ok)))  # fmt: skip
    return out


def _readable(p: Vars) -> z3.BoolRef:
    small = [p[k] <= 4 for k in ("L", "cap", "free1", "fr_e", "bud_e", "prun_e")]
    return z3.And(*small, p["T"] <= 9, p["N"] <= 9, p["t"] <= 8, p["bud_e"] >= -1, p["fr_e"] >= -1)


def window_scan_obligation(
    window: TtftWindow | None = None, bs: int = LIFE_BLOCK_SIZE, id: str = "S15"
) -> Obligation:
    """S15 for ``window``'s facts, at block size ``bs``."""
    window = window or TtftWindow()
    m = SchedulerMachine(1, bs)
    machine = WindowScan(m, _ok_at(bs))
    return Obligation(
        id=id,
        level="scheduler",
        statement=f"window figures (block size {bs}): over any number of requests, an "
        "undisturbed pass (none preempted, none aborted) of a tracked request's window (it "
        "has no token and waits or runs; every request before it has arrived and none waits) "
        "run as PassTail runs it meets the TTFT window's facts and, where the "
        "request waits, the window's start, and leaves the request in its window while it "
        "has no token (by induction over the requests, one per step, read at each as the "
        "last); lemmas: such a pass changes a request before its prefill phase only by an "
        "arrival and the blocks a decode takes, a request leaves 'not arrived' only by "
        "arriving, so arrivals in slot order keep every request before an arrived one "
        "arrived (two adjacent slots, any pass)",
        machine=machine,
        prop=_prop_of(m, window),
        invariant=_inv_of(m),
        mutants=_mutants(bs, window),
        readable=_readable,
        trace_depth=9,
        lemmas=[
            lambda: undisturbed_is_figures(m),
            lambda: arrival_only(m),
            lambda: arrivals_keep_order(m),
        ],
        scope=fold_scope(
            bs, "the window figures of an undisturbed pass, beside S14's folds after the decodes"
        ),
        parametric=True,
        triggers=[
            lambda st: z3.And(
                st.s["n"] == st.p["t"], st.o["st"] == WAITING, st.out["admit"], st.p["fire"]
            ),
            lambda st: z3.And(st.s["n"] > st.p["t"], st.s["tw"] == 0, st.s["oa"] > 0),
            lambda st: z3.And(st.s["n"] > st.p["t"], st.s["tw"] == 1, st.o["st"] == RUNNING),
        ],
        trigger_names=[
            "the tracked request is admitted",
            "the tracked request runs with prefill owed ahead of it",
            "a running request after a waiting tracked request is ahead of it",
        ],
    )


WINDOW_SCAN_OBLIGATIONS: list[Obligation] = [window_scan_obligation()]
