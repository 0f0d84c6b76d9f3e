"""What the prover returns: per-query checks, traces, mutant and obligation results.

Plain data, so the report (table and JSON) and the tests read one shape.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CheckResult",
    "Coverage",
    "MutantResult",
    "ObligationResult",
    "Trace",
    "scope_statement",
]


def scope_statement(about: str, bound: str | None, scope: str | None, fixes: bool = False) -> str:
    """What a proof covers, in words: every parameter value, or the bound it is checked
    to, then its scope. A model obligation's scope fixes some parameters (say, 3 request
    slots), so the rest are "all other parameters"; a code obligation's says how the code
    was explored, and fixes a parameter only where it says so (``fixes``: R5's block
    sizes)."""
    if bound is not None:
        return f"bounded: {bound}; {scope}" if scope else f"bounded: {bound}"
    if not scope:
        return "all parameters"
    if about == "code" and not fixes:
        return f"all parameters; {scope}"
    return f"all other parameters; {scope}"


@dataclass
class CheckResult:
    name: str
    status: str  # unsat | sat | unknown
    seconds: float
    reason: str = ""
    condition: str = ""
    """A trigger check's condition, as the report names it."""
    at_pass: int | None = None
    """A trigger check's: the pass of the run from the initial state that reached it."""


@dataclass(frozen=True)
class Coverage:
    """One configuration class a code obligation names (say, chunked prefill off) against
    one of its checks: whether the check's precondition admits it (z3, on the
    precondition's own formula) and whether an explored path that passed every check
    admits it. A class either misses fails the obligation."""

    check: str
    name: str
    satisfiable: bool
    reached: bool

    @property
    def ok(self) -> bool:
        return self.satisfiable and self.reached

    @property
    def why(self) -> str:
        if not self.satisfiable:
            return "the precondition admits no input of this class"
        if not self.reached:
            return "no explored path that passed the check admits an input of this class"
        return ""


@dataclass
class Trace:
    """A run from the initial state whose last pass breaks the property."""

    params: dict[str, Any]
    rows: list[dict[str, Any]]
    violated: str
    display: list[dict[str, Any]] | None = None
    """The rows as the machine prefers them printed (``Machine.display_row``)."""


@dataclass
class MutantResult:
    name: str
    description: str
    status: str  # refuted | survived | unknown
    seconds: float
    trace: Trace | None = None
    reason: str = ""


@dataclass
class ObligationResult:
    id: str
    level: str
    statement: str
    status: str  # proved | failed | unknown | vacuous
    seconds: float
    parametric: bool
    bound: str | None
    scope: str | None = None
    checks: list[CheckResult] = field(default_factory=list)
    mutants: list[MutantResult] = field(default_factory=list)
    trace: Trace | None = None
    sanity: list[CheckResult] = field(default_factory=list)
    """Non-vacuity and totality: the premise and every trigger satisfiable (``sat``),
    exactly one command enabled in every premise state (``unsat`` of its negation)."""
    about: str = "model"
    """What was proved: ``model`` (the Z3 spec) or ``code`` (the shipped Python)."""
    reach_depth: int | None = None
    """A model obligation's: passes from the initial state its triggers must be reached in."""
    precondition_satisfiable: bool | None = None
    """A code obligation's: every check's precondition has a model and some explored path
    got past it (None for a model obligation)."""
    coverage: list[Coverage] = field(default_factory=list)
    """A code obligation's configuration classes, per check (``Coverage``)."""
    fixes: bool = False
    """A code obligation whose scope fixes some parameters (``scope_statement``)."""

    @property
    def scope_statement(self) -> str:
        """What the proof covers, as the report prints it (``scope_statement``)."""
        return scope_statement(self.about, self.bound, self.scope, self.fixes)

    @property
    def ok(self) -> bool:
        return self.status == "proved" and all(m.status == "refuted" for m in self.mutants)
