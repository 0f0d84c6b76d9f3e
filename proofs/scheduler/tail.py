"""S14: the per-slot pass after its decodes meets the ledger's and the summary's facts, any R.

``PassTail`` runs the per-slot scheduler's last four folds (partial chunks,
admission, reserve-and-run, sample) side by side, one request per step, each later
fold started from parameters. S14 proves by induction over the requests that the
folds' totals keep the relation below (S9's and S7's invariants among them, read
over the same steps), and its lemma reads the relation at the end, where the
parameters are the earlier folds' end values and the decode phase's totals are what
the requests add up to: there the ledger's plan, admission and commit facts
(``tail_facts``) and the summary's ``pass_facts`` hold. Built from a ledger, so a
ledger whose facts claim more than the folds give fails its lemma.
"""

from __future__ import annotations

import z3

from densegate.proofs.common import named_mutant
from densegate.proofs.obligation import Mutant, Obligation, Step
from densegate.proofs.scheduler.life import LIFE_BLOCK_SIZE, request_ok
from densegate.proofs.scheduler.scans import SCAN_HOOKS
from densegate.proofs.scheduler.scopes import LINK_SLOTS, fold_scope
from densegate.spec.machine import Vars
from densegate.spec.pass_ledger import PassLedger
from densegate.spec.pass_tail import PassTail
from densegate.spec.scheduler import SchedulerMachine
from densegate.spec.scheduler_request import FINISHED, Req
from densegate.spec.scheduler_summary import chunk_room, pass_facts

__all__ = ["TAIL_OBLIGATIONS", "ends_in_tail_facts", "folds_closed", "tail_obligation"]


def _ok_at(bs: int):  # type: ignore[no-untyped-def]
    def ok(P: z3.ArithRef, M: z3.ArithRef, r: Req) -> z3.BoolRef:
        return z3.And(*request_ok(P, M, r, bs))

    return ok


def _finished_keeps_blocks(
    r: Req, free: z3.ArithRef, *, scheduled: z3.BoolRef, prompt: z3.ArithRef, most: z3.ArithRef
) -> tuple[Req, z3.ArithRef]:
    """A finished request's blocks go back to the pool but it still counts them as held."""
    got = z3.And(scheduled, r.c == prompt + r.g)
    g = z3.If(got, r.g + 1, r.g)
    done = z3.And(got, g == most)
    return Req(z3.If(done, FINISHED, r.st), r.c, g, r.b), z3.If(done, free + r.b, free)


def _least(p: Vars, work: z3.ArithRef) -> z3.ArithRef:
    return z3.If(work < chunk_room(p), work, chunk_room(p))


def relation(p: Vars, s: Vars) -> z3.BoolRef:
    """The folds' totals after any prefix of the requests."""
    slots0, fire = p["S"] - p["run1_t"], p["fire"]
    fresh = z3.Not(s["seen_waiting"])
    roomy = z3.And(
        p["quiet"], slots0 >= 1, p["bud_e"] >= 1, s["hneed"] <= p["free1"],
        z3.Or(p["chunked"], s["htotal"] <= p["bud_e"]),
    )  # fmt: skip
    start = z3.And(s["slots"] == slots0, s["abudget"] == p["bud_e"], s["spare"] == p["free1"])
    return z3.And(
        # the partial chunks (S9's invariant; the owing requests are the partials)
        s["budget"] == p["T"] - p["d_t"] - s["prun"],
        s["prun"] >= 0,
        s["prun"] <= s["work"],
        s["prun"] >= _least(p, s["work"]),
        s["seen"] == s["now"],
        s["nd"] >= 0,
        s["now"] >= 0,
        s["nd"] <= p["d_t"],
        s["now"] <= p["ow_t"],
        s["nrun1"] == s["nd"] + s["now"],
        s["work"] >= s["now"],
        z3.Implies(s["now"] == 0, s["work"] == 0),
        # admission (S7's invariant, and what it admits)
        s["planned"] >= p["prun_e"],
        s["k"] == slots0 - s["slots"],
        s["a"] == p["free1"] - s["spare"],
        s["slots"] >= 0,
        s["spare"] >= 0,
        s["k"] >= 0,
        s["a"] >= s["k"],
        s["k"] <= s["nwait1"],
        s["nwait1"] >= 0,
        fresh == (s["nwait1"] == 0),
        z3.Implies(z3.Or(fresh, z3.Not(p["quiet"])), start),
        z3.Implies(z3.Not(p["quiet"]), s["stopped"]),
        z3.Implies(fresh, z3.And(s["stopped"] == z3.Not(p["quiet"]), z3.Not(s["head_fits"]))),
        z3.Implies(fresh, z3.And(z3.Not(s["head_admit"]), s["planned"] == p["prun_e"])),
        z3.Implies(s["head_fits"], z3.And(s["head_admit"], s["planned"] > 0)),
        z3.Implies(
            z3.And(s["seen_waiting"], z3.Not(s["head_fits"])),
            z3.And(z3.Not(s["head_admit"]), s["planned"] == p["prun_e"], s["stopped"]),
        ),
        z3.Implies(z3.And(s["seen_waiting"], roomy), s["head_fits"]),
        z3.Implies(s["seen_waiting"], z3.And(s["hneed"] <= p["N"], s["htotal"] < p["L"])),
        # the commit: reservations take what admission planned, samples give back blocks
        s["fr"] == p["free1"] - z3.If(fire, s["a"], 0),
        s["held2"] == s["held1"] + z3.If(fire, s["a"], 0),
        s["run2"] == s["nrun1"] + z3.If(fire, s["k"], 0),
        s["fc"] - p["fr_e"] == s["held2"] - s["held3"],
        s["held1"] >= s["nrun1"],
        z3.Implies(s["nrun1"] == 0, s["held1"] == 0),
        s["held3"] <= s["held2"],
        s["run3"] >= 0,
        s["run3"] <= s["run2"],
        s["held3"] >= s["run3"],
        z3.Implies(s["run3"] == 0, s["held3"] == 0),
    )


