"""S8: the per-slot scheduler steps its summary, its ledger and its TTFT window, and the
broken per-slot schedulers.

S8, over ``densegate.spec.scheduler``, is proved by induction for every value of
the parameters (pass budget, sequence slots, KV blocks, max length, chunk cap,
the gate's B/K/enabled) and of every request's prompt and output length, for a
fixed number of request slots and block size (its scope says which); its
invariant describes every reachable state. It checks the per-slot machine, the one
the implementation is compared against, against every fact the slot-free machines
observe: a regression oracle for the facts S11-S15 prove for any number of requests.
Its broken schedulers each change one hook of the spec
machine: two here (what the gate observes), the rest beside the obligation about
their hook (``LIFE_HOOKS``, ``SCAN_HOOKS``), all refuted here on the per-slot machine.
"""

from __future__ import annotations

from collections.abc import Callable
from types import MappingProxyType

import z3

from densegate.proofs.common import named_mutant
from densegate.proofs.obligation import Mutant, Obligation, Step
from densegate.proofs.scheduler.life import LIFE_BLOCK_SIZE, LIFE_HOOKS, request_ok
from densegate.proofs.scheduler.scans import SCAN_HOOKS
from densegate.proofs.scheduler.scopes import S8_SLOTS, per_slot_scope
from densegate.proofs.scheduler.ttft_cover import first_token, meets_window
from densegate.spec.gate import reason
from densegate.spec.machine import Vars
from densegate.spec.pass_ledger import ledger_facts
from densegate.spec.scheduler import (
    NOT_ARRIVED,
    RUNNING,
    WAITING,
    PassPlan,
    SchedulerMachine,
    count_true,
)
from densegate.spec.scheduler_request import Req
from densegate.spec.scheduler_summary import pass_facts

__all__ = [
    "BLOCK_SIZE",
    "PER_SLOT_MUTANTS",
    "PER_SLOT_OBLIGATIONS",
    "SCHEDULER",
    "SLOTS",
    "invariant",
    "invariant_of",
    "per_slot_mutants",
]

SLOTS = S8_SLOTS
"""Request slots S8 is proved at (``tests/test_proofs_scheduler_scale.py``: more)."""
BLOCK_SIZE = LIFE_BLOCK_SIZE
SCHEDULER = SchedulerMachine(SLOTS, BLOCK_SIZE)
_SCOPE = per_slot_scope(SLOTS, BLOCK_SIZE)


class _TailEscapeOnRunning(SchedulerMachine):
    """Flaw 2: the gate is told how many run, not how many decode."""

    def observe(self, p: Vars, plan: PassPlan) -> tuple[z3.ArithRef, z3.ArithRef]:
        w, _ = super().observe(p, plan)
        return w, z3.Sum([z3.If(x == RUNNING, 1, 0) for x in plan.st])


class _DenseFromQueue(SchedulerMachine):
    """Flaw 3: density counted over the whole queue, admissible or not."""

    def observe(self, p: Vars, plan: PassPlan) -> tuple[z3.ArithRef, z3.ArithRef]:
        _, d = super().observe(p, plan)
        P, g = self.slot(p, "P"), plan.g
        queued = z3.Sum([z3.If(x == WAITING, P[i] + g[i], 0) for i, x in enumerate(plan.st)])
        total = plan.partial_work + queued
        return z3.If(total < p["B"], total, p["B"]), d


_HOOKS: dict[str, tuple[type[SchedulerMachine], str]] = {
    "tail_escape_on_running": (
        _TailEscapeOnRunning,
        "gate's d counts running requests, not decoding ones (flaw 2)",
    ),
    "dense_from_queue": (_DenseFromQueue, "gate's w counts the whole queue (flaw 3)"),
    **LIFE_HOOKS,
    **SCAN_HOOKS,
}


def per_slot_mutants(slots: int, block_size: int) -> dict[str, Mutant]:
    """Every broken per-slot scheduler, at ``slots`` request slots and ``block_size``."""
    return {
        name: named_mutant("scheduler", name, description, cls(slots, block_size))
        for name, (cls, description) in _HOOKS.items()
    }


