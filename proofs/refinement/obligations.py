"""The R level of ``densegate prove``: obligations about the shipped code, not the model.

Each obligation names the shipped class, its entry points (one symbolic check
each) and its broken variants. It is proved when CrossHair explores every path
of every check with no disagreement; a mutant is refuted when inputs the check
admits, replayed concretely on the mutant and on the spec's own evaluator,
really disagree. The inputs come from a symbolic search of the mutant, or
(R3) from the states the target's own proof reached, screened for one where the
mutant does otherwise than the target.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import z3

from densegate.impl.dp_gate import AlignedGate
from densegate.impl.gate import PrefillGate
from densegate.impl.sched.scheduler import Scheduler
from densegate.proofs.refinement import dp_gate, gate
from densegate.proofs.refinement import scheduler as sched
from densegate.proofs.refinement import scheduler_replay as sched_replay
from densegate.proofs.refinement import scheduler_requests as requests
from densegate.proofs.refinement import scheduler_steps as steps
from densegate.proofs.refinement.gate import Replay
from densegate.proofs.refinement.mutate import CodeMutant
from densegate.proofs.refinement.scheduler_request_mutants import R6_MUTANTS
from densegate.proofs.refinement.scheduler_step_mutants import R5_MUTANTS
from densegate.proofs.refinement.symbolic import Classes, Outcome, admitted_classes, explore
from densegate.proofs.results import (
    CheckResult,
    Coverage,
    MutantResult,
    ObligationResult,
    Trace,
    scope_statement,
)
from densegate.spec.dp_gate import DP
from densegate.spec.gate import GATE
from densegate.spec.machine import Machine
from densegate.spec.properties import statement

__all__ = [
    "DP_REFINEMENT_OBLIGATIONS",
    "GATE_REFINEMENT_OBLIGATIONS",
    "REFINEMENT_OBLIGATIONS",
    "REQUEST_REFINEMENT_OBLIGATIONS",
    "SCHEDULER_REFINEMENT_OBLIGATIONS",
    "RefinementObligation",
    "code_verdict",
]

Builder = Callable[..., Callable[..., None]]
"""A check of a class: ``build(cls)``; a check whose mutants may name a ``focus`` also
takes ``build(cls, at)``, the check on inputs that agree with the partial state ``at``."""
Replayer = Callable[[type, str, Mapping[str, Any]], Replay]

_CHECK_STATUS = {"proved": "unsat", "refuted": "sat", "unknown": "unknown"}
"""A symbolic check in the prover's words: unsat = no disagreeing input exists."""


def code_verdict(
    checks: Sequence[CheckResult], sanity: Sequence[CheckResult], coverage: Sequence[Coverage]
) -> str:
    """A code obligation's verdict: a refuting check fails it, an unfinished one leaves it
    unknown, an unsatisfiable precondition or an unreached class makes it vacuous."""
    if any(c.status == "sat" for c in checks):
        return "failed"
    if any(c.status != "unsat" for c in checks):
        return "unknown"
    if any(c.status != "sat" for c in sanity) or not all(c.ok for c in coverage):
        return "vacuous"
    return "proved"


