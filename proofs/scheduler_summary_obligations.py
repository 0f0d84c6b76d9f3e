"""Scheduler obligations for any number of requests: S3-S5 on the summary, S7 and S9.

S3, S4 and S5 are proved of ``SchedulerSummary``, which has no request slots,
so they hold for every number of requests and block size, given the pass facts
and the per-request facts the scans take as given (``_SUMMARY_SCOPE``). S7 and
S9 prove the pass facts by induction over the requests: the ``AdmissionScan``
and ``PartialScan`` machines step through the very folds ``SchedulerMachine``
builds its steps 3 and 2 from. S8 (in
``scheduler_obligations``) checks the glue on the per-slot machine the
implementation is compared against: each of its passes is a summary step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import z3

from densegate.proofs.common import named_mutant
from densegate.proofs.gate_mutants import GATE_MUTANTS
from densegate.proofs.prover import Monitor, Mutant, Obligation, Prop, Step
from densegate.spec.gate import reason
from densegate.spec.machine import Vars
from densegate.spec.scheduler import SchedulerMachine
from densegate.spec.scheduler_scan import AdmissionScan, PartialScan
from densegate.spec.scheduler_summary import SchedulerSummary, chunk_room

__all__ = ["SUMMARY", "chunks_never_negative", "summary_obligations"]

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


# -- S7: the admission scan --------------------------------------------------------------


def _scan_of(m: SchedulerMachine) -> AdmissionScan:
    return AdmissionScan(m.admission_allowed, m.name)


def _scan_inv(p: Vars, s: Vars) -> z3.BoolRef:
    fresh = z3.Not(s["seen_waiting"])
    start = z3.And(*[s[k] == p[f"{k}0"] for k in ("slots", "budget", "spare")])
    return z3.And(
        s["planned"] >= p["run0"],
        z3.Implies(p["slots0"] >= 0, s["slots"] >= 0),
        z3.Implies(p["spare0"] >= 0, s["spare"] >= 0),
        z3.Implies(z3.Or(fresh, z3.Not(p["quiet"])), start),
        z3.Implies(z3.Not(p["quiet"]), s["stopped"]),
        z3.Implies(fresh, z3.And(s["stopped"] == z3.Not(p["quiet"]), z3.Not(s["head_fits"]))),
        z3.Implies(fresh, z3.And(z3.Not(s["head_admit"]), s["planned"] == p["run0"])),
        z3.Implies(s["head_fits"], z3.And(s["head_admit"], s["planned"] > 0)),
        _head_blocks(p, s),
        z3.Implies(z3.And(s["seen_waiting"], z3.Not(s["head_fits"])), s["stopped"]),
        z3.Implies(z3.And(s["seen_waiting"], _roomy(p, s)), s["head_fits"]),
    )


def _roomy(p: Vars, s: Vars) -> z3.BoolRef:
    """A quiet pass whose start has room for the head (monitors ``hneed``, ``htotal``)."""
    room = z3.And(p["slots0"] >= 1, p["budget0"] >= 1, s["hneed"] <= p["spare0"])
    return z3.And(p["quiet"], room, z3.Or(p["chunked"], s["htotal"] <= p["budget0"]))


def _scan_prop(st: Step) -> z3.BoolRef:
    s2, p = st.s2, st.p
    return z3.And(
        s2["planned"] >= p["run0"],
        z3.Implies(p["slots0"] >= 0, s2["slots"] >= 0),
        z3.Implies(p["spare0"] >= 0, s2["spare"] >= 0),
        z3.Implies(z3.Not(p["quiet"]), z3.And(*[s2[k] == p[f"{k}0"] for k in ("slots", "spare")])),
        z3.Implies(s2["head_fits"], z3.And(s2["head_admit"], s2["planned"] > 0)),
        z3.Implies(z3.And(s2["seen_waiting"], _roomy(p, s2)), s2["head_fits"]),
        _head_blocks(p, s2),
    )


def _head_blocks(p: Vars, s: Vars) -> z3.BoolRef:
    """A head that does not fit is not admitted and nothing behind it is (FCFS)."""
    blocked = z3.And(s["seen_waiting"], z3.Not(s["head_fits"]))
    return z3.Implies(blocked, z3.And(z3.Not(s["head_admit"]), s["planned"] == p["run0"]))


def _head_value(name: str, value: Callable[[Step], z3.ArithRef]) -> Monitor:
    """The head of the queue's ``value``, kept from the step that meets it."""

    def update(st: Step) -> z3.ExprRef:
        is_head = z3.And(st.o["waiting"], z3.Not(st.s["seen_waiting"]))
        return z3.If(is_head, value(st), st.s[name])

    return Monitor(name, z3.Int, lambda p: z3.IntVal(0), update)


_HEAD_MONITORS = [
    _head_value("hneed", lambda st: st.o["need"]),
    _head_value("htotal", lambda st: st.o["P"] + st.o["g"]),
]


def _scan_head_fits(st: Step) -> z3.BoolRef:
    return st.s2["head_fits"]


def _scan_small(p: Vars) -> z3.BoolRef:
    return z3.And(*[z3.And(p[k] >= -1, p[k] <= 4) for k in ("slots0", "budget0", "spare0")])


