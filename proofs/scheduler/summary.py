"""S3-S5 on the scheduler summary, for any number of requests given the pass facts.

``SchedulerSummary`` has no request slots, so S3, S4 and S5 hold of it for every
number of requests, given the pass facts. S14 proves them of every pass of the
per-slot machine the implementation is compared against, whatever its number of
requests (S7's and S9's scans read over its folds), and S8 checks them again at 3
slots.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import z3

from densegate.proofs.common import named_mutant
from densegate.proofs.gate_obligations import GATE_MUTANTS
from densegate.proofs.obligation import Monitor, Mutant, Obligation, Prop, Step
from densegate.proofs.scheduler.life import LIFE_BLOCK_SIZE
from densegate.proofs.scheduler.scopes import slot_free_scope
from densegate.spec.gate import reason
from densegate.spec.machine import Vars
from densegate.spec.scheduler import SchedulerMachine
from densegate.spec.scheduler_summary import SchedulerSummary, chunk_room

__all__ = ["SUMMARY", "SUMMARY_OBLIGATIONS", "chunks_never_negative"]

SUMMARY = SchedulerSummary()


class _DenseFromQueue(SchedulerSummary):
    """Flaw 3 on the summary: the gate's w also counts queued tokens no pass could run."""

    def __init__(self) -> None:
        super().__init__()
        self.obs_sorts = {**self.obs_sorts, "queued": z3.Int}

    def obs_ok(self, p: Vars, s: Vars, o: Vars) -> z3.BoolRef:
        return z3.And(super().obs_ok(p, s, o), o["queued"] >= 0)

    def observe(self, p: Vars, o: Vars) -> tuple[z3.ArithRef, z3.ArithRef]:
        total = o["planned"] + o["queued"]
        return z3.If(total < p["B"], total, p["B"]), o["d"]


def _summary_mutants() -> dict[str, Mutant]:
    out = {
        "dense_from_queue": named_mutant(
            "summary", "dense_from_queue", "gate's w counts the whole queue", _DenseFromQueue()
        )
    }
    for name in ("budget_off_by_one", "hold_not_counted"):
        broken = GATE_MUTANTS[name]
        over_broken = SchedulerSummary(gate=broken.machine)  # type: ignore[arg-type]
        description = f"the summary over a broken gate: {broken.description}"
        out[f"gate_{name}"] = named_mutant("summary", f"gate_{name}", description, over_broken)
    return out


def _summary_inv(p: Vars, s: Vars) -> z3.BoolRef:
    ages = [z3.And(s[m] >= 0, s[m] <= s["h"]) for m in ("hage", "page")]
    return z3.And(s["h"] >= 0, s["h"] < p["K"], *ages)


def _head_update(st: Step) -> z3.ArithRef:
    waits = z3.And(st.o["head_fits"], z3.Not(z3.And(st.out["fire"], st.o["head_admit"])))
    return z3.If(waits, st.s["hage"] + 1, 0)


# hage: passes in a row the head of the queue fitted but was not admitted.
_HEAD_AGE = Monitor("hage", z3.Int, lambda p: z3.IntVal(0), _head_update)


def _pending_update(st: Step) -> z3.ArithRef:
    pending = z3.Or(st.o["work"] > 0, st.o["head_fits"])
    return z3.If(z3.And(pending, z3.Not(st.out["fire"])), st.s["page"] + 1, 0)


# page: passes in a row prefill work was pending (a chunk owed, or a head that
# fits) and the gate did not fire.
_PENDING_AGE = Monitor("page", z3.Int, lambda p: z3.IntVal(0), _pending_update)
_MONITORS = [_HEAD_AGE, _PENDING_AGE]


def _progress(st: Step) -> z3.BoolRef:
    owed, run = st.o["work"], st.o["run"]
    least = z3.If(owed < chunk_room(st.p), owed, chunk_room(st.p))
    return z3.And(st.s2["page"] < st.p["K"], z3.Implies(st.out["fire"], run >= least))