@dataclass(frozen=True)
class RefinementObligation:
    """The shipped ``target`` refines a spec machine through every entry in ``checks``."""

    id: str
    statement: str
    target: type
    checks: Mapping[str, Builder]
    params: Sequence[str]
    replay: Replayer
    mutants: Sequence[CodeMutant]
    scope: str
    machine: Machine
    """The spec machine refined (``densegate prove --jobs`` groups obligations by it)."""
    precondition: Callable[[Mapping[str, z3.ExprRef]], z3.BoolRef]
    """What every check admits, as a formula over its arguments (shown satisfiable)."""
    classes: Classes
    """The configuration classes the scope names (chunked or not, gate on or off, ...):
    each must be admitted by the precondition and reached by an explored path of every
    check, else the obligation is ``vacuous``."""
    level: str = "refinement"
    bound: str | None = None
    """What a bounded obligation is bounded in (the report prints "bounded: ..."); None: nothing."""
    show: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    """How a counterexample row is best printed (None: as is)."""
    incremental: bool = False
    """Whether CrossHair's queries go to an incremental z3 solver (``explore``)."""
    fixes: bool = False
    """The scope fixes some parameters (R5's block sizes): "all other parameters"."""
    screen: Callable[[type, Mapping[str, Any]], object] | None = None
    """What a class does on one state, run concretely (None: the replay against the spec
    decides). A mutant is first replayed against the spec on the first state sampled from
    the target's proof where it does otherwise than the target; then checked symbolically
    on its ``focus`` (a partial state), if it names one; then, unless refuted there, on
    every path."""

    @property
    def cost(self) -> int:
        """A guess at the proof's cost, for ordering work only: its inputs, weighed (CrossHair
        runs the code once per path, and paths multiply with inputs), plus its mutants,
        which run with it."""
        return 8 * len(self.params) + 2 * len(self.mutants)

    @property
    def scope_statement(self) -> str:
        """What the proof covers, as the report prints it."""
        return scope_statement("code", self.bound, self.scope, self.fixes)

    def _explore(self, check: Callable[..., None], classes: Classes | None = None) -> Outcome:
        return explore(check, incremental=self.incremental, classes=classes)

    def _vacuity(
        self, via: str, check: Callable[..., None], out: Outcome
    ) -> tuple[CheckResult, list[Coverage]]:
        """The check's precondition shown satisfiable (z3) and passed by an explored path,
        and each configuration class admitted by it and reached by such a path."""
        pre, admits = admitted_classes(check, self.precondition, self.classes)
        if not pre:
            why = "the precondition has no model: every path would pass vacuously"
            result = CheckResult(f"{via}: precondition", "unsat", 0.0, why)
        elif out.passed == 0:
            why = f"no explored path ({out.paths}) got past the precondition and every check"
            result = CheckResult(f"{via}: precondition", "unsat", 0.0, why)
        else:
            result = CheckResult(f"{via}: precondition", "sat", 0.0, f"{out.passed} paths")
        cover = [Coverage(via, n, admits[n], n in out.covered) for n in self.classes]
        return result, cover

    def _suspect(
        self, cls: type, via: str, samples: Sequence[tuple[Mapping[str, Any], object]]
    ) -> tuple[Mapping[str, Any], Replay] | None:
        """The first sampled state on which ``cls``, replayed, disagrees with the spec, with
        that replay. ``samples`` pairs each state with what the target does there (its
        ``screen``): with a screen, only a state where ``cls`` does otherwise is replayed;
        without one (None), every state is."""
        for w, want in samples:
            if self.screen is not None:
                try:
                    if self.screen(cls, w) == want:
                        continue
                except Exception:
                    pass  # the mutant raised where the target did not: replay says how
            try:
                seen = self.replay(cls, via, w)
            except Exception:
                continue  # not a state the spec's evaluator can judge: no evidence
            if seen.disagrees:
                return w, seen
        return None

    def _screened(self, states: Sequence[Mapping[str, Any]]) -> list[tuple[Any, object]]:
        """The sampled states with what the target does on each (once, for every mutant);
        a state the target cannot run concretely is dropped."""
        if self.screen is None:
            return [(w, None) for w in states]
        out = []
        for w in states:
            try:
                out.append((w, self.screen(self.target, w)))
            except Exception:
                continue
        return out

    def _trace(self, via: str, witness: Mapping[str, Any], seen: Replay, why: str) -> Trace:
        params = {k: witness[k] for k in self.params}
        row: dict[str, Any] = {"pass": 0, "entry": via}
        row.update({k: v for k, v in witness.items() if k not in self.params})
        row.update({"code": seen.code, "spec": seen.spec})
        return Trace(params, [row], why, [self.show(row)] if self.show else None)

    def _refuting(self, m: CodeMutant, via: str, out: Outcome) -> Trace | None:
        """The trace of ``out``'s witness if it refutes ``m``: replayed, it really disagrees."""
        if out.status != "refuted" or out.witness is None:
            return None
        seen = self.replay(m.build, via, out.witness)
        return self._trace(via, out.witness, seen, self.statement) if seen.disagrees else None

    def _refute(
        self, m: CodeMutant, samples: Mapping[str, Sequence[tuple[Mapping[str, Any], object]]]
    ) -> MutantResult:
        t0 = time.perf_counter()
        reasons = []
        for via, build in self.checks.items():
            # a state a path of the proof reached (so the check admits it) on which the
            # mutant, replayed, disagrees with the spec: no search needed
            hit = self._suspect(m.build, via, samples.get(via, ()))
            trace = self._trace(via, hit[0], hit[1], self.statement) if hit else None
            if trace is None and via in m.focus:  # then where its author expects it to differ
                trace = self._refuting(m, via, self._explore(build(m.build, m.focus[via])))
            out = None
            if trace is None:
                out = self._explore(build(m.build))
                trace = self._refuting(m, via, out)
            if trace is not None:
                seconds = time.perf_counter() - t0
                return MutantResult(m.name, m.description, "refuted", seconds, trace)
            assert out is not None
            if out.status == "refuted" and out.witness is not None:
                reasons.append(f"{via}: witness {out.witness} did not reproduce concretely")
            elif out.status == "unknown":
                reasons.append(f"{via}: {out.detail}")
        seconds = time.perf_counter() - t0
        if not reasons:
            return MutantResult(
                m.name, m.description, "survived", seconds, None, "every check proved it"
            )
        return MutantResult(m.name, m.description, "unknown", seconds, None, "; ".join(reasons))

    def prove(self) -> ObligationResult:
        t0 = time.perf_counter()
        checks: list[CheckResult] = []
        trace = None
        samples: dict[str, list[tuple[Any, object]]] = {}
        sanity: list[CheckResult] = []
        coverage: list[Coverage] = []
        for via, build in self.checks.items():
            check = build(self.target)
            out = self._explore(check, self.classes)
            pre, cover = self._vacuity(via, check, out)
            sanity.append(pre)
            coverage += cover
            samples[via] = self._screened(out.samples)
            status = _CHECK_STATUS[out.status]
            checks.append(CheckResult(f"{via}: every path", status, out.seconds, out.detail))
            if out.status == "refuted" and out.witness is not None and trace is None:
                seen = self.replay(self.target, via, out.witness)
                trace = self._trace(via, out.witness, seen, self.statement)
        verdict = code_verdict(checks, sanity, coverage)
        seconds = time.perf_counter() - t0
        mutants = [self._refute(m, samples) for m in self.mutants]
        return ObligationResult(
            self.id,
            self.level,
            self.statement,
            verdict,
            seconds,
            parametric=self.bound is None,
            bound=self.bound,
            scope=self.scope,
            checks=checks,
            mutants=mutants,
            trace=trace,
            sanity=sanity,
            about="code",
            precondition_satisfiable=all(c.status == "sat" for c in sanity),
            coverage=coverage,
            fixes=self.fixes,
        )


