"""The prover: inductive proofs over a spec machine, and counterexample traces.

An obligation states a property of every transition taken from a reachable
state. It is proved for all parameter values by an inductive invariant (three
validity queries: initiation, consecution, and invariant-implies-property), or,
where only bounded checking is feasible, by bounded model checking with the
bound reported. Broken variants of the machine are refuted by bounded model
checking from the initial state, which yields a trace a person can read.

Only ``unsat`` proves anything: ``unknown`` (resource limit included) is a
failure that says why. A proof from an unsatisfiable premise, or about states no
run reaches, proves nothing, so every obligation also passes the non-vacuity
checks of ``densegate.proofs.vacuity`` (initial state, premise, totality, exactly
one command, each trigger reached from the initial state), else it is
``vacuous`` (or ``failed``, where a state and observation enable no command or
several). The queries
themselves are ``densegate.proofs.queries``'s.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import z3

from densegate.proofs.obligation import Inv, Monitor, Mutant, Obligation
from densegate.proofs.queries import Unroller, solver, valid
from densegate.proofs.results import CheckResult, MutantResult, ObligationResult, Trace
from densegate.proofs.trace_rows import model_trace
from densegate.proofs.vacuity import sanity_checks, sanity_status
from densegate.spec.machine import Frame, Machine, Vars

__all__ = ["find_trace", "prove", "refute"]


# -- induction ------------------------------------------------------------------------

_CONSECUTION: set[tuple[Machine, Inv, tuple[Monitor, ...]]] = set()
"""Invariants proved inductive, by (machine, invariant, monitors): obligations sharing an
invariant prove it once per run. The objects themselves are the key (never their
``id()``: a freed invariant's id is handed to the next object, which would inherit the
proof). Only ``unsat`` is remembered, so an ``unknown`` (say, under a smaller rlimit)
is always asked again. A machine means what it meant when it was proved: a test that
patches a spec function builds a new machine object."""


def _induction_checks(ob: Obligation, machine: Machine) -> list[CheckResult]:
    u = Unroller(machine, ob.monitors)
    p, f, nxt, st, trans = u.transition()
    base = [machine.param_ok(p), machine.obs_ok(p, f.state, f.obs)]
    inv_s = ob.invariant(p, f.state)
    tune = ob.solver_options
    key = (machine, ob.invariant, tuple(ob.monitors))
    if key in _CONSECUTION:
        consecution = CheckResult("consecution", "unsat", 0.0, "proved earlier in this run")
    else:
        consecution = valid("consecution", [*base, inv_s, trans], ob.invariant(p, nxt), tune)
        if consecution.status == "unsat":
            _CONSECUTION.add(key)
    checks = [
        valid("initiation", [machine.param_ok(p), u.init(p, f.state)], inv_s, tune),
        consecution,
    ]
    premise = [*base, inv_s, trans] if ob.needs_step else [*base, inv_s]
    if ob.needs_step and consecution.status == "unsat":
        # Sound once consecution is proved, and it spares re-deriving the
        # invariant's facts about the next state.
        premise.append(ob.invariant(p, nxt))
    checks.append(valid("property", premise, ob.prop(st), tune))
    return checks


# -- bounded model checking -------------------------------------------------------------


def find_trace(ob: Obligation, machine: Machine, depth: int) -> tuple[str, Trace | None, str]:
    """Bounded model checking from init: ('sat', trace) or ('unsat'|'unknown', None).

    Tries the ``readable`` constraints first so traces use small numbers; a
    trace found under them is as real as any other.
    """
    attempts = [ob.readable, None] if ob.readable is not None else [None]
    status, reason = "unsat", ""
    for extra in attempts:
        status, trace, reason = _bmc(ob, machine, depth, extra)
        if trace is not None:
            return status, trace, reason
    return status, None, reason


def _bmc(
    ob: Obligation,
    machine: Machine,
    depth: int,
    extra: Callable[[Vars], z3.BoolRef] | None,
) -> tuple[str, Trace | None, str]:
    u = Unroller(machine, ob.monitors)
    p = machine.params()
    s = solver(ob.solver_options)
    s.add(machine.param_ok(p))
    if extra is not None:
        s.add(extra(p))
    frames: list[Frame] = [u.frame("0")]
    s.add(u.init(p, frames[0].state))
    saw_unknown = ""
    for k in range(depth):
        f = frames[k]
        nxt = u.frame(str(k + 1))
        s.add(machine.obs_ok(p, f.state, f.obs))
        st, trans = u.step(p, f, nxt.state)
        s.push()
        if ob.needs_step:
            s.add(trans)
        s.add(z3.Not(ob.prop(st)))
        r = s.check()
        if r == z3.sat:
            return "sat", model_trace(s.model(), machine, p, frames, nxt, k, ob), ""
        if r == z3.unknown:
            saw_unknown = s.reason_unknown()
        s.pop()
        s.add(trans)
        frames.append(nxt)
    return ("unknown" if saw_unknown else "unsat"), None, saw_unknown


# -- entry points ---------------------------------------------------------------------


def _status(checks: Sequence[CheckResult]) -> str:
    if any(c.status == "sat" for c in checks):
        return "failed"
    if any(c.status == "unknown" for c in checks):
        return "unknown"
    return "proved"


def _refute(ob: Obligation, m: Mutant) -> MutantResult:
    t0 = time.perf_counter()
    depth = ob.bound if ob.bound is not None else ob.trace_depth
    status, trace, reason = find_trace(ob, m.machine, depth)
    if trace is not None:
        return MutantResult(m.name, m.description, "refuted", time.perf_counter() - t0, trace)
    if ob.bound is None and status == "unsat":
        verdict = _status(_induction_checks(ob, m.machine))
        if verdict == "proved":
            return MutantResult(m.name, m.description, "survived", time.perf_counter() - t0)
        reason = f"no trace within {depth} passes, induction {verdict}"
    elif ob.bound is not None and status == "unsat":
        return MutantResult(
            m.name,
            m.description,
            "survived",
            time.perf_counter() - t0,
            None,
            f"no violation within {depth} passes",
        )
    return MutantResult(m.name, m.description, "unknown", time.perf_counter() - t0, None, reason)


def refute(ob: Obligation, m: Mutant) -> MutantResult:
    """Refute ``ob``'s mutant ``m`` (a trace from the initial state), on its own."""
    return _refute(ob, m)


