"""Non-vacuity: the checks that keep a proof from holding only because nothing happens.

An induction proves ``premise => property``; a premise that no run meets proves
everything. So every model obligation is also checked (``sanity_checks``) for:

- *initial state*: some parameters and initial state meet the invariant;
- *premise*: the one-step premise (parameters, observation, invariant and, for step
  properties, the transition) is satisfiable;
- *totality*: every invariant state admits at least one observation with an enabled
  command, so no reachable state is a dead end the claims hold of vacuously (a fact
  that forbids one kind of pass fails here, with the blocked state);
- *exactly one command*: in every premise state (determinism with totality);
- *each trigger reachable*: every condition that makes the property bite occurs on a
  run from the initial state within the obligation's ``reach_depth`` passes (found by
  bounded model checking, so reachable really means reached).

Results for the same machine, invariant and monitors are shared within a run, keyed by
the objects themselves (never by ``id()``, which a freed object hands on).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import z3

from densegate.proofs import queries
from densegate.proofs.obligation import Obligation, Prop
from densegate.proofs.queries import Unroller, satisfiable, solver, valid
from densegate.proofs.results import CheckResult
from densegate.proofs.trace_rows import model_value
from densegate.spec.machine import Frame, Machine

__all__ = [
    "ONE_COMMAND",
    "TOTALITY",
    "antecedents",
    "sanity_checks",
    "sanity_passed",
    "sanity_status",
]

TOTALITY = "totality"
ONE_COMMAND = "exactly one command"

_SHARED: dict[tuple[Any, ...], CheckResult] = {}
"""Definite results (never ``unknown``) by (check, machine, invariant, monitors, ...): the
objects are the key, so a result is never handed to a different invariant."""


def _shared(key: tuple[Any, ...], run: Callable[[], CheckResult]) -> CheckResult:
    hit = _SHARED.get(key)
    if hit is not None:
        return CheckResult(hit.name, hit.status, 0.0, hit.reason or "shared")
    r = run()
    if r.status != "unknown":
        _SHARED[key] = r
    return r


def antecedents(term: z3.BoolRef) -> list[z3.BoolRef]:
    """The conditions of a property's top-level implications (through conjunctions)."""
    if z3.is_and(term):
        return [a for kid in term.children() for a in antecedents(kid)]
    if z3.is_app_of(term, z3.Z3_OP_IMPLIES):
        return [term.arg(0)]
    return []


def _describe(t: z3.BoolRef, width: int = 200) -> str:
    """A trigger as text: z3's own printing when short (it is slow on big terms)."""
    raw = t.sexpr()
    text = " ".join((str(t) if len(raw) <= 2 * width else raw).split())
    return text if len(text) <= width else text[: width - 3] + "..."


def _totality(ob: Obligation, machine: Machine) -> CheckResult:
    """Every invariant state admits an observation under which some command is enabled.

    The query is quantified (an observation exists), and z3's quantifier instantiation
    depends on the ids of the terms it is given, which depend on everything built
    before in the process: so it runs in a z3 context of its own, into which the query
    is translated, and gets the same ids, and the same answer, on every run."""
    u = Unroller(machine, ob.monitors)
    p, f = machine.params(), u.frame("0")
    cmds = machine.commands(p, f.state, f.obs)
    some = z3.And(machine.obs_ok(p, f.state, f.obs), z3.Or(*[c.guard for c in cmds]))
    obs = list(f.obs.values())
    goal = z3.Exists(obs, some) if obs else some
    query = z3.And(machine.param_ok(p), ob.invariant(p, f.state), z3.Not(goal))
    ctx = z3.Context()
    steps = [z3.Tactic(t, ctx) for t in ("simplify", "propagate-values", "solve-eqs", "smt")]
    s = z3.Then(*steps).solver()
    s.set("rlimit", queries.RLIMIT)
    for k, v in ob.solver_options.items():
        s.set(k, v)
    s.add(query.translate(ctx))
    t0 = time.perf_counter()
    answer = s.check()
    seconds = time.perf_counter() - t0
    if answer == z3.unsat:
        return CheckResult(TOTALITY, "unsat", seconds)
    if answer == z3.unknown:
        return CheckResult(TOTALITY, "unknown", seconds, s.reason_unknown())
    model = s.model()
    state = {k: model_value(model, v.translate(ctx)) for k, v in f.state.items()}
    shown = ", ".join(f"{k}={v}" for k, v in list(state.items())[:12])
    why = (
        "an invariant state admits no observation with an enabled command, so every claim "
        f"about its passes holds vacuously: {shown}"
    )
    return CheckResult(TOTALITY, "sat", seconds, why)