REFINEMENT_OBLIGATIONS: list[RefinementObligation] = [
    RefinementObligation(
        "R1",
        statement("R1"),
        PrefillGate,
        gate.R1_CHECKS,
        ("B", "K", "enabled", "S"),
        gate.replay,
        gate.R1_MUTANTS,
        "impl/gate.py PrefillGate, symbolic execution (CrossHair) of every path; unbounded ints; "
        "gate on and off, STALL valve off (stall_passes = 0, against GATE) and on (against "
        "the stall gate), each reached by an explored path",
        GATE,
        gate.R1_PRECONDITION,
        gate.R1_CLASSES,
    ),
    RefinementObligation(
        "R2",
        statement("R2"),
        AlignedGate,
        dp_gate.R2_CHECKS,
        dp_gate.PARAMS,
        dp_gate.replay,
        (*dp_gate.R2_MUTANTS, *dp_gate.R2_CAP_MUTANTS),
        "impl/dp_gate.py AlignedGate, symbolic execution (CrossHair) of every path; "
        "unbounded ints, any N >= 1; fill_tokens taken as T in [1, B], not executed; gate, "
        "KV valve, STALL valve, aligned release, paced mode (any pace_tokens >= 1), its "
        "surge cap (any surge_tokens >= pace_tokens) and its busy wait (any busy_decodes >= 1) "
        "each on and off, each reached by an explored path; the decision's cap compared too",
        DP,
        dp_gate.R2_PRECONDITION,
        dp_gate.R2_CLASSES,
        level="refinement-dp",
    ),
]
REFINEMENT_OBLIGATIONS.append(
    RefinementObligation(
        "R5",
        statement("R5"),
        Scheduler,
        steps.R5_CHECKS,
        steps.PARAMS,
        steps.replay,
        R5_MUTANTS,
        "impl/sched/scheduler.py Scheduler._plan_prefill, _owed_step, _admit_step, symbolic "
        "execution (CrossHair) of every path; unbounded ints; every list an opaque length "
        "(any length: token lists, the owed list, the queue, the folds' results); block "
        "sizes 1, 2, 3, 4, 5, 16; taken as given: the fold loop (impl/sched/steps.py scan) "
        "and step 1's lists (each turn R6, the walk's loop R3, R4); chunked and unchunked "
        "prefill, admission stopped and open, each reached by an explored path",
        steps.SPEC,
        steps.precondition,
        steps.R5_CLASSES,
        level="refinement-scheduler",
        fixes=True,
    )
)
"""R1, R2 and R5; R2 is a level of its own (``refinement-dp``): its 243 paths take seconds,
so the default run leaves it to ``--all``; R5 (about 5 s of CPU with its twins) is in the
shipped scheduler's level, beside R3, R4 and R6."""
GATE_REFINEMENT_OBLIGATIONS = [ob for ob in REFINEMENT_OBLIGATIONS if ob.id == "R1"]
PLAN_REFINEMENT_OBLIGATIONS = [ob for ob in REFINEMENT_OBLIGATIONS if ob.id == "R5"]
DP_REFINEMENT_OBLIGATIONS = [ob for ob in REFINEMENT_OBLIGATIONS if ob.id == "R2"]

