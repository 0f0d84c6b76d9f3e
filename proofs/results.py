"""What the prover returns: per-query checks, traces, mutant and obligation results.

Plain data, so the report (table and JSON) and the tests read one shape.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["CheckResult", "MutantResult", "ObligationResult", "Trace"]


@dataclass
class CheckResult:
    name: str
    status: str  # unsat | sat | unknown
    seconds: float
    reason: str = ""


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

    @property
    def ok(self) -> bool:
        return self.status == "proved" and all(m.status == "refuted" for m in self.mutants)