_SCAN = _scan_of(SchedulerMachine(1, 1))


# -- S9: the partial-chunk scan ----------------------------------------------------------


def _partial_least(p: Vars, s: Vars) -> z3.ArithRef:
    return z3.If(s["work"] < chunk_room(p), s["work"], chunk_room(p))


def _partial_inv(p: Vars, s: Vars) -> z3.BoolRef:
    return z3.And(
        s["budget"] == p["T"] - p["d"] - s["run"],
        s["run"] >= 0,
        s["run"] <= s["work"],
        s["run"] >= _partial_least(p, s),
        s["seen"] >= 0,
        p["d"] + s["seen"] <= p["S"],
    )


def _partial_prop(st: Step) -> z3.BoolRef:
    return z3.And(st.s2["run"] >= 0, st.s2["run"] >= _partial_least(st.p, st.s2))


def _partial_owed(st: Step) -> z3.BoolRef:
    return st.o["left"] > 0


def _partial_of(m: SchedulerMachine) -> PartialScan:
    return PartialScan(m.partial_chunk, m.name)


_PARTIAL = _partial_of(SchedulerMachine(1, 1))


def _partial_mutant(m: Mutant) -> Mutant:
    return named_mutant("partial scan", m.name, m.description, _partial_of(m.machine))  # type: ignore[arg-type]


def _partial_small(p: Vars) -> z3.BoolRef:
    return z3.And(p["T"] <= 6, p["cap"] <= 6)


def _scan_mutant(m: Mutant) -> Mutant:
    return named_mutant("admission scan", m.name, m.description, _scan_of(m.machine))  # type: ignore[arg-type]


Lemma = Callable[[], z3.BoolRef]

_SUMMARY_SCOPE = (
    "any number of requests, block size 2: the summary has no slots; its pass facts are "
    "S7's and S9's scans (any number), which take generated >= 0 and computed <= prompt + "
    "generated from S10 and running <= S from S2 (any number of requests, block size 2)"
)
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
        lemmas=[lemma],
        **kw,
    )


def summary_obligations(per_slot: SchedulerMachine, mutants: dict[str, Mutant]) -> list[Obligation]:
    """S3-S5 (on the summary), S7 and S9 (the scans); ``mutants`` are the per-slot
    scheduler's, whose broken admission and chunk hooks the scans must refute."""
    broken = _summary_mutants()

    def lemma() -> z3.BoolRef:
        return chunks_never_negative(per_slot)

    return [
        _on_summary(
            "S3",
            "density soundness: a DENSE fire runs >= dense_tokens prefill tokens (the gate "
            "sees min(planned, B) and a fire runs the plan; any number of requests and block "
            "size)",
            _dense_sound,
            broken["dense_from_queue"],
            lemma,
        ),
        _on_summary(
            "S4",
            "fitting head admitted: a head of the queue that fits in K consecutive passes is "
            "admitted by the last of them (the count restarts when it stops fitting; S6 bounds "
            "the whole wait; any number of requests and block size, by S7)",
            _head_admitted,
            broken["gate_budget_off_by_one"],
            lemma,
            triggers=[_fitting_head_held],
            trigger_names=["a head of the queue that fits is held"],
        ),
        _on_summary(
            "S5",
            "prefill progress: pending prefill runs within K passes (the gate's hold bound), "
            "and a fire runs >= min(owed, cap, T-S+1) owed chunk tokens (S9's bound, carried as "
            "a pass fact; any number of requests and block size)",
            _progress,
            broken["gate_hold_not_counted"],
            lemma,
            triggers=[_budget_limited_fire],
            trigger_names=["a fire runs less than the prefill owed"],
        ),
        Obligation(
            id="S7",
            level="scheduler",
            statement="admission scan: for a queue of any length, the head that fits is admitted "
            "if the gate fires and gives the pass >= 1 prefill token, and fits a quiet pass "
            "that starts with a free slot, budget and the blocks it needs; a head that does "
            "not fit stops admission (nothing is admitted, FCFS); the plan never "
            "shrinks below the partial chunks, admits no more requests than free sequence "
            "slots, reserves no more blocks than are free, and admits nothing after a "
            "preemption (by induction over the queue, one request per step)",
            machine=_SCAN,
            monitors=_HEAD_MONITORS,
            prop=_scan_prop,
            invariant=_scan_inv,
            mutants=[_scan_mutant(mutants["serialized_chunks"])],
            readable=_scan_small,
            triggers=[_scan_head_fits],
            trigger_names=["the head of the queue fits"],
        ),
        Obligation(
            id="S9",
            level="scheduler",
            statement="partial-chunk scan: over any number of running requests, the pass "
            "would run >= min(owed, cap, T-S+1) of the prefill they owe (by induction over "
            "the requests, one per step; assumes running requests never exceed S)",
            machine=_PARTIAL,
            prop=_partial_prop,
            invariant=_partial_inv,
            mutants=[_partial_mutant(mutants["partial_waits_for_full_chunk"])],
            readable=_partial_small,
            triggers=[_partial_owed],
            trigger_names=["a running request owes prefill"],
        ),
    ]
