"""The scheduler's prefill phases as one step per request, and each step as a machine.

``SchedulerMachine`` builds step 2 of a pass (partial chunks from the budget)
by folding ``partial_step`` over its request slots, and step 3 (FCFS
admission) by folding ``admit_step``. Because each fold is a machine too
(``PartialScan``, ``AdmissionScan``: the running totals are the state, one
request the observation), the prover's induction over its steps is an
induction over the requests: what it proves holds for every number of
requests, not for a fixed slot count. The scheduler summary
(``densegate.spec.scheduler_summary``) builds on the facts proved here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import z3

from densegate.spec.machine import Command, Machine, Vars

__all__ = [
    "AdmissionScan",
    "AdmitScan",
    "ChunkRule",
    "PartialScan",
    "admit_start",
    "admit_step",
    "partial_start",
    "partial_step",
]

ChunkRule = Callable[[z3.ArithRef, z3.ArithRef, z3.ArithRef], z3.ArithRef]
"""``(left, cap, budget) -> tokens``: the next chunk of a partial prefill."""


def partial_start(budget: z3.ArithRef, decodes: z3.ArithRef) -> z3.ArithRef:
    """Step 2's budget before the first request: the pass budget less a token per decode."""
    return budget - decodes


def partial_step(
    rule: ChunkRule, budget: z3.ArithRef, left: z3.ArithRef, cap: z3.ArithRef
) -> tuple[z3.ArithRef, z3.ArithRef]:
    """One running request in slot order: the chunk it runs, and the budget left after it."""
    n = rule(left, cap, budget)
    return budget - n, n


class PartialScan(Machine):
    """The partial-chunk fold as a machine: one transition per request.

    Parameters are the pass budget ``T``, sequence slots ``S``, the chunk cap
    and the decodes ``d`` (which take their tokens first); the observation is
    the next request's owed prefill ``left`` (0 unless it is a running partial
    prefill). A partial prefill is a running request that does not decode, so
    with ``seen`` partials before it ``d + seen + 1 <= S``: the one fact about
    the whole pass the scan assumes (running requests never exceed S).
    """

    def __init__(self, rule: ChunkRule, name: str) -> None:
        self.rule = rule
        self.name = f"partial scan[{name}]"
        self.param_sorts = {k: z3.Int for k in ("T", "S", "cap", "d")}
        self.state_sorts = {k: z3.Int for k in ("budget", "work", "run", "seen")}
        self.obs_sorts = {"left": z3.Int}
        self.out_sorts = {"tokens": z3.Int}

    def param_ok(self, p: Vars) -> z3.BoolRef:
        return z3.And(p["S"] >= 1, p["T"] >= p["S"], p["cap"] >= 1, p["d"] >= 0, p["d"] <= p["S"])

    def init(self, p: Vars, s: Vars) -> z3.BoolRef:
        zero = [s[k] == 0 for k in ("work", "run", "seen")]
        return z3.And(s["budget"] == partial_start(p["T"], p["d"]), *zero)

    def obs_ok(self, p: Vars, s: Vars, o: Vars) -> z3.BoolRef:
        left = o["left"]
        return z3.And(left >= 0, z3.Implies(left > 0, p["d"] + s["seen"] + 1 <= p["S"]))

    def commands(self, p: Vars, s: Vars, o: Vars) -> Sequence[Command]:
        budget, n = partial_step(self.rule, s["budget"], o["left"], p["cap"])
        nxt = {
            "budget": budget,
            "work": s["work"] + o["left"],
            "run": s["run"] + n,
            "seen": s["seen"] + z3.If(o["left"] > 0, 1, 0),
        }
        return [Command("SCAN", z3.BoolVal(True), {"tokens": n}, nxt)]

    def display_row(self, row: dict[str, Any]) -> dict[str, Any]:
        """One request per row: what it owes, the chunk it gets, the totals before and after."""
        out: dict[str, Any] = {"request": row["pass"]}
        return {**out, **{k: v for k, v in row.items() if k != "pass"}}


def _min3(a: z3.ArithRef, b: z3.ArithRef, c: z3.ArithRef) -> z3.ArithRef:
    ab = z3.If(b < a, b, a)
    return z3.If(c < ab, c, ab)


@dataclass(frozen=True)
class AdmitScan:
    """Running totals of the admission phase after a prefix of the queue."""

    slots: z3.ArithRef
    """Sequence slots still free."""
    budget: z3.ArithRef
    """Tokens of the pass budget still free."""
    spare: z3.ArithRef
    """KV blocks still free."""
    planned: z3.ArithRef
    """Prefill tokens the pass runs if the gate fires: partial chunks plus admissions so far."""
    stopped: z3.BoolRef
    """Admission has stopped (something was preempted, or a waiting request did not fit)."""
    seen_waiting: z3.BoolRef
    """A waiting request was met: later waiting ones are not the head."""
    head_fits: z3.BoolRef
    """The head of the queue fits this pass (slot, blocks, budget; nothing preempted)."""
    head_admit: z3.BoolRef
    """The plan admits the head of the queue if the gate fires."""


