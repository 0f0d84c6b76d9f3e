"""Every obligation ``densegate prove`` knows, by level, imported only when asked for."""

from __future__ import annotations

from importlib import import_module
from typing import Protocol

from densegate.proofs.prover import MutantResult, Obligation, ObligationResult
from densegate.proofs.prover import prove as prove_model
from densegate.proofs.prover import refute as refute_model

__all__ = ["LEVELS", "Provable", "obligations", "prove", "refute"]


class Provable(Protocol):
    """An obligation that proves itself (the code-level ones: refinement by symbolic execution)."""

    @property
    def id(self) -> str: ...

    def prove(self) -> ObligationResult: ...


LEVELS: dict[str, tuple[str, str]] = {
    "gate": ("densegate.proofs.gate_obligations", "GATE_OBLIGATIONS"),
    "scheduler": ("densegate.proofs.scheduler_obligations", "SCHEDULER_OBLIGATIONS"),
    "dp": ("densegate.proofs.dp_obligations", "DP_OBLIGATIONS"),
    "refinement": ("densegate.proofs.refinement.obligations", "REFINEMENT_OBLIGATIONS"),
    "refinement-scheduler": (
        "densegate.proofs.refinement.obligations",
        "SCHEDULER_REFINEMENT_OBLIGATIONS",
    ),
}
"""level -> (module, list attribute); later levels register here."""

ALSO: dict[str, tuple[tuple[str, str], ...]] = {
    "gate": (("densegate.proofs.stall_gate_obligations", "STALL_GATE_OBLIGATIONS"),),
}
"""Further lists proved at a level, after its own (the one-rank STALL valve's V1-V4)."""


def obligations(levels: list[str] | None = None) -> list[Obligation | Provable]:
    chosen = levels if levels else list(LEVELS)
    unknown = [lv for lv in chosen if lv not in LEVELS]
    if unknown:
        raise ValueError(f"unknown proof level(s) {unknown}; known: {sorted(LEVELS)}")
    out: list[Obligation | Provable] = []
    for lv in chosen:
        for module, attr in (LEVELS[lv], *ALSO.get(lv, ())):
            out.extend(getattr(import_module(module), attr))
    return out


def prove(ob: Obligation | Provable, mutants: bool = True) -> ObligationResult:
    """A model obligation goes to the prover; a code obligation runs its own checks (its
    mutants always with them: they start from states its proof sampled). ``mutants``
    False leaves a model obligation's mutants to ``refute``."""
    return prove_model(ob, mutants) if isinstance(ob, Obligation) else ob.prove()


def refute(ob: Obligation | Provable) -> list[MutantResult]:
    """A model obligation's mutants, each refuted on its own (none for a code obligation,
    whose ``prove`` refutes them)."""
    return [refute_model(ob, m) for m in ob.mutants] if isinstance(ob, Obligation) else []
