"""Scheduler obligations for any number of requests: S3, S4 on the summary, S7 and S8.

S3 and S4 are proved of ``SchedulerSummary``, which has no request slots, so
they hold for every queue length and block size, given the pass facts. S7
proves the pass facts' admission half by induction over the queue (the
``AdmissionScan`` machine is the very fold ``SchedulerMachine`` builds its
step 3 from); the other half (nothing planned is negative) is a lemma about
the partial-chunk hook. S8 checks the glue on the per-slot machine the
implementation is compared against: each of its passes is a summary step.
"""

from __future__ import annotations

import z3

from densegate.proofs.common import named_mutant
from densegate.proofs.gate_mutants import GATE_MUTANTS
from densegate.proofs.prover import Monitor, Mutant, Obligation, Step
from densegate.spec.gate import reason
from densegate.spec.machine import Vars
from densegate.spec.scheduler import SchedulerMachine
from densegate.spec.scheduler_scan import AdmissionScan
from densegate.spec.scheduler_summary import SchedulerSummary

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
    broken = GATE_MUTANTS["budget_off_by_one"]
    over_broken = SchedulerSummary(gate=broken.machine)  # type: ignore[arg-type]
    return {
        "dense_from_queue": named_mutant(
            "summary", "dense_from_queue", "gate's w counts the whole queue", _DenseFromQueue()
        ),
        "gate_budget_off_by_one": named_mutant(
            "summary",
            "gate_budget_off_by_one",
            f"the summary over a broken gate: {broken.description}",
            over_broken,
        ),
    }


def _summary_inv(p: Vars, s: Vars) -> z3.BoolRef:
    return z3.And(s["h"] >= 0, s["h"] < p["K"], s["hage"] >= 0, s["hage"] <= s["h"])


def _head_update(st: Step) -> z3.ArithRef:
    waits = z3.And(st.o["head_fits"], z3.Not(z3.And(st.out["fire"], st.o["head_admit"])))
    return z3.If(waits, st.s["hage"] + 1, 0)


# hage: passes in a row the head of the queue fitted but was not admitted.
_HEAD_AGE = Monitor("hage", z3.Int, lambda p: z3.IntVal(0), _head_update)


def _dense_sound(st: Step) -> z3.BoolRef:
    dense = st.out["reason"] == reason("DENSE")
    return z3.Implies(dense, st.out["prefill_tokens"] >= st.p["B"])


def _head_admitted(st: Step) -> z3.BoolRef:
    return st.s2["hage"] < st.p["K"]


def _fitting_head_held(st: Step) -> z3.BoolRef:
    return z3.And(st.o["head_fits"], z3.Not(st.out["fire"]))


def _small(p: Vars) -> z3.BoolRef:
    return z3.And(p["B"] <= 4, p["K"] <= 3)


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
    return z3.And(
        s["planned"] >= p["run0"],
        z3.Implies(fresh, z3.And(s["stopped"] == z3.Not(p["quiet"]), z3.Not(s["head_fits"]))),
        z3.Implies(fresh, z3.Not(s["head_admit"])),
        z3.Implies(s["head_fits"], z3.And(s["head_admit"], s["planned"] > 0)),
    )


def _scan_prop(st: Step) -> z3.BoolRef:
    s2 = st.s2
    return z3.And(
        s2["planned"] >= 0,
        z3.Implies(s2["head_fits"], z3.And(s2["head_admit"], s2["planned"] > 0)),
    )


def _scan_head_fits(st: Step) -> z3.BoolRef:
    return st.s2["head_fits"]


def _scan_small(p: Vars) -> z3.BoolRef:
    return z3.And(*[z3.And(p[k] >= -1, p[k] <= 4) for k in ("slots0", "budget0", "spare0")])


_SCAN = _scan_of(SchedulerMachine(1, 1))


def _scan_mutant(m: Mutant) -> Mutant:
    return named_mutant("admission scan", m.name, m.description, _scan_of(m.machine))  # type: ignore[arg-type]


def summary_obligations(per_slot: SchedulerMachine, mutants: dict[str, Mutant]) -> list[Obligation]:
    """S3, S4 (on the summary) and S7 (the admission scan); ``mutants`` are the
    per-slot scheduler's, whose broken admission hook S7 must refute."""
    summary_mutants = _summary_mutants()
    lemma = [lambda: chunks_never_negative(per_slot)]
    return [
        Obligation(
            id="S3",
            level="scheduler",
            statement="density soundness: a DENSE fire runs >= dense_tokens prefill tokens "
            "(any number of requests and block size)",
            machine=SUMMARY,
            prop=_dense_sound,
            invariant=_summary_inv,
            mutants=[summary_mutants["dense_from_queue"]],
            monitors=[_HEAD_AGE],
            readable=_small,
            lemmas=lemma,
        ),
        Obligation(
            id="S4",
            level="scheduler",
            statement="fitting head admitted: a head of the queue that fits in K consecutive "
            "passes is admitted by the last of them (the count restarts when it stops fitting; "
            "S6 bounds the whole wait; any number of requests and block size, by S7)",
            machine=SUMMARY,
            prop=_head_admitted,
            invariant=_summary_inv,
            mutants=[summary_mutants["gate_budget_off_by_one"]],
            monitors=[_HEAD_AGE],
            readable=_small,
            lemmas=lemma,
            triggers=[_fitting_head_held],
            trigger_names=["a head of the queue that fits is held"],
        ),
        Obligation(
            id="S7",
            level="scheduler",
            statement="admission scan: for a queue of any length, the head that fits is admitted "
            "if the gate fires and gives the pass >= 1 prefill token; the plan never shrinks "
            "below the partial chunks (by induction over the queue, one request per step)",
            machine=_SCAN,
            prop=_scan_prop,
            invariant=_scan_inv,
            mutants=[_scan_mutant(mutants["serialized_chunks"])],
            readable=_scan_small,
            triggers=[_scan_head_fits],
            trigger_names=["the head of the queue fits"],
        ),
    ]
