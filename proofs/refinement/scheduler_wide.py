"""R4: the shipped Scheduler runs as the spec scheduler on fixed traces at 8 and 12 requests.

A bounded check, not a proof: R3 explores every path of one pass, but at 2 requests
and block size 2, and the lockstep draws at most 12 slots in CI; a bug that bites
only with more than 6 requests at once, or at a block size that is not a power of
two, passes both at their old sizes (three such were planted and passed). R4 runs the
traces of ``scheduler_traces`` (per size: two enumerated bursts that admit, then
preempt, more than 6 requests at once, and a seeded one) on the shipped Scheduler
beside ``SchedulerMachine(12, block size)``, every output and the whole next state
compared each pass, and refutes its broken variants (those three edits) on the
same traces. It says nothing of other traces, sizes or parameters: its bound says
which it ran, and it is reported ``parametric: false``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from densegate.impl.sched.block_manager import BlockManager
from densegate.impl.sched.config import SchedulerConfig
from densegate.impl.sched.scheduler import Scheduler
from densegate.proofs.refinement.mutate import CodeMutant
from densegate.proofs.refinement.obligations import code_verdict
from densegate.proofs.refinement.scheduler_traces import (
    BLOCK_SIZES,
    CONTRACT,
    MAX_PASSES,
    REQUESTS,
    SEEDED,
    SLOT_KEYS,
    SLOTS,
    WIDE,
    Make,
    Recorded,
    WideTrace,
    first_difference,
    lockstep,
    traces,
)
from densegate.proofs.refinement.spec_program import Stepper
from densegate.proofs.results import (
    CheckResult,
    Coverage,
    MutantResult,
    ObligationResult,
    Trace,
    scope_statement,
)
from densegate.spec.scheduler import FINISHED, RUNNING, WAITING, SchedulerMachine

__all__ = ["R4_MUTANTS", "STATEMENT", "WIDE_OBLIGATIONS", "TraceRefinement", "scheduler_of"]

_SIZES = ", ".join(map(str, BLOCK_SIZES))
STATEMENT = (
    f"code agrees with model on fixed traces, at {' and '.join(map(str, REQUESTS))} requests "
    f"and block sizes {_SIZES}: run pass by pass (aborts, arrivals, plan, gate, commit, "
    "update) beside the spec scheduler, the shipped Scheduler takes the spec's decision and "
    "reason, shows the gate its observation (w, d), prefills, decodes, preempts and admits "
    "as it does, keeps its running list and queue in arrival order and every KV block free "
    "or held once, and leaves every request's status, computed tokens, outputs and blocks, "
    "the gate's counter and the free blocks as the spec's next state, on each of R4's traces"
)
"""R4's statement (the property table, ``densegate.spec.properties``, holds R1-R3's)."""


def scheduler_of(m: CodeMutant) -> Make:
    """The Scheduler a broken variant makes: the mutant class itself, or, for a broken
    ``BlockManager``, the shipped Scheduler handed that block manager."""
    broken = m.build
    if issubclass(broken, Scheduler):
        return broken
    if not issubclass(broken, BlockManager):
        raise TypeError(f"mutant {m.name}: neither a Scheduler nor a BlockManager")

    def make(config: SchedulerConfig) -> Scheduler:
        sched = Scheduler(config)
        sched.blocks = broken(config.num_blocks, config.block_size)
        return sched

    return make


_SHIFT = "(num_tokens + self.block_size - 1) >> (self.block_size.bit_length() - 1)"
R4_MUTANTS: tuple[CodeMutant, ...] = (
    CodeMutant("victim_sixth_when_wide",
               "with more than 6 running, KV exhaustion preempts running[5], not the newest",
               Scheduler, "_walk_turn", "victim = running[-1]",
               "victim = running[5] if len(running) > 6 else running[-1]"),
    CodeMutant("admission_scans_six", "admission scans only the first 6 waiting requests",
               Scheduler, "_plan_prefill", "scan(self._admit_step, begin, self.waiting)",
               "scan(self._admit_step, begin, list(self.waiting)[:6])"),
    CodeMutant("blocks_by_shift",
               "blocks counted by a shift, (tokens + size - 1) >> log2(size): right only at "
               "powers of two", BlockManager, "blocks_for",
               "return -(-num_tokens // self.block_size)", f"return {_SHIFT}"),
)  # fmt: skip
"""The broken variants R4 must refute: each passes R3 and the 6-slot lockstep at block sizes
1, 2, 4 (``tests/support/planted_sched.py`` plants the same edits in the suite)."""


def _running(row: Mapping[str, Any]) -> int:
    """Requests running when the pass's decodes start (after its aborts)."""
    return sum(row[f"st{i}"] == RUNNING and not row[f"abort{i}"] for i in range(SLOTS))