def admit_start(
    slots: z3.ArithRef,
    budget: z3.ArithRef,
    spare: z3.ArithRef,
    partial_run: z3.ArithRef,
    quiet: z3.BoolRef,
) -> AdmitScan:
    """Totals before the first request: what decodes and partial chunks left, and
    whether the pass is quiet (nothing preempted; otherwise nothing is admitted)."""
    false = z3.BoolVal(False)
    return AdmitScan(slots, budget, spare, partial_run, z3.Not(quiet), false, false, false)


def admit_step(
    acc: AdmitScan,
    *,
    waiting: z3.BoolRef,
    total: z3.ArithRef,
    need: z3.ArithRef,
    chunked: z3.BoolRef,
    cap: z3.ArithRef,
    quiet: z3.BoolRef,
    allowed: z3.BoolRef,
) -> tuple[AdmitScan, z3.BoolRef, z3.ArithRef]:
    """One request in arrival order: admitted or not, and the tokens it would run.

    ``total`` is its prompt plus generated tokens (all recomputed on admission),
    ``need`` the blocks that takes; ``allowed`` is the hook a broken variant
    uses to bar admissions.
    """
    fits = z3.And(
        acc.slots > 0, acc.budget > 0, need <= acc.spare, z3.Or(chunked, total <= acc.budget)
    )
    is_head = z3.And(waiting, z3.Not(acc.seen_waiting))
    ok = z3.And(waiting, z3.Not(acc.stopped), fits, allowed)
    n = z3.If(chunked, _min3(total, cap, acc.budget), total)
    nxt = AdmitScan(
        slots=z3.If(ok, acc.slots - 1, acc.slots),
        budget=z3.If(ok, acc.budget - n, acc.budget),
        spare=z3.If(ok, acc.spare - need, acc.spare),
        planned=z3.If(ok, acc.planned + n, acc.planned),
        stopped=z3.Or(acc.stopped, z3.And(waiting, z3.Not(fits))),
        seen_waiting=z3.Or(acc.seen_waiting, waiting),
        head_fits=z3.Or(acc.head_fits, z3.And(is_head, fits, quiet)),
        head_admit=z3.Or(acc.head_admit, z3.And(is_head, ok)),
    )
    return nxt, ok, n


_INTS = ("slots", "budget", "spare", "planned")
_BOOLS = ("stopped", "seen_waiting", "head_fits", "head_admit")


class AdmissionScan(Machine):
    """The admission fold as a machine: one transition per request in the queue.

    Parameters are what the pass brings to step 3 (free slots, budget and
    blocks, the partial chunks' tokens, whether it is quiet, chunking and the
    chunk cap), each any value; the observation is the next request: waiting
    or not, its prompt ``P`` and generated tokens ``g`` (``P >= 1``, ``g >= 0``,
    as for every request of the scheduler), and the blocks it needs (any).
    ``allowed`` is the scheduler's admission hook, so a broken scheduler's
    scan is broken the same way.
    """

    def __init__(self, allowed: Callable[[z3.ArithRef], z3.BoolRef], name: str) -> None:
        self.allowed = allowed
        self.name = f"admission scan[{name}]"
        self.param_sorts = {k: z3.Int for k in ("slots0", "budget0", "spare0", "run0", "cap")}
        self.param_sorts.update({"quiet": z3.Bool, "chunked": z3.Bool})
        self.state_sorts = {k: z3.Int for k in _INTS}
        self.state_sorts.update({k: z3.Bool for k in _BOOLS})
        self.obs_sorts = {"waiting": z3.Bool, "P": z3.Int, "g": z3.Int, "need": z3.Int}
        self.out_sorts = {"admit": z3.Bool, "tokens": z3.Int}

    def param_ok(self, p: Vars) -> z3.BoolRef:
        return z3.And(p["cap"] >= 1, p["run0"] >= 0)

    def init(self, p: Vars, s: Vars) -> z3.BoolRef:
        start = admit_start(p["slots0"], p["budget0"], p["spare0"], p["run0"], p["quiet"])
        return z3.And(*[s[k] == getattr(start, k) for k in (*_INTS, *_BOOLS)])

    def obs_ok(self, p: Vars, s: Vars, o: Vars) -> z3.BoolRef:
        return z3.And(o["P"] >= 1, o["g"] >= 0)

    def commands(self, p: Vars, s: Vars, o: Vars) -> Sequence[Command]:
        acc = AdmitScan(**{k: s[k] for k in (*_INTS, *_BOOLS)})
        nxt, ok, n = admit_step(
            acc,
            waiting=o["waiting"],
            total=o["P"] + o["g"],
            need=o["need"],
            chunked=p["chunked"],
            cap=p["cap"],
            quiet=p["quiet"],
            allowed=self.allowed(p["run0"]),
        )
        return [
            Command(
                "SCAN",
                z3.BoolVal(True),
                {"admit": ok, "tokens": z3.If(ok, n, 0)},
                {k: getattr(nxt, k) for k in (*_INTS, *_BOOLS)},
            )
        ]

    def display_row(self, row: dict[str, Any]) -> dict[str, Any]:
        """One request per row: what it is, then the totals before and after it."""
        out: dict[str, Any] = {"request": row["pass"]}
        out.update({k: row.get(k) for k in ("waiting", "P", "g", "need", "admit", "tokens")})
        out.update({k: row.get(k) for k in (*_INTS, *_BOOLS)})
        if "next_planned" in row:
            out["after"] = " ".join(f"{k}={row[f'next_{k}']}" for k in (*_INTS, *_BOOLS))
        return out
