"""S16: the per-slot pass is its folds' run, step 0 and everything after the decodes.

S13 and S14 prove their facts of ``JoinScan`` and ``PassTail`` for any number of
requests; the per-slot machine (the one S8 and R3 run) builds the same phases with
its own loops and its own glue between them (the budget ``T - d``, the decode count,
which slots each loop visits, what the commit is handed). S16 ties the two
semantically: for every admitted parameter value and observation and every state of
the per-slot machine at ``LINK_SLOTS`` request slots, one pass leaves what the folds leave
when run over its requests, one per step, with the lemmas' readings (S14: the decode
totals ``d_t``, ``ow_t``, ``run1_t`` are the folds' own sums, the later folds start
where the earlier ones end, ``fire`` is the gate's decision on the pass): every
request after step 0 and after the commit, the free blocks after each, the planned
prefill and the decode count the gate sees.

The decode phase itself is not compared here: S11 and S12 tie it through
``victim_step``, the hook both machines call. Its broken variants are glue edits that
change no pass of at most six requests, so S8 (3 slots) proves each of them; S16
refutes each with a trace at the seventh or eighth slot.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import z3

from densegate.proofs.common import named_mutant, true_invariant
from densegate.proofs.obligation import Mutant, Obligation, Step
from densegate.proofs.refinement.mutate import CodeMutant
from densegate.proofs.scheduler.life import LIFE_BLOCK_SIZE
from densegate.proofs.scheduler.scopes import LINK_SLOTS
from densegate.spec.join_scan import JoinScan
from densegate.spec.machine import Command, Machine, Vars
from densegate.spec.pass_tail import PassTail
from densegate.spec.scheduler import SchedulerMachine
from densegate.spec.scheduler_request import Req

__all__ = [
    "LINK_GLUE_TWINS",
    "LINK_OBLIGATIONS",
    "LINK_SLOTS",
    "PassLink",
    "folds_differ",
    "link_obligation",
]

_SLOT = ("st", "c", "g", "b")
_DECODE_TOTALS = {"d_t": "nd", "ow_t": "now", "run1_t": "nrun1"}
"""PassTail's decode-total parameters and the sums of its own that must equal them."""


class PassLink(Machine):
    """``m``'s pass with the gate's decision as an input: one command, ``m``'s own plan
    and commit (``plan``, ``_commit``) for either value of ``fire``.

    Every transition of ``m`` is one of these (the gate picks ``fire``), so what S16
    proves of every pass here it proves of ``m``'s, without the gate's terms in the
    query (which at eight slots make the prover's totality check take minutes).
    """

    def __init__(self, m: SchedulerMachine) -> None:
        self.m = m
        self.name = f"pass link{m.name.removeprefix('scheduler')}"
        self.param_sorts = m.param_sorts
        self.state_sorts = m.state_sorts
        self.obs_sorts = {**m.obs_sorts, "fire": z3.Bool}
        self.out_sorts = {k: v for k, v in m.out_sorts.items() if k != "reason"}

    def param_ok(self, p: Vars) -> z3.BoolRef:
        return self.m.param_ok(p)

    def init(self, p: Vars, s: Vars) -> z3.BoolRef:
        return self.m.init(p, s)

    def obs_ok(self, p: Vars, s: Vars, o: Vars) -> z3.BoolRef:
        return self.m.obs_ok(p, s, o)

    def commands(self, p: Vars, s: Vars, o: Vars) -> Sequence[Command]:
        plan = self.m.plan(p, s, o)
        out, nxt = self.m._commit(p, plan, o["fire"], {"fire": o["fire"]}, s["h"])
        out["w"] = self.m.observe(p, plan)[0]
        return [Command("PASS", z3.BoolVal(True), out, nxt)]

    def display_row(self, row: dict[str, Any]) -> dict[str, Any]:
        """The per-slot machine's row, with the decision the pass was given."""
        return self.m.display_row({**row, "reason": "given"})


def _anyone(P: z3.ArithRef, M: z3.ArithRef, r: Req) -> z3.BoolRef:
    """No per-request constraint: S16 compares terms, it assumes nothing of the requests."""
    return z3.BoolVal(True)


