"""Planted contradictions: registry obligations with a premise broken on purpose.

Each is a copy of a real obligation (not in the registry, on a machine object of its
own, so nothing the prover remembered of the real one applies) whose induction still
goes through, so only a non-vacuity check can catch it, and each names the check
that must:

- X1, a false fact: S1's ledger with a fact no pass meets (``run0 < 0``): totality;
- X2, a fact that blocks one sub-case: S6's window forbidding every pass in which
  the tracked request runs while prefill is owed ahead of it: totality, and that
  trigger unreached;
- X3, an unsatisfiable initial state: S6's window starting at ``h >= K``: the
  initial-state check;
- X4, a false precondition: R1 whose checks and precondition admit nothing: the
  precondition check (z3 finds no model);
- X5, a precondition the check alone makes false: R1 with the true precondition
  stated but ``False`` asserted: the precondition check (no path got past it);
- X6, a precondition that drops a configuration class: R3 (plan check) restricted to
  chunked prefill: coverage of "unchunked prefill".

``PLANTED_LEVEL`` holds them, for ``densegate prove`` run on it (tests patch it in).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import z3

from densegate.proofs.obligation import Obligation, Provable
from densegate.proofs.refinement import gate as r1
from densegate.proofs.refinement import scheduler as r3
from densegate.proofs.refinement.obligations import (
    REFINEMENT_OBLIGATIONS,
    SCHEDULER_REFINEMENT_OBLIGATIONS,
)
from densegate.proofs.registry import Level, Source
from densegate.proofs.scheduler.ledger import LEDGER_OBLIGATIONS
from densegate.proofs.scheduler.window import WINDOW_OBLIGATIONS
from densegate.spec.machine import Vars
from densegate.spec.pass_ledger import PassLedger
from densegate.spec.ttft_window import TtftWindow

__all__ = ["CAUGHT_BY", "PLANTED", "PLANTED_LEVEL", "PLANTED_OBLIGATIONS"]

PLANTED = "planted"


class _FalseFact(PassLedger):
    """The ledger with a fact no pass meets: fewer than no requests run after step 0."""

    def obs_ok(self, p: Vars, s: Vars, o: Vars) -> z3.BoolRef:
        return z3.And(super().obs_ok(p, s, o), o["run0"] < 0)


class _BlocksRunningBehindOwed(TtftWindow):
    """The window with a fact that forbids every pass in which the tracked request runs
    while prefill is owed ahead of it (the sub-case chunked prefill is for)."""

    def obs_ok(self, p: Vars, s: Vars, o: Vars) -> z3.BoolRef:
        blocked = z3.And(s["open"] == 1, s["tw"] == 0, s["oa"] > 0)
        return z3.And(super().obs_ok(p, s, o), z3.Not(blocked))


class _NoStart(TtftWindow):
    """The window whose headship demands a counter at its budget (h >= K) besides h < K."""

    def init(self, p: Vars, s: Vars) -> z3.BoolRef:
        return z3.And(super().init(p, s), s["h"] >= p["K"])


def _model(base: Obligation, id: str, machine: Any) -> Obligation:
    machine.name = f"{PLANTED}[{id}]"
    return replace(base, id=id, level=PLANTED, machine=machine, mutants=())


Pre = Callable[[Mapping[str, z3.ExprRef]], z3.BoolRef]


def _nothing(v: Mapping[str, z3.ExprRef]) -> z3.BoolRef:
    return z3.BoolVal(False)


def _chunked_only(v: Mapping[str, z3.ExprRef]) -> z3.BoolRef:
    return z3.And(r3.R3_PRECONDITION(v), v["chunked"])


def _code(base: Any, id: str, **changes: Any) -> Any:
    return replace(base, id=id, level=PLANTED, mutants=(), **changes)


_S1 = next(ob for ob in LEDGER_OBLIGATIONS if ob.id == "S1")
(_S6,) = WINDOW_OBLIGATIONS
_R1 = next(ob for ob in REFINEMENT_OBLIGATIONS if ob.id == "R1")
(_R3,) = SCHEDULER_REFINEMENT_OBLIGATIONS


def _r1_checks(pre: Pre) -> dict[str, Callable[[type], Callable[..., None]]]:
    return {"decide_counts": lambda cls: r1._check(cls, "decide_counts", pre)}


PLANTED_OBLIGATIONS: list[Provable] = [
    _model(_S1, "X1", _FalseFact()),
    _model(_S6, "X2", _BlocksRunningBehindOwed()),
    _model(_S6, "X3", _NoStart()),
    _code(_R1, "X4", checks=_r1_checks(_nothing), precondition=_nothing),
    _code(_R1, "X5", checks=_r1_checks(_nothing)),
    _code(
        _R3,
        "X6",
        checks={"plan": lambda cls: r3._check(cls, pre=_chunked_only)},
        bound=_R3.bound,
    ),
]

CAUGHT_BY: dict[str, tuple[str, str]] = {
    "X1": ("totality", "admits no observation"),
    "X2": ("totality", "admits no observation"),
    "X3": ("initial state", "no initial state"),
    "X4": ("decide_counts: precondition", "has no model"),
    "X5": ("decide_counts: precondition", "got past the precondition"),
    "X6": ("plan: unchunked prefill", "no explored path"),
}
"""Planted id -> (the check that must catch it, words its reason must say)."""

PLANTED_LEVEL = Level(
    PLANTED,
    "planted contradictions, each caught by one non-vacuity check",
    tuple(ob.id for ob in PLANTED_OBLIGATIONS),
    (Source("tests.support.planted_obligations", "PLANTED_OBLIGATIONS"),),
)
