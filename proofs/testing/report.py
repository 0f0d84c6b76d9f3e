"""What the conformance kit reports: per-property verdicts and the shrunk run of each violation.

Plain data plus its two renderings (text, one row per pass, and JSON), shared by
the sampled kit (``check_gate``) and the command line.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from densegate.impl.gate import Decision, GateConfig
from densegate.spec.properties import GATE_IDS, Property, by_id
from densegate.testing.strategies import Observation

__all__ = [
    "PROPERTIES",
    "ConformanceReport",
    "PassRecord",
    "PropertyResult",
    "Verdict",
    "Verdicts",
    "Violation",
    "format_violation",
    "violation_lines",
]

PROPERTIES: tuple[Property, ...] = tuple(by_id(pid) for pid in GATE_IDS)
"""What the kit judges, in report order (read from ``densegate.spec.properties``);
``agreement`` is the lockstep with the spec."""


@dataclass(frozen=True)
class PassRecord:
    """One pass as driven: the observation, the gate's counter around it, both verdicts."""

    obs: Observation
    h: object
    decision: Decision | None
    h_next: object
    spec: tuple[bool, str, int]
    """The spec's (fire, reason, h') from the spec's own counter."""
    error: str | None = None


@dataclass(frozen=True)
class Violation:
    """A shrunk run that breaks one property, cut after the pass that breaks it."""

    config: GateConfig
    records: tuple[PassRecord, ...]
    message: str
    raw: bool
    """Whether the gate was fed raw counts (then the running/queued columns matter)."""


V = TypeVar("V")


@dataclass(frozen=True)
class Verdict(Generic[V]):
    """One property's verdict: held, or violated with its own shrunk run (a ``V``)."""

    prop: Property
    violation: V | None

    @property
    def id(self) -> str:
        return self.prop.id

    @property
    def held(self) -> bool:
        return self.violation is None


@dataclass(frozen=True)
class PropertyResult(Verdict[Violation]):
    """One property's verdict for a single-rank gate."""


class Verdicts:
    """What a kit's report answers from its per-property results, and its text and JSON
    shapes: the single-rank kit's ``ConformanceReport`` and the aligned kit's report share
    them, each naming its unit (passes or ticks) and how a violation's run is printed."""

    target: str
    results: tuple[Any, ...]
    max_examples: int
    seed: int | None
    runs: int
    seconds: float
    _unit = "passes"
    _command = "densegate conform"

    @property
    def conforms(self) -> bool:
        return all(r.held for r in self.results)

    @property
    def violated(self) -> tuple[str, ...]:
        return tuple(r.id for r in self.results if not r.held)

    def __getitem__(self, pid: str) -> Any:
        for r in self.results:
            if r.id == pid:
                return r
        raise KeyError(pid)

    def _count(self) -> int:
        return int(getattr(self, self._unit))

    def _violation_lines(self, r: Any) -> list[str]:
        raise NotImplementedError

    def _violation_doc(self, r: Any) -> dict[str, Any]:
        raise NotImplementedError

    def format(self) -> str:
        mode = "derandomized" if self.seed is None else f"seed={self.seed}"
        lines = [
            f"{self._command} {self.target}: {self.runs} runs, {self._count()} {self._unit} "
            f"(max_examples={self.max_examples}, {mode}, {self.seconds:.1f} s)",
        ]
        width = max(len(r.prop.label) for r in self.results)
        for r in self.results:
            lines.append(f"  {r.prop.label:<{width}}  {'held' if r.held else 'VIOLATED'}")
        verdict = "conforms" if self.conforms else f"VIOLATES {', '.join(self.violated)}"
        lines.append(f"{self.target}: {verdict}")
        for r in self.results:
            if r.violation is not None:
                lines += ["", *self._violation_lines(r)]
        return "\n".join(lines)

    def _json(self, **extra: Any) -> dict[str, Any]:
        return {
            "target": self.target,
            **extra,
            "conforms": self.conforms,
            "violated": list(self.violated),
            "max_examples": self.max_examples,
            "derandomize": self.seed is None,
            "seed": self.seed,
            "runs": self.runs,
            self._unit: self._count(),
            "seconds": round(self.seconds, 3),
            "properties": [
                {
                    "id": r.id,
                    "title": r.prop.title,
                    "statement": r.prop.statement,
                    "status": "held" if r.held else "violated",
                    "counterexample": None if r.violation is None else self._violation_doc(r),
                }
                for r in self.results
            ],
        }