def _triggers(ob: Obligation) -> Callable[[Any], list[z3.BoolRef]]:
    given: Sequence[Prop] | None = ob.triggers
    if given is not None:
        return lambda st: [t(st) for t in given]
    return lambda st: antecedents(ob.prop(st))


def _name(ob: Obligation, i: int, t: z3.BoolRef) -> str:
    names = ob.trigger_names
    return names[i] if names is not None and i < len(names) else _describe(t)


def _reach(ob: Obligation, machine: Machine) -> list[CheckResult]:
    """Each trigger on a run from the initial state, within ``ob.reach_depth`` passes."""
    u = Unroller(machine, ob.monitors)
    p = machine.params()
    s = solver(ob.solver_options)
    f: Frame = u.frame("0")
    s.add(machine.param_ok(p), u.init(p, f.state))
    triggers = _triggers(ob)
    found: dict[int, CheckResult] = {}
    unknown: dict[int, str] = {}
    seconds: dict[int, float] = {}
    names: list[str] = []
    depth = ob.reach_depth
    if depth < 1:
        raise ValueError(f"{ob.id}: reach_depth must be >= 1, got {depth}")
    for k in range(depth):
        nxt = u.frame(str(k + 1))
        s.add(machine.obs_ok(p, f.state, f.obs))
        st, trans = u.step(p, f, nxt.state)
        s.add(trans)
        conds = triggers(st)
        if k == 0:
            names = [_name(ob, i, t) for i, t in enumerate(conds)]
        for i, t in enumerate(conds):
            if i in found:
                continue
            s.push()
            s.add(t)
            t0 = time.perf_counter()
            r = s.check()
            seconds[i] = seconds.get(i, 0.0) + time.perf_counter() - t0
            if r == z3.sat:
                why = f"{names[i]}; reached at pass {k} of a run from the initial state"
                found[i] = CheckResult(f"trigger {i + 1}", "sat", seconds[i], why, names[i], k)
            elif r == z3.unknown:
                unknown[i] = s.reason_unknown()
            s.pop()
        if len(found) == len(conds):
            break
        f = nxt
    out = []
    for i, cond in enumerate(names):
        if i in found:
            out.append(found[i])
        elif i in unknown:
            why = f"{cond}; {unknown[i]}"
            out.append(CheckResult(f"trigger {i + 1}", "unknown", seconds.get(i, 0.0), why, cond))
        else:
            why = f"{cond}; not reached within {depth} passes from the initial state"
            out.append(CheckResult(f"trigger {i + 1}", "unsat", seconds.get(i, 0.0), why, cond))
    return out


def sanity_checks(ob: Obligation, machine: Machine) -> list[CheckResult]:
    """Initial state, premise, totality, exactly one command, each trigger reached."""
    u = Unroller(machine, ob.monitors)
    p, f, _, st, trans = u.transition()
    inv = ob.invariant(p, f.state)
    base = [machine.param_ok(p), machine.obs_ok(p, f.state, f.obs), inv]
    premise = [*base, trans] if ob.needs_step else base
    key = (machine, ob.invariant, tuple(ob.monitors))
    tune = ob.solver_options
    start = [machine.param_ok(p), u.init(p, f.state), inv]
    no_start = "no initial state meets the parameters and the invariant: nothing is ever run"
    one = z3.Sum([z3.If(c.guard, 1, 0) for c in st.commands]) == 1
    two = "a premise state enables no command or several"
    return [
        _shared(("init", *key), lambda: satisfiable("initial state", start, tune, no_start)),
        _shared(("premise", *key, ob.needs_step), lambda: satisfiable("premise", premise, tune)),
        _shared(("total", *key), lambda: _totality(ob, machine)),
        _shared(("one", *key), lambda: valid(ONE_COMMAND, base, one, tune, two)),
        *_reach(ob, machine),
    ]


def sanity_status(checks: Sequence[CheckResult]) -> str:
    """``failed`` when two commands can be enabled at once; ``vacuous`` when a state is a
    dead end (totality) or something must be satisfiable and is not; else ``unknown`` on
    any unknown answer, or ``proved``."""
    for c in checks:
        if c.name == ONE_COMMAND:
            if c.status == "sat":
                return "failed"
        elif c.name == TOTALITY:
            if c.status == "sat":
                return "vacuous"
        elif c.status == "unsat":
            return "vacuous"
    return "unknown" if any(c.status == "unknown" for c in checks) else "proved"


def sanity_passed(c: CheckResult) -> bool:
    """Whether one non-vacuity check passed (validity checks on ``unsat``, the rest on ``sat``)."""
    return c.status == ("unsat" if c.name in (TOTALITY, ONE_COMMAND) else "sat")
