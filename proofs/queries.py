"""The prover's z3 queries: a machine unrolled into fresh frames, one solver per question.

Every proof and every non-vacuity check asks z3 through these: ``valid`` passes only
on ``unsat`` of the negation, ``satisfiable`` only on ``sat``, and ``unknown`` (the
resource limit included) is an answer of its own that always fails, with z3's
reason. Limits are z3 rlimits, never wall-clock timeouts, so a run is repeatable
on any machine.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import z3

from densegate.proofs.obligation import Monitor, Step
from densegate.proofs.results import CheckResult
from densegate.spec.machine import Frame, Machine, Vars

__all__ = ["RLIMIT", "Unroller", "satisfiable", "solve", "solver", "valid"]

RLIMIT = 150_000_000
"""z3 resource budget per query; exceeding it is reported as ``unknown``."""


class Unroller:
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

    def transition(self) -> tuple[Vars, Frame, Vars, Step, z3.BoolRef]:
        """One symbolic pass: parameters, frame ``0``, its successor state ``1``, the step
        and the constraint that it is a real transition."""
        p = self.machine.params()
        f = self.frame("0")
        nxt = self.state("1")
        st, trans = self.step(p, f, nxt)
        return p, f, nxt, st, trans

    def step(self, p: Vars, f: Frame, nxt: Vars) -> tuple[Step, z3.BoolRef]:
        """The step object and the constraint that it is a real transition."""
        cmds = self.machine.commands(p, f.state, f.obs)
        st = Step(p, f.state, f.obs, f.out, nxt, cmds, self.machine)
        mons = [nxt[m.name] == m.update(st) for m in self.monitors]
        return st, z3.And(self.machine.relation(p, f, nxt), *mons)


def solver(tuning: Mapping[str, Any] | None = None) -> z3.Solver:
    """A solver under ``RLIMIT`` with the obligation's options (``tuning``)."""
    # Eliminating the transition relation's many equalities first makes the
    # scheduler's queries several times cheaper; the gate's are unaffected.
    s = z3.Then("simplify", "propagate-values", "solve-eqs", "smt").solver()
    s.set("rlimit", RLIMIT)
    for k, v in (tuning or {}).items():
        s.set(k, v)
    return s


def solve(
    constraints: Sequence[z3.BoolRef], tuning: Mapping[str, Any] | None = None
) -> tuple[z3.CheckSatResult, float, str]:
    """One solver run: its answer, its seconds and, on ``unknown``, z3's reason."""
    t0 = time.perf_counter()
    s = solver(tuning)
    s.add(*constraints)
    r = s.check()
    return r, time.perf_counter() - t0, s.reason_unknown() if r == z3.unknown else ""


def valid(
    name: str,
    premise: Sequence[z3.BoolRef],
    goal: z3.BoolRef,
    tuning: Mapping[str, Any] | None = None,
    refuted: str = "counterexample to induction found",
) -> CheckResult:
    """Validity of premise => goal, as unsatisfiability of its negation; ``refuted`` is
    the reason a ``sat`` answer is reported with."""
    r, dt, why = solve([*premise, z3.Not(goal)], tuning)
    if r == z3.unsat:
        return CheckResult(name, "unsat", dt)
    if r == z3.sat:
        return CheckResult(name, "sat", dt, refuted)
    return CheckResult(name, "unknown", dt, why)


def satisfiable(
    name: str,
    constraints: Sequence[z3.BoolRef],
    tuning: Mapping[str, Any] | None = None,
    empty: str = "unsatisfiable: everything would follow vacuously",
) -> CheckResult:
    """A check that passes on ``sat``: the constraints have a model (``empty``: the reason
    an ``unsat`` answer is reported with)."""
    r, dt, why = solve(constraints, tuning)
    if r == z3.sat:
        return CheckResult(name, "sat", dt)
    if r == z3.unsat:
        return CheckResult(name, "unsat", dt, empty)
    return CheckResult(name, "unknown", dt, why)
