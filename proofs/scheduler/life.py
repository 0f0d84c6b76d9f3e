"""S10: every request stays well-formed and moves blocks only to and from the free pool.

Proved of ``RequestLife``: one request's part of a pass with everything the
other requests decide left arbitrary, so the result holds for each request
of a scheduler with any number of them. ``request_ok`` is the per-request half
of the per-slot invariant (``per_slot.invariant_of`` uses it as is); the facts
S3-S5 and S9 take as given (generated >= 0, computed <= prompt + generated) are
conjuncts of it, and "each pass changes free blocks by exactly what the request
gives back or takes" is what block conservation (S2) sums. The broken schedulers
here change how a request's blocks are taken or given back (``LIFE_HOOKS``); S8
and S11 refute them too, on their own machines.
"""

from __future__ import annotations

import z3

from densegate.proofs.common import named_mutant
from densegate.proofs.obligation import Mutant, Obligation, Step
from densegate.proofs.scheduler.scopes import life_scope
from densegate.spec.machine import Vars
from densegate.spec.scheduler import SchedulerMachine
from densegate.spec.scheduler_life import RequestLife
from densegate.spec.scheduler_request import (
    NOT_ARRIVED,
    RUNNING,
    WAITING,
    Req,
    preempt,
    take_block,
    turn,
)

__all__ = [
    "LIFE_BLOCK_SIZE",
    "LIFE_HOOKS",
    "LIFE_OBLIGATIONS",
    "life_obligation",
    "preempted_early_is_life",
    "request_ok",
]

LIFE_BLOCK_SIZE = 2
"""The block size S10 and S11 (and so S1-S6, which rest on them) are reported at."""


class _PreemptionLeaks(SchedulerMachine):
    def preempt_frees(self, held: z3.ArithRef) -> z3.ArithRef:
        return held - 1


class _PromptOnlyReservation(SchedulerMachine):
    """An admission reserves blocks for the prompt only, not the tokens it recomputes."""

    def reserved_tokens(self, prompt: z3.ArithRef, generated: z3.ArithRef) -> z3.ArithRef:
        return prompt


LIFE_HOOKS: dict[str, tuple[type[SchedulerMachine], str]] = {
    "preemption_leaks": (_PreemptionLeaks, "a preemption returns one block too few"),
    "prompt_only_reservation": (
        _PromptOnlyReservation,
        "an admission reserves blocks for the prompt only, not prompt + generated",
    ),
}
"""Broken schedulers (name -> class, description) that move a request's blocks wrongly."""


def request_ok(P: z3.ArithRef, M: z3.ArithRef, r: Req, bs: int) -> list[z3.BoolRef]:
    """One request's well-formedness: counts in range, blocks held only while running and
    enough for every computed token (and the next one unless it decodes next)."""
    decoding = z3.And(r.g >= 1, r.c == P + r.g - 1)
    return [
        r.st >= NOT_ARRIVED,
        r.st <= 4,
        r.b >= 0,
        r.c >= 0,
        r.g >= 0,
        r.g <= M,
        z3.Implies(r.st != RUNNING, r.b == 0),
        z3.Implies(
            r.st == RUNNING,
            z3.And(
                r.b >= 1,
                r.b * bs >= P + r.g - 1,
                z3.Or(decoding, r.b * bs >= P + r.g),
                r.c < P + r.g,
                r.g < M,
            ),
        ),
        z3.Implies(r.st == WAITING, z3.And(r.c == 0, r.g < M)),
        z3.Implies(r.st == NOT_ARRIVED, z3.And(r.c == 0, r.g == 0)),
    ]


def _req(s: Vars) -> Req:
    return Req(s["st"], s["c"], s["g"], s["b"])


def _life_inv(bs: int):  # type: ignore[no-untyped-def]
    def inv(p: Vars, s: Vars) -> z3.BoolRef:
        return z3.And(*request_ok(p["P0"], p["M0"], _req(s), bs))

    return inv