def _admitted(row: Mapping[str, Any]) -> int:
    """Requests the pass took from the queue (running, or finished at once, after it)."""
    return sum(
        (row[f"st{i}"] == WAITING or row[f"arrive{i}"])
        and not row[f"abort{i}"]
        and row[f"next_st{i}"] in (RUNNING, FINISHED)
        for i in range(SLOTS)
    )


Config = Callable[[Mapping[str, Any]], bool]
Event = Callable[[Mapping[str, Any]], bool]
R4_CLASSES: dict[str, tuple[Config, Event]] = {
    "chunked prefill": (lambda p: p["chunked"], lambda row: True),
    "unchunked prefill": (lambda p: not p["chunked"], lambda row: True),
    "gate on": (lambda p: p["enabled"], lambda row: True),
    "gate off": (lambda p: not p["enabled"], lambda row: True),
    f"a preemption with > {WIDE} running": (
        lambda p: p["S"] > WIDE,
        lambda row: row["preempted"] > 0 and _running(row) > WIDE,
    ),
    f"> {WIDE} admitted in one pass": (lambda p: p["S"] > WIDE, lambda r: _admitted(r) > WIDE),
}
"""What every size's traces must reach, on a pass that agreed with the spec: a trace whose
configuration is in the class (``satisfiable``) and a pass of it where the event occurs."""