def initial(machine: Machine, p: Vars) -> Vars:
    """The state ``machine.init`` pins, as terms: each of its conjuncts is ``var == term``."""
    s = machine.state("link")
    names = {v.get_id(): k for k, v in s.items()}
    out: dict[str, z3.ExprRef] = {}
    todo = [machine.init(p, s)]
    while todo:
        c = todo.pop()
        if z3.is_and(c):
            todo.extend(c.children())
        elif z3.is_eq(c) and c.arg(0).get_id() in names:
            out[names[c.arg(0).get_id()]] = c.arg(1)
        else:
            raise ValueError(f"{machine.name}: init conjunct {c} is not var == term")
    if set(out) != set(s):
        raise ValueError(f"{machine.name}: init leaves {sorted(set(s) - set(out))} free")
    return out


def _requests(m: SchedulerMachine, s: Vars) -> list[Req]:
    return [Req(*(s[f"{k}{i}"] for k in _SLOT)) for i in range(m.R)]


def _join(m: SchedulerMachine, p: Vars, s: Vars, o: Vars) -> tuple[list[Req], z3.ExprRef]:
    """Step 0 as ``JoinScan`` runs it over the requests."""
    scan = JoinScan(_anyone)
    jp = {"free_s": s["free"]}
    js = initial(scan, jp)
    joined = []
    for i, r in enumerate(_requests(m, s)):
        obs = {k: getattr(r, k) for k in _SLOT}
        obs.update({"P": p[f"P{i}"], "M": p[f"M{i}"]})
        obs.update({"abort": o[f"abort{i}"], "arrive": o[f"arrive{i}"]})
        (cmd,) = scan.commands(jp, js, obs)
        joined.append(Req(*(cmd.out[f"{k}2"] for k in _SLOT)))
        js = dict(cmd.next)
    return joined, js["free"]


def _tail(m: SchedulerMachine, st: Step) -> tuple[list[Req], dict[str, z3.ExprRef]]:
    """The rest of the pass as ``PassTail`` runs it, its parameters read as S14's lemma does."""
    p, plan = st.p, m.plan(st.p, st.s, st.o)
    tail = PassTail(m, _anyone)
    tp: dict[str, z3.ExprRef] = {k: p[k] for k in ("T", "S", "N", "L", "cap", "chunked")}
    tp.update({"fire": st.out["fire"], "quiet": plan.preempted == 0, "free1": plan.free})
    later = {k: z3.FreshInt(f"link_{k}") for k in ("bud_e", "prun_e", "fr_e", *_DECODE_TOTALS)}
    tp.update(later)
    ts = initial(tail, tp)
    after, outs = [], []
    for i in range(m.R):
        obs = {k: getattr(plan, k)[i] for k in _SLOT}
        obs.update({"P": p[f"P{i}"], "M": p[f"M{i}"], "dec": plan.decoding[i]})
        (cmd,) = tail.commands(tp, ts, obs)
        outs.append(cmd.out)
        ts = dict(cmd.next)
    # the readings, in an order where each right side is free of what is still unread
    pairs = [(later[k], ts[total]) for k, total in _DECODE_TOTALS.items()]
    for k, end in (("bud_e", "budget"), ("prun_e", "prun"), ("fr_e", "fr")):
        pairs.append((later[k], z3.substitute(ts[end], *pairs)))

    def read(x: z3.ExprRef) -> z3.ExprRef:
        return z3.simplify(z3.substitute(x, *pairs)) if pairs else x

    for out in outs:
        after.append(Req(*(read(out[f"{k}3"]) for k in _SLOT)))
    return after, {k: read(v) for k, v in ts.items()}