def prove(ob: Obligation, mutants: bool = True) -> ObligationResult:
    """Prove ``ob`` and, with ``mutants``, refute each of its mutants (else the result has
    none: ``refute`` each on its own, say in another process)."""
    t0 = time.perf_counter()
    trace = None
    if ob.bound is None:
        checks = _induction_checks(ob, ob.machine)
        checks += [
            valid(f"lemma {i + 1}", [], lem(), ob.solver_options, "the lemma is false")
            for i, lem in enumerate(ob.lemmas)
        ]
        status = _status(checks)
    else:
        t1 = time.perf_counter()
        r, trace, reason = find_trace(ob, ob.machine, ob.bound)
        check = CheckResult(f"bmc depth {ob.bound}", r, time.perf_counter() - t1, reason)
        checks = [check]
        status = _status(checks)
    if status == "failed" and trace is None:
        _, trace, _ = find_trace(ob, ob.machine, ob.trace_depth)
    sanity = sanity_checks(ob, ob.machine)
    verdict = sanity_status(sanity)
    if status == "proved" and verdict != "proved":
        status = verdict
    seconds = time.perf_counter() - t0
    refuted = [_refute(ob, m) for m in ob.mutants] if mutants else []
    return ObligationResult(
        ob.id,
        ob.level,
        ob.statement,
        status,
        seconds,
        parametric=ob.bound is None and (ob.scope is None or ob.parametric is True),
        bound=ob.bound_text,
        scope=ob.scope,
        checks=checks,
        mutants=refuted,
        trace=trace,
        sanity=sanity,
        reach_depth=ob.reach_depth,
    )