def _dense_sound(st: Step) -> z3.BoolRef:
    dense = st.out["reason"] == reason("DENSE")
    return z3.Implies(dense, st.out["prefill_tokens"] >= st.p["B"])


def _head_admitted(st: Step) -> z3.BoolRef:
    return st.s2["hage"] < st.p["K"]


def _fitting_head_held(st: Step) -> z3.BoolRef:
    return z3.And(st.o["head_fits"], z3.Not(st.out["fire"]))


def _small(p: Vars) -> z3.BoolRef:
    return z3.And(p["B"] <= 4, p["K"] <= 3, p["T"] <= 6, p["cap"] <= 4)


def chunks_never_negative(machine: SchedulerMachine) -> z3.BoolRef:
    """Lemma: a partial chunk is never negative, so neither is a pass's plan."""
    left, cap, budget = z3.Ints("left cap budget")
    n = machine.partial_chunk(left, cap, budget)
    return z3.Implies(z3.And(left >= 0, cap >= 1), n >= 0)


Lemma = Callable[[], z3.BoolRef]

_SUMMARY_SCOPE = slot_free_scope("scheduler summary", "pass_facts", LIFE_BLOCK_SIZE)
"""Exactly what S3-S5 cover as claims about the scheduler (not only the summary)."""


def _budget_limited_fire(st: Step) -> z3.BoolRef:
    return z3.And(st.out["fire"], st.o["work"] > st.o["run"])


def _on_summary(id: str, statement: str, prop: Prop, mutant: Mutant, lemma: Lemma,
                **kw: Any) -> Obligation:  # fmt: skip
    """S3-S5 share the summary, its invariant, both monitors, the scope and the lemma."""
    return Obligation(
        id=id,
        level="scheduler",
        statement=statement,
        machine=SUMMARY,
        prop=prop,
        invariant=_summary_inv,
        mutants=[mutant],
        monitors=_MONITORS,
        readable=_small,
        scope=_SUMMARY_SCOPE,
        parametric=True,
        lemmas=[lemma],
        **kw,
    )


def _lemma() -> z3.BoolRef:
    # the real scheduler's hook (it reads neither the slot count nor the block size)
    return chunks_never_negative(SchedulerMachine(1, 1))


def _summary_obligations() -> list[Obligation]:
    broken = _summary_mutants()
    return [
        _on_summary(
            "S3",
            "density soundness: a DENSE fire runs >= dense_tokens prefill tokens (the gate "
            "sees min(planned, B) and a fire runs the plan; the summary, any number of "
            f"requests given its pass facts, which S14 proves of the per-slot pass's folds; block "
            f"size {LIFE_BLOCK_SIZE})",
            _dense_sound,
            broken["dense_from_queue"],
            _lemma,
        ),
        _on_summary(
            "S4",
            "fitting head admitted: a head of the queue that fits in K consecutive passes is "
            "admitted by the last of them (the count restarts when it stops fitting; S6 bounds "
            "the whole wait; the summary, any number of requests given its pass facts, which "
            "S14 proves of the per-slot pass's folds with S7's scan; block size "
            f"{LIFE_BLOCK_SIZE})",
            _head_admitted,
            broken["gate_budget_off_by_one"],
            _lemma,
            triggers=[_fitting_head_held],
            trigger_names=["a head of the queue that fits is held"],
        ),
        _on_summary(
            "S5",
            "prefill progress: pending prefill runs within K passes (the gate's hold bound), "
            "and a fire runs >= min(owed, cap, T-S+1) owed chunk tokens (S9's bound, carried as "
            "a pass fact; the summary, any number of requests given its pass facts, which S14 "
            f"proves of the per-slot pass's folds; block size {LIFE_BLOCK_SIZE})",
            _progress,
            broken["gate_hold_not_counted"],
            _lemma,
            triggers=[_budget_limited_fire],
            trigger_names=["a fire runs less than the prefill owed"],
        ),
    ]


SUMMARY_OBLIGATIONS: list[Obligation] = _summary_obligations()