def folds_differ(st: Step) -> list[tuple[str, z3.ExprRef, z3.ExprRef]]:
    """Each figure the per-slot pass and the folds' run both define: (name, machine, folds)."""
    link = st.machine
    assert isinstance(link, PassLink)
    m = link.m
    plan = m.plan(st.p, st.s, st.o)
    joined, free0 = _join(m, st.p, st.s, st.o)
    after, end = _tail(m, st)
    pairs: list[tuple[str, z3.ExprRef, z3.ExprRef]] = [("free after step 0", plan.free0, free0)]
    for i in range(m.R):
        for k in _SLOT:
            got, want = getattr(plan.joined[i], k), getattr(joined[i], k)
            pairs.append((f"{k}{i} after step 0", got, want))
            pairs.append((f"{k}{i} after the pass", st.s2[f"{k}{i}"], getattr(after[i], k)))
    pairs += [
        ("free after the pass", st.s2["free"], end["fc"]),
        ("free after the reservations", st.out["kv_free"], end["fr"]),
        ("planned prefill", plan.planned, end["planned"]),
        ("decodes the gate sees", st.out["decode_seqs"], end["nd"]),
        ("running after the reservations", st.out["running"], end["run2"]),
    ]
    return pairs


def _linked(st: Step) -> z3.BoolRef:
    return z3.And(*[a == b for _, a, b in folds_differ(st)])


def _plan_of(st: Step):  # type: ignore[no-untyped-def]
    link = st.machine
    assert isinstance(link, PassLink)
    return link.m.plan(st.p, st.s, st.o)


_TRIGGERS = {
    "the last slot admitted on a fire": lambda st: z3.And(st.out["fire"], _plan_of(st).admit[-1]),
    "every slot decodes": lambda st: z3.And(*_plan_of(st).decoding),
    "a request aborted": lambda st: z3.Or(*st.machine.m.slot(st.o, "abort")),
    "a preemption": lambda st: _plan_of(st).preempted > 0,
}


def _readable(p: Vars) -> z3.BoolRef:
    small = z3.And(p["T"] <= 10, p["N"] <= 16, p["L"] <= 4, p["K"] <= 2)
    return z3.And(small, z3.Not(p["chunked"]))


LINK_GLUE_TWINS = (
    CodeMutant(
        "admission_skips_from_slot_six",
        "admission never looks at slots >= 6: a seventh waiting request is never admitted",
        SchedulerMachine, "_plan",
        "waiting=st[i] == WAITING, total=total",
        "waiting=z3.And(st[i] == WAITING, i < 6), total=total",
    ),
    CodeMutant(
        "decodes_counted_in_first_six",
        "the pass's decode count reads only the first six slots: the budget T - d and the "
        "gate's d are too small with seven decodes",
        SchedulerMachine, "_plan",
        "d = count_true(decoding)",
        "d = count_true(decoding[:6])",
    ),
    CodeMutant(
        "commit_skips_last_slot",
        "with more than six slots the commit's reservations skip the last slot",
        SchedulerMachine, "_commit",
        "for i in range(self.R):\n        reqs[i], free = reserve_and_run(",
        "for i in range(self.R - (self.R > 6)):\n        reqs[i], free = reserve_and_run(",
    ),
)  # fmt: skip
"""The glue edits a fold proof cannot see: each changes no pass of at most six requests."""


def link_mutants(slots: int, block_size: int) -> list[Mutant]:
    return [
        named_mutant("scheduler", t.name, t.description, PassLink(t.build(slots, block_size)))
        for t in LINK_GLUE_TWINS
    ]


def link_obligation(slots: int = LINK_SLOTS, block_size: int = LIFE_BLOCK_SIZE) -> Obligation:
    """S16 at ``slots`` request slots and ``block_size``."""
    return Obligation(
        id="S16",
        level="scheduler",
        statement=f"the per-slot pass is its folds' run ({slots} requests, block size "
        f"{block_size}): step 0 leaves every request and the free blocks as JoinScan does, "
        "and the partial chunks, admission and commit leave them, the planned prefill and "
        "the decode count as PassTail does with S14's readings (the decode totals its own "
        "sums, each later fold started where the earlier ended), whether the gate fires "
        "or not",
        machine=PassLink(SchedulerMachine(slots, block_size)),
        prop=_linked,
        invariant=true_invariant,
        mutants=link_mutants(slots, block_size),
        trace_depth=3,
        triggers=list(_TRIGGERS.values()),
        trigger_names=list(_TRIGGERS),
        readable=_readable,
        scope=f"{slots} request slots (a run of fewer: the rest never arrive), block size "
        f"{block_size}, every parameter value and observation the machine admits and every "
        "state (reachable or not); "
        "the decode phase is tied by S11-S12 instead",
    )


LINK_OBLIGATIONS = [link_obligation()]