def _shown(rec: Recorded, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows without the slots no request of the trace uses (they never arrive)."""
    unused = {f"{k}{i}" for k in (*SLOT_KEYS, "arrive", "abort") for i in range(SLOTS)}
    unused -= {
        f"{k}{i}" for k in (*SLOT_KEYS, "arrive", "abort") for i in range(rec.trace.requests)
    }
    unused.update(CONTRACT)  # shown only where they differ (``code``, ``spec``)
    return [{k: v for k, v in row.items() if k.removeprefix("next_") not in unused} for row in rows]


def _params(rec: Recorded) -> dict[str, Any]:
    t = rec.trace
    shown = {k: v for k, v in t.params.items() if not (k[0] in "PM" and k[1:].isdigit())}
    shown["P"] = [str(t.params[f"P{i}"]) for i in range(t.requests)]
    shown["M"] = [str(t.params[f"M{i}"]) for i in range(t.requests)]
    return {"trace": t.name, "requests": t.requests, "block_size": t.block_size, **shown}


def _words(diff: Mapping[str, tuple[Any, Any]], side: int) -> str:
    """One side of a difference: outputs as ``key=value``, then each request it leaves
    otherwise as ``#slot`` and the spec's ``<status><computed>/<outputs>b<blocks>``."""
    words = [f"{k}={v[side]}" for k, v in diff.items() if not k.startswith("next_")]
    words += [f"{k.removeprefix('next_')}={v[side]}" for k, v in diff.items()
              if k in ("next_h", "next_free")]  # fmt: skip
    for i in range(SLOTS):
        if f"next_st{i}" in diff:
            st, c, g, b = (diff[f"next_{k}{i}"][side] for k in SLOT_KEYS)
            words.append(f"#{i} {'-WRFA'[st]}{c}/{g}b{b}")
    return " ".join(words)


@dataclass(frozen=True)
class TraceRefinement:
    """A code obligation checked on concrete traces: the shipped Scheduler against the spec
    scheduler on every trace of ``traces()``, grouped by size (one check each)."""

    id: str
    statement: str
    mutants: Sequence[CodeMutant]
    machine: SchedulerMachine
    """The spec machine at the widest block size (``densegate prove --jobs`` groups by it)."""
    classes: Mapping[str, tuple[Config, Event]]
    target: Make = Scheduler
    """What is checked: the shipped Scheduler (a test hands it a broken one)."""
    level: str = "refinement-scheduler"

    @property
    def checks(self) -> tuple[str, ...]:
        """One per size, in ``traces()`` order: "8 requests, block size 1", ..."""
        return tuple(dict.fromkeys(t.check for t in traces()))

    @property
    def bound(self) -> str:
        n = sum(1 for _ in traces())
        return (
            f"{n} traces ({2 + SEEDED} per size: 2 enumerated bursts, {SEEDED} seeded), "
            f"{' and '.join(map(str, REQUESTS))} requests, block sizes {_SIZES}, at most "
            f"{MAX_PASSES} passes each"
        )

    scope: str = (
        "impl/sched/scheduler.py Scheduler through its public API (abort, add, schedule, "
        "update; a NullRunner samples) beside SchedulerMachine(12 slots, block size) evaluated "
        "on constants, every output and the whole next state compared each pass; concrete "
        "runs only, nothing claimed of other traces, sizes or parameters; chunked and "
        f"unchunked prefill, gate on and off, a preemption with > {WIDE} running and > {WIDE} "
        "admitted in one pass, each reached at every size"
    )

    @property
    def cost(self) -> int:
        """For ordering work only: a second or less, well below R3's."""
        return 8

    @property
    def scope_statement(self) -> str:
        return scope_statement("code", self.bound, self.scope)

    def _trace(self, rec: Recorded, rows: list[dict[str, Any]], diff: Any, why: str) -> Trace:
        """The passes up to the first difference, the last with what the code and the spec
        do there; printed as the spec prints its scheduler traces."""
        rows = _shown(rec, rows)
        rows[-1].update({"code": _words(diff, 0), "spec": _words(diff, 1)})
        spec = SchedulerMachine(rec.trace.requests, rec.trace.block_size)
        return Trace(_params(rec), rows, why, [spec.display_row(row) for row in rows])

    def _refute(self, m: CodeMutant, runs: Sequence[Recorded]) -> MutantResult:
        """The trace where ``m`` leaves the spec soonest (then the fewest requests)."""
        t0 = time.perf_counter()
        make = scheduler_of(m)
        best: tuple[int, int, Recorded, dict[str, Any]] | None = None
        for rec in runs:
            hit = first_difference(make, rec)
            if hit is not None and (best is None or (hit[0], rec.trace.requests) < best[:2]):
                best = (hit[0], rec.trace.requests, rec, hit[1])
        seconds = time.perf_counter() - t0
        if best is None:
            why = f"every pass of the {len(runs)} traces agrees with the spec"
            return MutantResult(m.name, m.description, "survived", seconds, None, why)
        k, _, rec, diff = best
        trace = self._trace(rec, [dict(r) for r in rec.rows[: k + 1]], diff, self.statement)
        return MutantResult(m.name, m.description, "refuted", seconds, trace)

    def prove(self) -> ObligationResult:
        t0 = time.perf_counter()
        steppers = {bs: Stepper(SchedulerMachine(SLOTS, bs)) for bs in BLOCK_SIZES}
        todo: dict[str, list[WideTrace]] = {}
        for t in traces():
            todo.setdefault(t.check, []).append(t)
        runs: dict[str, list[Recorded]] = {}
        checks, sanity, coverage = [], [], []
        failed: Trace | None = None
        for via, ts in todo.items():
            t1 = time.perf_counter()
            recs = runs[via] = [lockstep(steppers[t.block_size], self.target, t) for t in ts]
            passes = sum(len(r.rows) for r in recs)
            bad = next((r for r in recs if r.differs is not None), None)
            broken = next((r.spec_error for r in recs if r.spec_error), None)
            if broken is not None:
                status, reason = "unknown", f"the spec's evaluator: {broken}"
            elif bad is not None and bad.differs is not None:
                status = "sat"
                reason = f"{bad.trace.name}, pass {len(bad.rows) - 1}: {sorted(bad.differs)}"
                if failed is None:
                    failed = self._trace(bad, bad.rows, bad.differs, self.statement)
            else:
                status = "unsat"
                reason = f"{len(recs)} traces, {passes} passes: every pass agrees with the spec"
            checks.append(CheckResult(f"{via}: every trace", status, time.perf_counter() - t1,
                                      reason))  # fmt: skip
            admitted = all(r.params_ok and r.obs_ok for r in recs)
            why = "every trace's parameters, arrivals and aborts are ones the spec admits"
            if not admitted:
                why = "a trace's parameters, arrivals or aborts are ones the spec rejects"
            sanity.append(CheckResult(f"{via}: precondition", "sat" if admitted else "unsat",
                                      0.0, why))  # fmt: skip
            for name, (config, event) in self.classes.items():
                mine = [r for r in recs if config(r.trace.params)]
                good = [r.rows if r.differs is None else r.rows[:-1] for r in mine]
                hit = any(event(row) for rows in good for row in rows)
                coverage.append(Coverage(via, name, bool(mine), hit))
        verdict = code_verdict(checks, sanity, coverage)
        agreed = [r for recs in runs.values() for r in recs if r.differs is None]
        mutants = [self._refute(m, agreed) for m in self.mutants]
        return ObligationResult(
            self.id, self.level, self.statement, verdict, time.perf_counter() - t0,
            parametric=False, bound=self.bound, scope=self.scope, checks=checks,
            mutants=mutants, trace=failed, sanity=sanity, about="code",
            precondition_satisfiable=all(c.status == "sat" for c in sanity), coverage=coverage,
        )  # fmt: skip


WIDE_OBLIGATIONS: list[TraceRefinement] = [
    TraceRefinement("R4", STATEMENT, R4_MUTANTS, SchedulerMachine(SLOTS, BLOCK_SIZES[-1]),
                    R4_CLASSES),
]  # fmt: skip
"""R4, in the ``refinement-scheduler`` level beside R3."""
