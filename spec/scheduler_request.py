"""One request's part of a pass, as functions of its own state and what the pass hands it.

``SchedulerMachine`` builds every change a pass makes to a request from these
functions, one request at a time, threading the free-block count through
them. ``RequestLife`` (``densegate.spec.scheduler_life``) runs the same
functions with everything the other requests decide (free blocks, the budget
left, the admission totals, whether it is the preemption victim, whether the
gate fires) left arbitrary; so what is proved of one request there holds for
each request of a scheduler that runs them through these functions in that
order, whatever their number (S10's scope says how the per-slot one is tied to
it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeAlias

import z3

__all__ = [
    "ABORTED",
    "FINISHED",
    "NOT_ARRIVED",
    "RUNNING",
    "WAITING",
    "Req",
    "Turn",
    "decodes",
    "end_or_join",
    "needs_block",
    "owed",
    "pass_chunk",
    "preempt",
    "reserve_and_run",
    "sample",
    "scheduled",
    "take_block",
    "turn",
]

NOT_ARRIVED, WAITING, RUNNING, FINISHED, ABORTED = range(5)


@dataclass(frozen=True)
class Req:
    """A request's state: status, tokens computed, tokens generated, KV blocks held."""

    st: z3.ArithRef
    c: z3.ArithRef
    g: z3.ArithRef
    b: z3.ArithRef


Free: TypeAlias = z3.ArithRef
"""The free-block count, threaded through every request of a pass."""


def end_or_join(r: Req, free: Free, *, abort: z3.BoolRef, arrive: z3.BoolRef) -> tuple[Req, Free]:
    """Step 0: an abort ends the request and returns its blocks; an arrival queues it."""
    st = z3.If(abort, ABORTED, z3.If(arrive, WAITING, r.st))
    return Req(st, r.c, r.g, z3.If(abort, 0, r.b)), z3.If(abort, free + r.b, free)


def decodes(r: Req, prompt: z3.ArithRef) -> z3.BoolRef:
    """Running with every token but the last generated one computed: it decodes next."""
    return z3.And(r.st == RUNNING, r.g >= 1, r.c == prompt + r.g - 1)


def needs_block(r: Req, prompt: z3.ArithRef, block_size: int) -> z3.BoolRef:
    """Its blocks cannot hold the token it is about to compute."""
    return r.b * block_size < prompt + r.g


def preempt(
    r: Req, free: Free, victim: z3.BoolRef, frees: Callable[[z3.ArithRef], z3.ArithRef]
) -> tuple[Req, Free]:
    """Step 1, as the victim: back to the queue, recomputed from scratch, blocks returned
    (``frees`` is the machine's hook for how many)."""
    st = z3.If(victim, WAITING, r.st)
    nxt = Req(st, z3.If(victim, 0, r.c), r.g, z3.If(victim, 0, r.b))
    return nxt, z3.If(victim, free + frees(r.b), free)


@dataclass(frozen=True)
class Turn:
    """A decode turn as read off the request when the turn starts: whether it decodes and
    whether that decode needs a block (the one place these are defined; every machine and
    lemma about a decode turn reads them from here)."""

    dec: z3.BoolRef
    grow: z3.BoolRef

    def short(self, free: Free) -> z3.BoolRef:
        """Short of a block: it needs one and none is free (so something is preempted)."""
        return z3.And(self.grow, free == 0)


def turn(r: Req, prompt: z3.ArithRef, block_size: int) -> Turn:
    """Step 1: the request's decode turn, before any preemption it causes."""
    dec = decodes(r, prompt)
    return Turn(dec, z3.And(dec, needs_block(r, prompt, block_size)))


def take_block(r: Req, free: Free, t: Turn) -> tuple[Req, Free, z3.BoolRef]:
    """Step 1, its own turn: still running, it decodes, taking a block if it needs one."""
    dec = z3.And(t.dec, r.st == RUNNING)
    take = z3.And(dec, t.grow)
    return Req(r.st, r.c, r.g, z3.If(take, r.b + 1, r.b)), z3.If(take, free - 1, free), dec


def pass_chunk(admit: z3.BoolRef, admitted: z3.ArithRef, partial: z3.ArithRef) -> z3.ArithRef:
    """Steps 2-3: the prefill tokens the pass gives a request, its admission chunk if it is
    admitted, else its partial chunk (0 for neither)."""
    return z3.If(admit, admitted, partial)


def scheduled(dec: z3.BoolRef, fire: z3.BoolRef, chunk: z3.ArithRef) -> z3.BoolRef:
    """Step 5: the request runs this pass: it decodes, or the gate fires and it has a chunk."""
    return z3.Or(dec, z3.And(fire, chunk > 0))


def owed(r: Req, prompt: z3.ArithRef, dec: z3.BoolRef) -> z3.ArithRef:
    """Step 2: prefill tokens a running request that does not decode still owes."""
    return z3.If(z3.And(r.st == RUNNING, z3.Not(dec)), prompt + r.g - r.c, 0)


def reserve_and_run(
    r: Req,
    free: Free,
    *,
    fire: z3.BoolRef,
    chunk: z3.ArithRef,
    admit: z3.BoolRef,
    need: z3.ArithRef,
    dec: z3.BoolRef,
) -> tuple[Req, Free]:
    """Step 5, first half: a fire admits it (reserving ``need`` blocks) and runs its
    chunk; a decode computes one token whatever the gate says."""
    adm = z3.And(fire, admit)
    run = z3.And(fire, chunk > 0)
    st = z3.If(adm, RUNNING, r.st)
    b = z3.If(adm, need, r.b)
    c = z3.If(run, r.c + chunk, z3.If(dec, r.c + 1, r.c))
    return Req(st, c, r.g, b), z3.If(adm, free - need, free)


def sample(
    r: Req, free: Free, *, scheduled: z3.BoolRef, prompt: z3.ArithRef, most: z3.ArithRef
) -> tuple[Req, Free]:
    """Step 5, second half: a scheduled request that reached its end samples a token;
    with ``most`` tokens it finishes and returns its blocks."""
    got = z3.And(scheduled, r.c == prompt + r.g)
    g = z3.If(got, r.g + 1, r.g)
    done = z3.And(got, g == most)
    st = z3.If(done, FINISHED, r.st)
    return Req(st, r.c, g, z3.If(done, 0, r.b)), z3.If(done, free + r.b, free)
