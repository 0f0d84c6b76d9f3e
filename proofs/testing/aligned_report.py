"""What the aligned kit reports: per-property verdicts and the shrunk run of each violation.

Plain data plus its two renderings (text, one row per tick, and JSON), for
``check_aligned_gate`` and ``densegate conform --aligned``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from densegate.impl.dp_gate import AlignedGateConfig
from densegate.spec.dp_gate import SHARED
from densegate.spec.properties import Property
from densegate.testing.aligned_driver import TickRecord, spec_params
from densegate.testing.report import Verdict, Verdicts, violation_lines

__all__ = ["AlignedReport", "AlignedResult", "AlignedViolation", "format_aligned_violation"]

_SLOTS = SHARED[:-1]
"""The reduced vector's slots after RANKS, by the spec's names (the table's columns)."""


@dataclass(frozen=True)
class AlignedViolation:
    """A shrunk run that breaks one property, cut after the tick that breaks it."""

    config: AlignedGateConfig
    world_size: int
    records: tuple[TickRecord, ...]
    message: str


@dataclass(frozen=True)
class AlignedResult(Verdict[AlignedViolation]):
    """One property's verdict for an aligned gate."""


@dataclass(frozen=True)
class AlignedReport(Verdicts):
    """Per-property verdicts for one aligned gate, with a minimal run for each violation."""

    target: str
    results: tuple[AlignedResult, ...]
    max_examples: int
    seed: int | None
    """None when derandomized."""
    runs: int
    ticks: int
    seconds: float
    _unit = "ticks"
    _command = "densegate conform --aligned"

    def __getitem__(self, pid: str) -> AlignedResult:
        got: AlignedResult = super().__getitem__(pid)
        return got

    def _violation_lines(self, r: Any) -> list[str]:
        return format_aligned_violation(r.prop, r.violation)

    def _violation_doc(self, r: Any) -> dict[str, Any]:
        return _violation_json(r.violation)

    def to_json(self) -> dict[str, Any]:
        return self._json(aligned=True)


def _params(cfg: AlignedGateConfig, world: int) -> dict[str, Any]:
    """The spec's names; A, Cp, Cs and Db are None with the aligned release, paced mode, surge
    cap and busy wait off."""
    p = spec_params(cfg, world)
    keep = {k: p[k] for k in ("B", "K", "N", "T", "S", "kv", "enabled")}
    return keep | {"A": cfg.align_ticks, "Cp": cfg.pace_tokens, "Cs": cfg.surge_tokens,
                   "Db": cfg.busy_decodes}  # fmt: skip


def _spec_text(spec: tuple[bool, str, int, int]) -> str:
    fire, reason, cap, h = spec
    return f"{'FIRE' if fire else 'HOLD'} {reason}{f' cap={cap}' if cap else ''} h'={h}"


def format_aligned_violation(prop: Property, v: AlignedViolation) -> list[str]:
    """The violating run, one row per tick; the last row is the one that breaks it."""
    params = " ".join(f"{k}={val}" for k, val in _params(v.config, v.world_size).items())
    head = ["tick", "t", *_SLOTS, "h", "decision", "reason", "cap", "h'"]
    if prop.id == "agreement":
        head.append("spec")
    rows = [head]
    for i, r in enumerate(v.records, 1):
        row = [str(i), str(r.tick), *(str(x) for x in r.obs.to_vector()[1:]), str(r.h)]
        if r.decision is None:
            row += ["-", r.error or "-", "-", "-"]
        else:
            d = r.decision
            cap = "-" if d.cap is None else str(d.cap)
            row += ["FIRE" if d.fire else "HOLD", d.reason.name, cap, str(r.h_next)]
        if prop.id == "agreement":
            row.append(_spec_text(r.spec))
        rows.append(row)
    return violation_lines(prop, params, rows, v.message)


def _int_or_repr(x: object) -> object:
    return x if isinstance(x, int) else repr(x)


def _violation_json(v: AlignedViolation) -> dict[str, Any]:
    return {
        "params": _params(v.config, v.world_size),
        "message": v.message,
        "ticks": [
            {
                "tick": i,
                "t": r.tick,
                **dict(zip(_SLOTS, r.obs.to_vector()[1:], strict=True)),
                "h": _int_or_repr(r.h),
                "fire": None if r.decision is None else r.decision.fire,
                "reason": None if r.decision is None else r.decision.reason.name,
                "cap": None if r.decision is None else r.decision.cap,
                "h_next": _int_or_repr(r.h_next),
                "spec": {
                    "fire": r.spec[0],
                    "reason": r.spec[1],
                    "cap": r.spec[2] or None,
                    "h_next": r.spec[3],
                },
                "error": r.error,
            }
            for i, r in enumerate(v.records, 1)
        ],
    }
