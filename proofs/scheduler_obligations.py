"""Scheduler-level obligations S1-S8: the per-slot ones here, the rest imported.

The per-slot ones (S1, S2, S8 over ``densegate.spec.scheduler``; S6, time
to first token, ``densegate.proofs.scheduler_ttft``) are proved by induction
for every value of the parameters (pass budget, sequence slots, KV blocks, max
length, chunk cap, the gate's B/K/enabled) and of every request's prompt and
output length, for a fixed number of request slots and block size (the scope
says which). S1, S2 and S8 share one invariant, describing every reachable
state, proved inductive once; S6 adds its window monitors to it. S3-S5, S7 and
S9 (``densegate.proofs.scheduler_summary_obligations``) have no slots: they
hold for any number of requests, and S8 ties the per-slot machine to them.
"""

from __future__ import annotations

from collections.abc import Callable

import z3

from densegate.proofs.prover import Obligation, Step
from densegate.proofs.scheduler_mutants import scheduler_mutants
from densegate.proofs.scheduler_summary_obligations import summary_obligations
from densegate.proofs.scheduler_ttft import (
    closed_form,
    ttft_invariant,
    ttft_monitors,
    ttft_prop,
    ttft_triggers,
)
from densegate.spec.machine import Vars
from densegate.spec.scheduler import (
    NOT_ARRIVED,
    RUNNING,
    WAITING,
    SchedulerMachine,
)
from densegate.spec.scheduler_summary import pass_facts

__all__ = [
    "BLOCK_SIZE",
    "SCHEDULER",
    "SCHEDULER_OBLIGATIONS",
    "SLOTS",
    "TTFT_SLOTS",
    "invariant",
]

SLOTS = 4
TTFT_SLOTS = SLOTS
"""S6 runs at the same slot count (its consecution is the costliest query of the level)."""
BLOCK_SIZE = 2
SCHEDULER = SchedulerMachine(SLOTS, BLOCK_SIZE)
_MUTANTS = scheduler_mutants(SLOTS, BLOCK_SIZE)
_SCOPE = f"{SLOTS} requests, block size {BLOCK_SIZE}"
_TTFT_SCOPE = f"{TTFT_SLOTS} requests (any one tracked), block size {BLOCK_SIZE}"


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
            decoding = z3.And(g[i] >= 1, c[i] == P[i] + g[i] - 1)
            cons += [
                st[i] >= NOT_ARRIVED,
                st[i] <= 4,
                b[i] >= 0,
                c[i] >= 0,
                g[i] >= 0,
                g[i] <= M[i],
                z3.Implies(st[i] != RUNNING, b[i] == 0),
                z3.Implies(
                    st[i] == RUNNING,
                    z3.And(
                        b[i] >= 1,
                        b[i] * bs >= P[i] + g[i] - 1,
                        z3.Or(decoding, b[i] * bs >= P[i] + g[i]),
                        c[i] < P[i] + g[i],
                        g[i] < M[i],
                    ),
                ),
                z3.Implies(st[i] == WAITING, z3.And(c[i] == 0, g[i] < M[i])),
                z3.Implies(st[i] == NOT_ARRIVED, z3.And(c[i] == 0, g[i] == 0)),
            ]
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
    )


def _head_fits_held(st: Step) -> z3.BoolRef:
    return z3.And(_plan(st).head_fits, z3.Not(st.out["fire"]))


def _owed_cut_short(st: Step) -> z3.BoolRef:
    plan = _plan(st)
    return z3.And(st.out["fire"], plan.partial_work > plan.partial_run)


def _dense(st: Step) -> z3.BoolRef:
    from densegate.spec.gate import reason

    return st.out["reason"] == reason("DENSE")


def _ob(id: str, statement: str, prop, mutants, **kw) -> Obligation:  # type: ignore[no-untyped-def]
    # S1, S2 and S8 share one invariant, so its consecution (the
    # costly query) is proved once per run.
    return Obligation(
        id=id,
        level="scheduler",
        statement=statement,
        machine=SCHEDULER,
        prop=prop,
        invariant=invariant,
        mutants=[_MUTANTS[m] for m in mutants],
        readable=_readable,
        trace_depth=8,
        scope=_SCOPE,
        **kw,
    )


_ttft_window = ttft_invariant(SCHEDULER)


def _ttft_inv(p: Vars, s: Vars) -> z3.BoolRef:
    return z3.And(invariant(p, s), _ttft_window(p, s))


SCHEDULER_OBLIGATIONS: list[Obligation] = [
    _ob(
        "S1",
        "no deadlock: with any request waiting or running, the pass schedules a token",
        _no_idle,
        ["tail_escape_on_running"],
    ),
    _ob(
        "S2",
        "KV block conservation: free + held = num_blocks, free >= 0, every pass",
        _conserved,
        ["preemption_leaks"],
    ),
    _ob(
        "S8",
        "the per-slot scheduler steps its summary: every pass meets the pass facts "
        "(a head that fits is admitted by a fire and plans >= 1 token; owed prefill gets "
        ">= min(owed, cap, T-S+1); nothing planned is negative), its gate sees "
        "(min(planned, B), decodes) and a fire runs the plan, the sum of the per-request "
        "chunks",
        _steps_summary,
        ["serialized_chunks", "dense_from_queue", "partial_waits_for_full_chunk"],
        triggers=[_head_fits_held, _owed_cut_short, _dense],
        trigger_names=[
            "a head of the queue that fits is held",
            "a fire runs less than the prefill owed",
            "a DENSE fire",
        ],
    ),
    Obligation(
        id="S6",
        level="scheduler",
        statement="time to first token: from the pass a request becomes head of the queue "
        "to its first token, with no preemption or abort in between, at most K*F + D + 1 "
        "passes, and K*F + K if it never waited for capacity (nothing planned: EMPTY), "
        "where the F prefill fires satisfy c*F < O + P + 2c, so F <= ceil((O+P)/c) + 1 "
        "(O: prefill owed by running requests and D: their longest remaining output, both "
        "at headship; P: its prompt; c = min(cap, T-S+1))",
        machine=SCHEDULER,
        prop=ttft_prop,
        invariant=_ttft_inv,
        # (the gate that never counts holds, S5's mutant, breaks S6 too, but its
        # shortest trace here costs 5-20 s of bounded model checking)
        mutants=[_MUTANTS["gate_budget_off_by_one"]],
        monitors=ttft_monitors(TTFT_SLOTS),
        lemmas=[closed_form],
        triggers=ttft_triggers(),
        trigger_names=[
            "a window closes with no capacity wait",
            "a window closes after a capacity wait",
        ],
        readable=_readable,
        trace_depth=10,
        scope=_TTFT_SCOPE,
    ),
    *summary_obligations(SCHEDULER, _MUTANTS),
]
SCHEDULER_OBLIGATIONS.sort(key=lambda ob: ob.id)
