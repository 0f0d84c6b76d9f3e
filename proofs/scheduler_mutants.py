"""Broken schedulers: each changes one hook of the spec machine and must be refuted."""

from __future__ import annotations

import z3

from densegate.proofs.common import named_mutant
from densegate.proofs.gate_mutants import GATE_MUTANTS
from densegate.proofs.prover import Mutant
from densegate.spec.machine import Vars
from densegate.spec.scheduler import RUNNING, WAITING, PassPlan, SchedulerMachine

__all__ = ["scheduler_mutants"]


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


class _PreemptionLeaks(SchedulerMachine):
    def preempt_frees(self, held: z3.ArithRef) -> z3.ArithRef:
        return held - 1


class _PromptOnlyReservation(SchedulerMachine):
    """An admission reserves blocks for the prompt only, not the tokens it recomputes."""

    def reserved_tokens(self, prompt: z3.ArithRef, generated: z3.ArithRef) -> z3.ArithRef:
        return prompt


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


_CATALOG = {
    "tail_escape_on_running": (
        _TailEscapeOnRunning,
        "gate's d counts running requests, not decoding ones (flaw 2)",
    ),
    "dense_from_queue": (_DenseFromQueue, "gate's w counts the whole queue (flaw 3)"),
    "preemption_leaks": (_PreemptionLeaks, "a preemption returns one block too few"),
    "prompt_only_reservation": (
        _PromptOnlyReservation,
        "an admission reserves blocks for the prompt only, not prompt + generated",
    ),
    "partial_waits_for_full_chunk": (
        _PartialWaitsForFullChunk,
        "a partial prefill waits until its whole next chunk fits",
    ),
    "serialized_chunks": (
        _SerializedChunks,
        "no admission while a chunked prefill is in flight",
    ),
}


_BROKEN_GATES = {
    "gate_budget_off_by_one": "budget_off_by_one",
    "gate_hold_not_counted": "hold_not_counted",
}


def scheduler_mutants(slots: int, block_size: int) -> dict[str, Mutant]:
    """One machine per broken hook, plus the real scheduler over broken gates."""
    out = {}
    for name, (cls, description) in _CATALOG.items():
        out[name] = named_mutant("scheduler", name, description, cls(slots, block_size))
    for name, gate_name in _BROKEN_GATES.items():
        broken = GATE_MUTANTS[gate_name]
        machine = SchedulerMachine(slots, block_size, gate=broken.machine)  # type: ignore[arg-type]
        description = f"the scheduler over a broken gate: {broken.description}"
        out[name] = named_mutant("scheduler", name, description, machine)
    return out