@dataclass(frozen=True)
class ConformanceReport(Verdicts):
    """Per-property verdicts for one gate, with a minimal run for each violation."""

    target: str
    results: tuple[PropertyResult, ...]
    max_examples: int
    seed: int | None
    """None when derandomized."""
    runs: int
    passes: int
    seconds: float

    def __getitem__(self, pid: str) -> PropertyResult:
        got: PropertyResult = super().__getitem__(pid)
        return got

    def _violation_lines(self, r: Any) -> list[str]:
        return format_violation(r.prop, r.violation)

    def _violation_doc(self, r: Any) -> dict[str, Any]:
        return _violation_json(r.violation)

    def to_json(self) -> dict[str, Any]:
        return self._json()


def _spec_text(spec: tuple[bool, str, int]) -> str:
    fire, reason, h = spec
    return f"{'FIRE' if fire else 'HOLD'} {reason} h'={h}"


# -- printing ----------------------------------------------------------------------


def _params(cfg: GateConfig) -> Mapping[str, object]:
    return {"B": cfg.dense_tokens, "K": cfg.max_hold_passes, "enabled": cfg.enabled}


def format_violation(prop: Property, v: Violation) -> list[str]:
    """The violating run, one row per pass; the last row is the one that breaks it."""
    params = " ".join(f"{k}={val}" for k, val in _params(v.config).items())
    head = ["pass", "w", "d", *(["running", "queued"] if v.raw else []), "h", "decision", "reason"]
    head.append("h'")
    if prop.id == "agreement":
        head.append("spec")
    rows = [head]
    for i, r in enumerate(v.records, 1):
        o = r.obs
        row = [str(i), str(o.waiting_tokens), str(o.decode_seqs)]
        if v.raw:
            row += [str(o.running_seqs), str(o.queued_tokens)]
        if r.decision is None:
            row += [str(r.h), "-", r.error or "-", "-"]
        else:
            fire = "FIRE" if r.decision.fire else "HOLD"
            row += [str(r.h), fire, r.decision.reason.name, str(r.h_next)]
        if prop.id == "agreement":
            row.append(_spec_text(r.spec))
        rows.append(row)
    return violation_lines(prop, params, rows, v.message)


def violation_lines(prop: Property, params: str, rows: list[list[str]], message: str) -> list[str]:
    """A violation as both kits print it: the property, its params, then the run as a table
    (``rows[0]`` the head, one row a step) whose last row, the breaking one, carries
    ``message``; with no step (the gate could not be built) the message alone."""
    lines = [f"{prop.id} VIOLATED: {prop.statement}", f"  params: {params}"]
    if len(rows) < 2:
        return [*lines, f"  {message}"]
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    text = ["  ".join(cell.rjust(wd) for cell, wd in zip(row, widths, strict=True)) for row in rows]
    text[-1] += f"   <- {message}"
    return lines + [f"  {t}" for t in text]


def _violation_json(v: Violation) -> dict[str, Any]:
    return {
        "params": dict(_params(v.config)),
        "message": v.message,
        "raw_counts": v.raw,
        "passes": [
            {
                "pass": i,
                "w": r.obs.waiting_tokens,
                "d": r.obs.decode_seqs,
                "running": r.obs.running_seqs,
                "queued": r.obs.queued_tokens,
                "h": r.h if isinstance(r.h, int) else repr(r.h),
                "fire": None if r.decision is None else r.decision.fire,
                "reason": None if r.decision is None else r.decision.reason.name,
                "h_next": r.h_next if isinstance(r.h_next, int) else repr(r.h_next),
                "spec": {"fire": r.spec[0], "reason": r.spec[1], "h_next": r.spec[2]},
                "error": r.error,
            }
            for i, r in enumerate(v.records, 1)
        ],
    }
