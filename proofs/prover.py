"""The prover: inductive proofs over a spec machine, and counterexample traces.

An obligation states a property of every transition taken from a reachable
state. It is proved for all parameter values by an inductive invariant (three
validity queries: initiation, consecution, and invariant-implies-property), or,
where only bounded checking is feasible, by bounded model checking with the
bound reported. Broken variants of the machine are refuted by bounded model
checking from the initial state, which yields a trace a person can read.

Only ``unsat`` proves anything: ``unknown`` (resource limit included) is a
failure that says why. A proof from an unsatisfiable premise proves nothing, so
every obligation also checks that its premise (parameters, observation,
invariant, transition) and each of its triggers are satisfiable (else it is
``vacuous``), and that exactly one command is enabled in every premise state.
Limits are z3 rlimits, never wall-clock timeouts, so a run is repeatable on
any machine.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import z3

from densegate.proofs.obligation import Monitor, Mutant, Obligation, Step
from densegate.proofs.results import CheckResult, MutantResult, ObligationResult, Trace
from densegate.proofs.trace_rows import model_trace
from densegate.spec.machine import Frame, Machine, Vars

__all__ = ["RLIMIT", "find_trace", "prove", "refute"]

RLIMIT = 150_000_000
"""z3 resource budget per query; exceeding it is reported as ``unknown``."""


# -- building blocks ------------------------------------------------------------------


class _Unroller:
    """Fresh frames of one machine plus the obligation's monitors."""

    def __init__(self, machine: Machine, monitors: Sequence[Monitor]) -> None:
        self.machine = machine
        self.monitors = monitors

    def state(self, tag: str) -> Vars:
        s = self.machine.state(tag)
        s.update({m.name: m.sort(f"{m.name}@{tag}") for m in self.monitors})
        return s

    def frame(self, tag: str) -> Frame:
        f = self.machine.frame(tag)
        f.state.update({m.name: m.sort(f"{m.name}@{tag}") for m in self.monitors})
        return f

    def init(self, p: Vars, s: Vars) -> z3.BoolRef:
        mons = [s[m.name] == m.init(p) for m in self.monitors]
        return z3.And(self.machine.init(p, s), *mons)

    def step(self, p: Vars, f: Frame, nxt: Vars) -> tuple[Step, z3.BoolRef]:
        """The step object and the constraint that it is a real transition."""
        cmds = self.machine.commands(p, f.state, f.obs)
        st = Step(p, f.state, f.obs, f.out, nxt, cmds, self.machine)
        mons = [nxt[m.name] == m.update(st) for m in self.monitors]
        return st, z3.And(self.machine.relation(p, f, nxt), *mons)


def _solver(tuning: Mapping[str, Any] | None = None) -> z3.Solver:
    # Eliminating the transition relation's many equalities first makes the
    # scheduler's queries several times cheaper; the gate's are unaffected.
    s = z3.Then("simplify", "propagate-values", "solve-eqs", "smt").solver()
    s.set("rlimit", RLIMIT)
    for k, v in (tuning or {}).items():
        s.set(k, v)
    return s


def _solve(
    constraints: Sequence[z3.BoolRef], tuning: Mapping[str, Any] | None = None
) -> tuple[z3.CheckSatResult, float, str]:
    """One solver run: its answer, its seconds and, on ``unknown``, z3's reason."""
    t0 = time.perf_counter()
    s = _solver(tuning)
    s.add(*constraints)
    r = s.check()
    return r, time.perf_counter() - t0, s.reason_unknown() if r == z3.unknown else ""


def _check(
    name: str,
    premise: Sequence[z3.BoolRef],
    goal: z3.BoolRef,
    tuning: Mapping[str, Any] | None = None,
) -> CheckResult:
    """Validity of premise => goal, as unsatisfiability of its negation."""
    r, dt, why = _solve([*premise, z3.Not(goal)], tuning)
    if r == z3.unsat:
        return CheckResult(name, "unsat", dt)
    if r == z3.sat:
        return CheckResult(name, "sat", dt, "counterexample to induction found")
    return CheckResult(name, "unknown", dt, why)


_CONSECUTION: dict[tuple[int, int, tuple[int, ...]], Machine] = {}
"""Invariants proved inductive, by (machine, invariant, monitors): obligations
sharing an invariant prove it once per run. Only ``unsat`` is remembered, so an
``unknown`` (say, under a smaller rlimit) is always asked again."""


