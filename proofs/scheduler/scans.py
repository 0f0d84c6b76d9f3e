"""S7 and S9: the admission and partial-chunk scans, for a queue of any length.

``AdmissionScan`` and ``PartialScan`` step through the very folds
``SchedulerMachine`` builds its steps 3 and 2 from, one request per step, so
what they prove (the pass facts S3-S5 take as given) holds for any number of
requests. The broken schedulers here change the hook each fold reads
(``SCAN_HOOKS``); S8 refutes them too, on the per-slot machine.
"""

from __future__ import annotations

from collections.abc import Callable

import z3

from densegate.proofs.common import named_mutant
from densegate.proofs.obligation import Monitor, Mutant, Obligation, Step
from densegate.spec.machine import Vars
from densegate.spec.scheduler import SchedulerMachine
from densegate.spec.scheduler_scan import AdmissionScan, PartialScan
from densegate.spec.scheduler_summary import chunk_room

__all__ = ["SCAN_HOOKS", "SCAN_OBLIGATIONS"]


class _PartialWaitsForFullChunk(SchedulerMachine):
    """A partial prefill runs only when its whole next chunk fits the budget."""

    def partial_chunk(
        self, left: z3.ArithRef, cap: z3.ArithRef, budget: z3.ArithRef
    ) -> z3.ArithRef:
        want = z3.If(left < cap, left, cap)
        return z3.If(z3.And(left > 0, want <= budget), want, 0)


class _SerializedChunks(SchedulerMachine):
    """New requests wait while any chunked prefill is in flight."""

    def admission_allowed(self, partial_run: z3.ArithRef) -> z3.BoolRef:
        return partial_run == 0


SCAN_HOOKS: dict[str, tuple[type[SchedulerMachine], str]] = {
    "partial_waits_for_full_chunk": (
        _PartialWaitsForFullChunk,
        "a partial prefill waits until its whole next chunk fits",
    ),
    "serialized_chunks": (_SerializedChunks, "no admission while a chunked prefill is in flight"),
}
"""Broken schedulers (name -> class, description) whose folds the scans must refute."""


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


def _partial_mutant(name: str) -> Mutant:
    cls, description = SCAN_HOOKS[name]
    return named_mutant("partial scan", name, description, _partial_of(cls(1, 1)))


def _partial_small(p: Vars) -> z3.BoolRef:
    return z3.And(p["T"] <= 6, p["cap"] <= 6)


def _scan_mutant(name: str) -> Mutant:
    cls, description = SCAN_HOOKS[name]
    return named_mutant("admission scan", name, description, _scan_of(cls(1, 1)))


SCAN_OBLIGATIONS: list[Obligation] = [
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
        mutants=[_scan_mutant("serialized_chunks")],
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
        mutants=[_partial_mutant("partial_waits_for_full_chunk")],
        readable=_partial_small,
        triggers=[_partial_owed],
        trigger_names=["a running request owes prefill"],
    ),
]