def _facts(st: Step) -> z3.BoolRef:
    """What the other obligations take from S10, about the request after the pass."""
    r, P = _req(st.s2), st.p["P0"]
    bs = st.machine.m.bs  # type: ignore[attr-defined]
    live = z3.Or(r.st == WAITING, r.st == RUNNING)
    kept = z3.And(st.s["st"] == RUNNING, z3.Not(st.o["abort"]), z3.Not(st.o["victim"]))
    return z3.And(
        r.g >= 0,
        z3.Implies(live, r.c <= P + r.g),
        z3.Implies(r.st == RUNNING, z3.And(r.b >= 1, r.b * bs >= r.c)),
        z3.Implies(r.st != RUNNING, r.b == 0),
        st.out["freed"] == st.s["b"] - r.b,
        # a decode samples a token; a running request that neither decodes nor is
        # preempted or aborted computes exactly the chunk a fire gives it
        z3.Implies(st.out["dec"], r.g == st.s["g"] + 1),
        z3.Implies(
            z3.And(kept, z3.Not(st.out["dec"])),
            r.c == st.s["c"] + z3.If(st.o["fire"], st.out["chunk"], 0),
        ),
    )


def preempted_early_is_life(m: SchedulerMachine) -> z3.BoolRef:
    """Lemma: a request an earlier decode turn preempted meets its own turn queued, so the
    per-slot machine reads whether it decodes off the queued request; ``RequestLife``
    reads it off the request before the preemption. Either way its turn leaves it (and
    the free blocks) the same and it does not decode."""
    r = Req(*z3.Ints("st c g b"))
    P, free, at_turn = z3.Ints("P free free_at_turn")
    early, _ = preempt(r, free, z3.BoolVal(True), m.preempt_frees)
    per_slot = take_block(early, at_turn, turn(early, P, m.bs))
    life = take_block(early, at_turn, turn(r, P, m.bs))
    same = z3.And(*[getattr(per_slot[0], k) == getattr(life[0], k) for k in ("st", "c", "g", "b")])
    return z3.And(same, per_slot[1] == life[1], z3.Not(per_slot[2]), z3.Not(life[2]))


def _preempted(st: Step) -> z3.BoolRef:
    return z3.And(st.o["victim"], st.s["b"] > 0)


def _readmitted(st: Step) -> z3.BoolRef:
    return z3.And(st.out["admit"], st.o["fire"], st.s["g"] > 0)


def _finishes(st: Step) -> z3.BoolRef:
    return z3.And(st.s["st"] == RUNNING, st.s2["b"] == 0, st.s2["g"] == st.p["M0"])


def _readable(p: Vars) -> z3.BoolRef:
    return z3.And(p["T"] <= 6, p["N"] <= 6, p["L"] <= 6, p["cap"] <= 4, p["S"] <= 2)


def _life_mutant(name: str, bs: int) -> Mutant:
    cls, description = LIFE_HOOKS[name]
    return named_mutant("request life", name, description, RequestLife(cls(1, bs)))


def life_obligation(bs: int = LIFE_BLOCK_SIZE) -> Obligation:
    """S10 at block size ``bs`` (a Python int keeps every constraint linear)."""
    return Obligation(
        id="S10",
        level="scheduler",
        statement=f"request life (block size {bs}; one request's pass, whatever the other "
        "requests, any number of them, decide): the request keeps generated >= 0, computed "
        "<= prompt + generated while queued or running, >= 1 block while running and none "
        "otherwise, blocks for every token it has computed, and each pass changes the free "
        "pool by exactly the blocks it gives back or takes; a decode samples a token, and a "
        "running request that neither decodes nor is preempted or aborted computes exactly "
        "the chunk a fire gives it",
        machine=RequestLife(SchedulerMachine(1, bs)),
        prop=_facts,
        invariant=_life_inv(bs),
        mutants=[_life_mutant(name, bs) for name in LIFE_HOOKS],
        readable=_readable,
        trace_depth=8,
        triggers=[_preempted, _readmitted, _finishes],
        trigger_names=[
            "the request is preempted",
            "a preempted request is admitted again",
            "the request finishes",
        ],
        scope=life_scope(bs),
        parametric=True,
        lemmas=[lambda: preempted_early_is_life(SchedulerMachine(1, bs))],
    )


LIFE_OBLIGATIONS: list[Obligation] = [life_obligation(LIFE_BLOCK_SIZE)]
