"""What an obligation states: the property, its monitors, and the broken variants it must refute.

Pure data over ``densegate.spec`` machines; ``densegate.proofs.prover`` decides them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import z3

from densegate.proofs.results import ObligationResult, scope_statement
from densegate.spec.machine import Command, Machine, Vars

__all__ = [
    "Inv",
    "Monitor",
    "Mutant",
    "Named",
    "Obligation",
    "Prop",
    "Provable",
    "ProvesItself",
    "Step",
]


@dataclass(frozen=True)
class Step:
    """One transition as the property sees it. ``s``/``s2`` include monitors."""

    p: Vars
    s: Vars
    o: Vars
    out: Vars
    s2: Vars
    commands: Sequence[Command]
    machine: Machine


@dataclass(frozen=True)
class Monitor:
    """A history variable the proof adds to the state; the machine never reads it."""

    name: str
    sort: Callable[[str], z3.ExprRef]
    init: Callable[[Vars], z3.ExprRef]
    update: Callable[[Step], z3.ExprRef]


Prop = Callable[[Step], z3.BoolRef]
Inv = Callable[[Vars, Vars], z3.BoolRef]


@dataclass(frozen=True)
class Mutant:
    """A deliberately broken machine the obligation must refute."""

    name: str
    description: str
    machine: Machine


@dataclass(frozen=True)
class Obligation:
    """A property of every reachable transition, with its proof certificate.

    ``invariant`` strengthens the property until it is inductive. With
    ``needs_step`` False the property is about (state, observation) alone and
    is checked without assuming any command fired: totality lives there.
    ``bound`` set means bounded model checking to that depth instead of
    induction (reported as not parametric).
    """

    id: str
    level: str
    statement: str
    machine: Machine
    prop: Prop
    invariant: Inv
    mutants: Sequence[Mutant]
    monitors: Sequence[Monitor] = ()
    needs_step: bool = True
    bound: int | None = None
    bound_note: str | None = None
    trace_depth: int = 12
    reach_depth: int = 4
    """Passes from the initial state within which each trigger must be reached (the
    non-vacuity check ``densegate.proofs.vacuity`` runs; the report states it)."""
    readable: Callable[[Vars], z3.BoolRef] | None = None
    """Extra constraints tried first when searching a trace, for small numbers."""
    scope: str | None = None
    """What is fixed beyond the parameters (e.g. the number of request slots); an
    obligation with a scope is reported as not parametric unless ``parametric`` says so."""
    parametric: bool | None = None
    """None: parametric exactly when there is no bound and no scope. True, with a scope:
    proved for any number of requests (no slot count, no bound), the scope naming what
    else is fixed (say, the block size), never a bound on the requests."""
    lemmas: Sequence[Callable[[], z3.BoolRef]] = ()
    """Closed arithmetic facts the statement relies on, each proved valid alongside."""
    triggers: Sequence[Prop] | None = None
    """Conditions that make the property bite (each must be reachable in the premise).
    ``None``: the antecedents of the property's top-level implications."""
    trigger_names: Sequence[str] | None = None
    """How the report names ``triggers`` (default: the condition as z3 prints it)."""
    solver_options: Mapping[str, object] = field(default_factory=dict)
    """z3 options for this obligation's queries (speed only: every answer is still
    ``unsat``/``sat`` from z3, and ``unknown`` still fails)."""

    @property
    def cost(self) -> int:
        """A guess at the proof's cost, for ordering work only: the machine's variables."""
        return len(self.machine.param_sorts) + len(self.machine.state_sorts)

    @property
    def bound_text(self) -> str | None:
        """The bound as the report names it (None: proved by induction, unbounded)."""
        return None if self.bound is None else (self.bound_note or f"depth {self.bound}")

    @property
    def scope_statement(self) -> str:
        """What the proof covers, as the report prints it."""
        return scope_statement("model", self.bound_text, self.scope)


class Named(Protocol):
    """A broken variant as ``densegate prove`` lists it (a model ``Mutant`` or a code one)."""

    @property
    def name(self) -> str: ...


class Provable(Protocol):
    """What ``densegate prove`` runs: a model ``Obligation`` (the prover decides it) or a
    code obligation that proves itself (``densegate.proofs.refinement``)."""

    @property
    def id(self) -> str: ...
    @property
    def level(self) -> str: ...
    @property
    def statement(self) -> str: ...
    @property
    def machine(self) -> Machine: ...
    @property
    def mutants(self) -> Sequence[Named]: ...
    @property
    def cost(self) -> int: ...
    @property
    def scope_statement(self) -> str: ...


@runtime_checkable
class ProvesItself(Protocol):
    """A code obligation: it runs its own checks and refutes its own mutants."""

    def prove(self) -> ObligationResult: ...