def _induction_checks(ob: Obligation, machine: Machine) -> list[CheckResult]:
    u = _Unroller(machine, ob.monitors)
    p = machine.params()
    f = u.frame("0")
    nxt = u.state("1")
    st, trans = u.step(p, f, nxt)
    base = [machine.param_ok(p), machine.obs_ok(p, f.state, f.obs)]
    inv_s = ob.invariant(p, f.state)
    tune = ob.solver_options
    key = (id(machine), id(ob.invariant), tuple(id(m) for m in ob.monitors))
    if _CONSECUTION.get(key) is machine:
        consecution = CheckResult("consecution", "unsat", 0.0, "proved earlier in this run")
    else:
        consecution = _check("consecution", [*base, inv_s, trans], ob.invariant(p, nxt), tune)
        if consecution.status == "unsat":
            _CONSECUTION[key] = machine
    checks = [
        _check("initiation", [machine.param_ok(p), u.init(p, f.state)], inv_s, tune),
        consecution,
    ]
    premise = [*base, inv_s, trans] if ob.needs_step else [*base, inv_s]
    if ob.needs_step and consecution.status == "unsat":
        # Sound once consecution is proved, and it spares re-deriving the
        # invariant's facts about the next state.
        premise.append(ob.invariant(p, nxt))
    checks.append(_check("property", premise, ob.prop(st), tune))
    return checks


# -- non-vacuity and totality -----------------------------------------------------------


def _antecedents(term: z3.BoolRef) -> list[z3.BoolRef]:
    """The conditions of a property's top-level implications (through conjunctions)."""
    if z3.is_and(term):
        return [a for kid in term.children() for a in _antecedents(kid)]
    if z3.is_app_of(term, z3.Z3_OP_IMPLIES):
        return [term.arg(0)]
    return []


def _satisfiable(
    name: str, constraints: Sequence[z3.BoolRef], tuning: Mapping[str, Any] | None = None
) -> CheckResult:
    """A check that passes on ``sat``: the constraints have a model."""
    r, dt, why = _solve(constraints, tuning)
    if r == z3.sat:
        return CheckResult(name, "sat", dt)
    if r == z3.unsat:
        return CheckResult(name, "unsat", dt, "unsatisfiable: everything would follow vacuously")
    return CheckResult(name, "unknown", dt, why)


_SANITY: dict[tuple[Any, ...], tuple[Machine, CheckResult]] = {}
"""Premise and totality results shared by obligations with the same machine and invariant."""


def _cached(key: tuple[Any, ...], machine: Machine, run: Callable[[], CheckResult]) -> CheckResult:
    hit = _SANITY.get(key)
    if hit is not None and hit[0] is machine and hit[1].status != "unknown":
        return CheckResult(hit[1].name, hit[1].status, 0.0, hit[1].reason or "shared")
    r = run()
    _SANITY[key] = (machine, r)
    return r


def _describe(t: z3.BoolRef, width: int = 200) -> str:
    """A trigger as text: z3's own printing when short (it is slow on big terms)."""
    raw = t.sexpr()
    text = " ".join((str(t) if len(raw) <= 2 * width else raw).split())
    return text if len(text) <= width else text[: width - 3] + "..."


def _sanity_checks(ob: Obligation, machine: Machine) -> list[CheckResult]:
    """Premise satisfiable, each trigger reachable in it, exactly one command enabled."""
    u = _Unroller(machine, ob.monitors)
    p = machine.params()
    f = u.frame("0")
    nxt = u.state("1")
    st, trans = u.step(p, f, nxt)
    base = [machine.param_ok(p), machine.obs_ok(p, f.state, f.obs), ob.invariant(p, f.state)]
    premise = [*base, trans] if ob.needs_step else base
    mons = tuple(id(m) for m in ob.monitors)
    key: tuple[Any, ...] = ("premise", id(machine), id(ob.invariant), mons, ob.needs_step)
    tune = ob.solver_options
    checks = [_cached(key, machine, lambda: _satisfiable("premise", premise, tune))]
    triggers = (
        [t(st) for t in ob.triggers] if ob.triggers is not None else _antecedents(ob.prop(st))
    )
    for i, t in enumerate(triggers):
        r = _satisfiable(f"trigger {i + 1}", [*premise, t], tune)
        names = ob.trigger_names
        cond = names[i] if names is not None and i < len(names) else _describe(t)
        r.reason = f"{cond}; {r.reason}" if r.reason else cond
        checks.append(r)
    one = z3.Sum([z3.If(c.guard, 1, 0) for c in st.commands]) == 1
    key = ("total", id(machine), id(ob.invariant), mons)
    checks.append(_cached(key, machine, lambda: _check("exactly one command", base, one, tune)))
    return checks


def _sanity_status(checks: Sequence[CheckResult]) -> str:
    """``vacuous`` when a premise or trigger is unsatisfiable; totality fails on ``sat``."""
    for c in checks:
        if c.name == "exactly one command":
            if c.status == "sat":
                return "failed"
        elif c.status == "unsat":
            return "vacuous"
    return "unknown" if any(c.status == "unknown" for c in checks) else "proved"


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
    u = _Unroller(machine, ob.monitors)
    p = machine.params()
    s = _solver(ob.solver_options)
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
            _check(f"lemma {i + 1}", [], lem(), ob.solver_options)
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
    sanity = _sanity_checks(ob, ob.machine)
    verdict = _sanity_status(sanity)
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
        parametric=ob.bound is None and ob.scope is None,
        bound=ob.bound_text,
        scope=ob.scope,
        checks=checks,
        mutants=refuted,
        trace=trace,
        sanity=sanity,
    )