SCHEDULER_REFINEMENT_OBLIGATIONS: list[RefinementObligation] = [
    RefinementObligation(
        "R3",
        sched.STATEMENT,
        Scheduler,
        sched.R3_CHECKS,
        sched_replay.TRACE_PARAMS,
        sched_replay.replay,
        sched.R3_MUTANTS,
        "impl/sched/scheduler.py Scheduler.plan and observe, symbolic execution (CrossHair) of "
        "every path; unbounded ints; token lists, block tables and the free list taken as "
        "their lengths; arrivals, aborts and the commit (steps 0, 4-5) not executed; chunked "
        "and unchunked prefill, gate on and off, each reached by an explored path",
        sched.SPEC,
        sched.R3_PRECONDITION,
        sched.R3_CLASSES,
        level="refinement-scheduler",
        bound=f"{sched.SLOTS} requests, block size {sched.BLOCK_SIZE}",
        show=sched_replay.show,
        screen=sched_replay.concrete,
        incremental=True,
    ),
]
REQUEST_REFINEMENT_OBLIGATIONS: list[RefinementObligation] = [
    RefinementObligation(
        "R6",
        statement("R6"),
        Scheduler,
        requests.R6_CHECKS,
        requests.PARAMS,
        requests.replay,
        R6_MUTANTS,
        "impl/sched/scheduler.py Scheduler._turn, _walk_turn, _take_block, _preempt, "
        "_admit_chunk, _prefill_chunk, _decode_chunk, _sample, abort, _undo_chunk, symbolic "
        "execution (CrossHair) of every path; unbounded ints, any seq id, any number running "
        "(the running list as its length, its turn's request and its newest); token lists and "
        "block tables taken as their lengths; block sizes 1, 2, 3, 4, 5, 16 for the turn, the "
        "walk turn, the block taken and the admission; taken as given: the loops handing "
        "these steps their requests and the running list's arrival order (R3, R4, the "
        "lockstep, check_invariants); one of the first 6 requests and the 7th on, each "
        "reached by an explored path",
        requests.SPEC,
        requests.precondition,
        requests.R6_CLASSES,
        level="refinement-scheduler",
        fixes=True,
    )
]
"""R6, in the scheduler's level beside R3 and R4: with its twins it takes about 40 s, more
than the default run may."""
"""R3 is a level of its own (``refinement-scheduler``): its paths take seconds, not
fractions of one, and ``--level refinement`` stays fast."""