def _prop(st: Step) -> z3.BoolRef:
    return relation(st.p, st.s2)


def folds_closed(p: Vars, e: Vars) -> z3.BoolRef:
    """At the folds' end ``e``: the later folds started where the earlier ended
    (``bud_e``, ``prun_e``, ``fr_e``), the decode totals are the requests' sums and the
    pool was conserved after the decodes."""
    return z3.And(
        e["nd"] == p["d_t"],
        e["now"] == p["ow_t"],
        e["budget"] == p["bud_e"],
        e["prun"] == p["prun_e"],
        e["fr"] == p["fr_e"],
        e["held1"] == p["N"] - p["free1"],
    )


def ends_in_tail_facts(machine: PassTail, ledger: PassLedger) -> z3.BoolRef:
    """Lemma: the relation after the last request, with the later folds started where the
    earlier ended (``bud_e``, ``prun_e``, ``fr_e``), the decode totals the requests' sums
    and the pool conserved after the decodes (S11), gives ``ledger``'s plan, admission
    and commit facts and the summary's pass facts."""
    p, e = machine.params("end"), machine.state("end")
    pre = z3.Int("pre@end")
    closing = z3.And(
        machine.param_ok(p),
        folds_closed(p, e),
        pre >= 0,
        p["quiet"] == (pre == 0),
    )
    fig: dict[str, z3.ExprRef] = {"free1": p["free1"], "pre": pre}
    fig.update({"run1": e["nrun1"], "wait1": e["nwait1"], "d": e["nd"], "owing": e["now"]})
    fig.update({k: e[k] for k in ("work", "planned", "k", "a", "head_fits", "head_admit")})
    fig.update({"run": e["prun"], "free3": e["fc"], "held3": e["held3"], "run3": e["run3"]})
    lp = {k: p[k] for k in ("N", "S", "T", "cap")}
    summary = {k: fig[k] for k in ("planned", "d", "work", "run", "head_fits", "head_admit")}
    facts = z3.And(ledger.tail_facts(lp, fig, p["fire"], p["free1"]), pass_facts(lp, summary))
    return z3.Implies(z3.And(closing, relation(p, e)), facts)


def _readable(p: Vars) -> z3.BoolRef:
    small = [p[k] <= 4 for k in ("T", "N", "L", "cap", "free1", "fr_e", "bud_e", "prun_e")]
    return z3.And(*small, p["bud_e"] >= -1, p["fr_e"] >= -1)


def _mutants(bs: int) -> list[Mutant]:
    ok = _ok_at(bs)
    out = [
        named_mutant(
            "pass tail", name, SCAN_HOOKS[name][1], PassTail(SCAN_HOOKS[name][0](1, bs), ok)
        )
        for name in ("partial_waits_for_full_chunk", "serialized_chunks")
    ]
    broken = PassTail(SchedulerMachine(1, bs), ok, _finished_keeps_blocks)
    description = "a finished request returns its blocks but still holds them"
    out.append(named_mutant("pass tail", "finished_keeps_blocks", description, broken))
    return out


def tail_obligation(ledger: PassLedger, bs: int = LIFE_BLOCK_SIZE) -> Obligation:
    """S14 for ``ledger``'s facts, at block size ``bs``."""
    machine = PassTail(SchedulerMachine(1, bs), _ok_at(bs))
    return Obligation(
        id="S14",
        level="scheduler",
        statement=f"pass after the decodes (block size {bs}): over any number of requests, "
        "the partial chunks, admission and the commit (reserve and run, then sample), run one fold "
        f"each (S16: as the per-slot scheduler runs them, at {LINK_SLOTS} requests), meet the pass "
        "ledger's plan, admission and commit facts and the summary's pass facts: owed "
        "prefill gets >= min(owed, cap, T-S+1), a head that fits is admitted by a fire, "
        "admissions stay within free slots and blocks and stop after a preemption, the head"
        " of a quiet pass with nothing running fits, and the commit moves blocks only "
        "between requests and the free pool (by induction over the requests, one per step, "
        "read at the last)",
        machine=machine,
        prop=_prop,
        invariant=relation,
        mutants=_mutants(bs),
        readable=_readable,
        trace_depth=5,
        lemmas=[lambda: ends_in_tail_facts(machine, ledger)],
        scope=fold_scope(
            bs, "the partial chunks, admission and the commit's two halves, side by side"
        ),
        parametric=True,
        triggers=[
            lambda st: st.out["admit"],
            lambda st: z3.And(st.p["fire"], st.o["dec"], st.out["st3"] == FINISHED),
            lambda st: z3.And(st.s["now"] >= 1, st.s2["prun"] < st.s2["work"]),
        ],
        trigger_names=[
            "a request is admitted",
            "a decode finishes its request",
            "the budget runs out before the owed prefill",
        ],
    )


TAIL_OBLIGATIONS: list[Obligation] = [tail_obligation(PassLedger(), LIFE_BLOCK_SIZE)]