PER_SLOT_MUTANTS = per_slot_mutants(SLOTS, BLOCK_SIZE)
"""The broken per-slot schedulers at S8's scope; all but ``prompt_only_reservation``
(S10's, which S8's one-step facts do not see) are refuted by S8."""


def invariant_of(m: SchedulerMachine) -> Callable[[Vars, Vars], z3.BoolRef]:
    """Every reachable state of ``m``: blocks conserved, requests well-formed, arrival order."""

    def inv(p: Vars, s: Vars) -> z3.BoolRef:
        st, c, g, b = (m.slot(s, k) for k in ("st", "c", "g", "b"))
        P, M = m.slot(p, "P"), m.slot(p, "M")
        bs = m.bs
        running = z3.Sum([z3.If(x == RUNNING, 1, 0) for x in st])
        cons = [
            s["free"] >= 0,
            s["free"] + z3.Sum(b) == p["N"],
            s["h"] >= 0,
            s["h"] < p["K"],
            running <= p["S"],
        ]
        for i in range(m.R):
            cons += request_ok(P[i], M[i], Req(st[i], c[i], g[i], b[i]), bs)
            if i > 0:
                cons.append(z3.Implies(st[i] != NOT_ARRIVED, st[i - 1] != NOT_ARRIVED))
            cons += [z3.Implies(st[i] == WAITING, st[j] != RUNNING) for j in range(i + 1, m.R)]
        return z3.And(*cons)

    return inv


invariant = invariant_of(SCHEDULER)


def _readable(p: Vars) -> z3.BoolRef:
    return z3.And(p["S"] <= 2, p["T"] <= 6, p["N"] <= 6, p["L"] <= 6, p["K"] <= 3)


def _plan(st: Step):  # type: ignore[no-untyped-def]
    return st.machine.plan(st.p, st.s, st.o)  # type: ignore[attr-defined]


def _no_idle(st: Step) -> z3.BoolRef:
    work = z3.Or(*[z3.Or(x == RUNNING, x == WAITING) for x in _plan(st).st])
    return z3.Implies(work, st.out["prefill_tokens"] + st.out["decode_seqs"] > 0)


def _conserved(st: Step) -> z3.BoolRef:
    b = [st.s2[f"b{i}"] for i in range(st.machine.R)]  # type: ignore[attr-defined]
    return z3.And(st.s2["free"] >= 0, st.s2["free"] + z3.Sum(b) == st.p["N"])


def _pairs(plan: PassPlan) -> list[tuple[z3.ArithRef, z3.BoolRef]]:
    return list(zip(plan.st, plan.decoding, strict=True))


def _meets_ledger(st: Step) -> z3.BoolRef:
    """The pass's figures at each phase boundary meet ``ledger_facts``."""
    m: SchedulerMachine = st.machine  # type: ignore[assignment]
    plan, s, o, s2, R = _plan(st), st.s, st.o, st.s2, m.R
    st0, b, ab = m.slot(s, "st"), m.slot(s, "b"), m.slot(o, "abort")
    arrive = m.slot(o, "arrive")
    freed0 = z3.Sum([z3.If(ab[i], b[i], 0) for i in range(R)])
    fig = {
        "free0": s["free"] + freed0,
        "held0": z3.Sum(b) - freed0,
        "run0": count_true([z3.And(st0[i] == RUNNING, z3.Not(ab[i])) for i in range(R)]),
        "wait0": count_true(
            [z3.Or(z3.And(st0[i] == WAITING, z3.Not(ab[i])), arrive[i]) for i in range(R)]
        ),
        "free1": plan.free,
        "run1": count_true([x == RUNNING for x in plan.st]),
        "wait1": count_true([x == WAITING for x in plan.st]),
        "d": plan.d,
        "owing": count_true([z3.And(x == RUNNING, z3.Not(dec)) for x, dec in _pairs(plan)]),
        "pre": plan.preempted,
        "work": plan.partial_work,
        "planned": plan.planned,
        "run": plan.partial_run,
        "k": count_true(plan.admit),
        "a": z3.Sum([z3.If(plan.admit[i], plan.need[i], 0) for i in range(R)]),
        "free3": s2["free"],
        "held3": z3.Sum(m.slot(s2, "b")),
        "run3": count_true([x == RUNNING for x in m.slot(s2, "st")]),
        "head_fits": plan.head_fits,
        "head_admit": plan.head_admit,
    }
    totals = {"free": s["free"], "held": z3.Sum(b), "run": count_true([x == RUNNING for x in st0])}
    return ledger_facts(st.p, totals, fig, st.out["fire"], room=fig["free1"])


