"""Every obligation ``densegate prove`` knows, by level, imported only when asked for."""

from __future__ import annotations

from importlib import import_module

from densegate.proofs.prover import Obligation

__all__ = ["LEVELS", "obligations"]

LEVELS: dict[str, tuple[str, str]] = {
    "gate": ("densegate.proofs.gate_obligations", "GATE_OBLIGATIONS"),
    "scheduler": ("densegate.proofs.scheduler_obligations", "SCHEDULER_OBLIGATIONS"),
    "dp": ("densegate.proofs.dp_obligations", "DP_OBLIGATIONS"),
}
"""level -> (module, list attribute); later levels register here."""


def obligations(levels: list[str] | None = None) -> list[Obligation]:
    chosen = levels if levels else list(LEVELS)
    unknown = [lv for lv in chosen if lv not in LEVELS]
    if unknown:
        raise ValueError(f"unknown proof level(s) {unknown}; known: {sorted(LEVELS)}")
    out: list[Obligation] = []
    for lv in chosen:
        module, attr = LEVELS[lv]
        out.extend(getattr(import_module(module), attr))
    return out