def _steps_summary(st: Step) -> z3.BoolRef:
    plan, p, out = _plan(st), st.p, st.out
    w = z3.If(plan.planned < p["B"], plan.planned, p["B"])
    figures = {
        "planned": plan.planned,
        "d": plan.d,
        "work": plan.partial_work,
        "run": plan.partial_run,
        "head_fits": plan.head_fits,
        "head_admit": plan.head_admit,
    }
    return z3.And(
        pass_facts(p, figures),
        out["w"] == w,
        out["decode_seqs"] == plan.d,
        out["prefill_tokens"] == z3.If(out["fire"], plan.planned, 0),
        # the commit runs the per-request chunks: their sum is the plan the scans total
        plan.planned == z3.Sum(plan.chunk),
        _meets_ledger(st),
        meets_window(st),
        _no_idle(st),
        _conserved(st),
    )


def _head_fits_held(st: Step) -> z3.BoolRef:
    return z3.And(_plan(st).head_fits, z3.Not(st.out["fire"]))


def _owed_cut_short(st: Step) -> z3.BoolRef:
    plan = _plan(st)
    return z3.And(st.out["fire"], plan.partial_work > plan.partial_run)


def _dense(st: Step) -> z3.BoolRef:
    return st.out["reason"] == reason("DENSE")


_ARITH = MappingProxyType({"smt.arith.solver": 2})
"""z3's older simplex-based arithmetic: about a third less time on the per-slot
machine's queries than its default (on the slot-free machines it is slower, or
runs out of its resource limit, so they keep the default)."""


def _ob(id: str, statement: str, prop, mutants, **kw) -> Obligation:  # type: ignore[no-untyped-def]
    # the per-slot machine's settings: its invariant, readable traces, scope, z3 options
    return Obligation(
        id=id,
        level="scheduler",
        statement=statement,
        machine=SCHEDULER,
        prop=prop,
        invariant=invariant,
        mutants=[PER_SLOT_MUTANTS[m] for m in mutants],
        readable=_readable,
        trace_depth=8,
        scope=_SCOPE,
        solver_options=_ARITH,
        **kw,
    )


PER_SLOT_OBLIGATIONS: list[Obligation] = [
    _ob(
        "S8",
        f"the per-slot scheduler ({SLOTS} requests, block size {BLOCK_SIZE}) steps its "
        "summary and its ledger: every pass meets the pass "
        "facts (a head that fits is admitted by a fire and plans >= 1 token; owed prefill "
        "gets >= min(owed, cap, T-S+1); nothing planned is negative) and the ledger facts "
        "(blocks, slots and requests at each phase boundary), its gate sees (min(planned, "
        "B), decodes), a fire runs the plan, the sum of the per-request chunks, any one "
        "request's undisturbed pass while it waits at the head or runs with no token yet "
        "meets the TTFT window's facts, and the pass itself never idles with work and "
        "conserves blocks (S1, S2 on this machine)",
        _steps_summary,
        [
            "serialized_chunks",
            "dense_from_queue",
            "partial_waits_for_full_chunk",
            "tail_escape_on_running",
            "preemption_leaks",
        ],
        triggers=[_head_fits_held, _owed_cut_short, _dense, first_token],
        trigger_names=[
            "a head of the queue that fits is held",
            "a fire runs less than the prefill owed",
            "a DENSE fire",
            "a tracked request's undisturbed window gives its first token",
        ],
    ),
]
