"""The one list of what ``densegate prove`` proves: its levels, each naming its obligations.

The command, its ``--help``, the report and the tests all read ``LEVELS``; no other
place lists a level or an obligation id. Each level names, in report order, the ids
it proves and the module lists that hold them (``Source``), with the catalogs of broken
variants those obligations must refute. Loading a level checks the lists against the
ids, so an obligation added to a module but not here (or the reverse) is an error, not
a silently unproved claim. Obligation modules load only when a level is loaded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from densegate.proofs.obligation import Provable

__all__ = [
    "LEVELS",
    "Level",
    "RegistryError",
    "Source",
    "default_levels",
    "level",
    "obligations",
]


class RegistryError(ValueError):
    """The registry and the obligation modules disagree, or a level or id is unknown."""


@dataclass(frozen=True)
class Source:
    """A module's list of obligations and, if it defines one, its catalog of mutants."""

    module: str
    obligations: str
    """The attribute holding the module's obligations (a sequence of ``Provable``)."""
    mutants: str | None = None
    """The attribute holding the module's broken variants by name (a mapping), each of
    which some obligation of the level must refute; None: the module keeps no catalog
    (each broken variant is built inside the obligation that refutes it)."""

    def load(self) -> Sequence[Provable]:
        loaded: Sequence[Provable] = getattr(import_module(self.module), self.obligations)
        return loaded

    def catalog(self) -> Mapping[str, object]:
        if self.mutants is None:
            return {}
        named: Mapping[str, object] = getattr(import_module(self.module), self.mutants)
        return named


@dataclass(frozen=True)
class Level:
    """A level of ``densegate prove --level``: what it is about, its ids, where they live."""

    name: str
    summary: str
    """One line for ``--help`` and the docs."""
    ids: tuple[str, ...]
    """The obligations it proves, in report order."""
    sources: tuple[Source, ...]
    default: bool = True
    """Whether ``densegate prove`` with no ``--level`` proves it (``--all``: every level).
    The default run is kept under 10 s on an idle 2-core machine
    (``benchmarks/prove_time.py``); a level whose checks cost seconds a path is not in it."""

    def obligations(self) -> list[Provable]:
        """The level's obligations in ``ids`` order, checked against the registry."""
        found: dict[str, Provable] = {}
        for source in self.sources:
            for ob in source.load():
                if ob.id in found:
                    raise RegistryError(f"level {self.name}: obligation {ob.id} listed twice")
                if ob.level != self.name:
                    raise RegistryError(f"{ob.id} says level {ob.level}, registry {self.name}")
                found[ob.id] = ob
        if set(found) != set(self.ids):
            extra, missing = sorted(set(found) - set(self.ids)), sorted(set(self.ids) - set(found))
            raise RegistryError(
                f"level {self.name}: not in the registry {extra}, in no module {missing}"
            )
        return [found[i] for i in self.ids]

    def unused_mutants(self) -> set[str]:
        """The names in the level's mutant catalogs that none of its obligations refutes
        (by name, over the whole level: a catalog's variant may be refuted on another
        module's machine, as S10 refutes the per-slot ``prompt_only_reservation``)."""
        named = {name for source in self.sources for name in source.catalog()}
        return named - {m.name for ob in self.obligations() for m in ob.mutants}


def _scheduler(module: str, obligations: str, mutants: str | None = None) -> Source:
    return Source(f"densegate.proofs.scheduler.{module}", obligations, mutants)


LEVELS: tuple[Level, ...] = (
    Level(
        "gate",
        "the one-rank gate (P1-P7) and its STALL valve (V1-V4), for all parameters",
        ("P1", "P2", "P3", "P4", "P5", "P6", "P7", "V1", "V2", "V3", "V4"),
        (
            Source("densegate.proofs.gate_obligations", "GATE_OBLIGATIONS", "GATE_MUTANTS"),
            Source(
                "densegate.proofs.stall_gate_obligations",
                "STALL_GATE_OBLIGATIONS",
                "STALL_GATE_MUTANTS",
            ),
        ),
    ),
    Level(
        "scheduler",
        "the scheduler (S1-S16) at block size 2, its gate without the STALL valve: S8 at 3 "
        "request slots, S16 (the per-slot pass is its folds' run) at 8; the others for any "
        "number of requests, on slot-free machines and the folds whose facts they take",
        tuple(f"S{i}" for i in range(1, 17)),
        (
            _scheduler("ledger", "LEDGER_OBLIGATIONS"),
            _scheduler("summary", "SUMMARY_OBLIGATIONS"),
            _scheduler("window", "WINDOW_OBLIGATIONS"),
            _scheduler("scans", "SCAN_OBLIGATIONS"),
            _scheduler("per_slot", "PER_SLOT_OBLIGATIONS", "PER_SLOT_MUTANTS"),
            _scheduler("life", "LIFE_OBLIGATIONS"),
            _scheduler("decode_scan", "DECODE_OBLIGATIONS"),
            _scheduler("victim", "VICTIM_OBLIGATIONS"),
            _scheduler("join", "JOIN_OBLIGATIONS"),
            _scheduler("tail", "TAIL_OBLIGATIONS"),
            _scheduler("window_scan", "WINDOW_SCAN_OBLIGATIONS"),
            _scheduler("link", "LINK_OBLIGATIONS"),
        ),
    ),
    Level(
        "dp",
        "the aligned gate over N ranks (D1-D8), its paced mode (D9-D11) and cap rule (D12), for "
        "all parameters and any N",
        tuple(f"D{i}" for i in range(1, 13)),
        (
            Source("densegate.proofs.dp_obligations", "DP_OBLIGATIONS", "DP_MUTANTS"),
            Source("densegate.proofs.dp_paced", "PACED_OBLIGATIONS", "PACED_MUTANTS"),
        ),
    ),
    Level(
        "refinement",
        "the shipped PrefillGate refines its machine (R1), every path, gate and STALL valve on "
        "and off",
        ("R1",),
        (Source("densegate.proofs.refinement.obligations", "GATE_REFINEMENT_OBLIGATIONS"),),
    ),
    Level(
        "refinement-dp",
        "the shipped AlignedGate refines the aligned gate's machine (R2), every path, for any "
        "N, gate, valves, aligned release and paced mode on and off",
        ("R2",),
        (Source("densegate.proofs.refinement.obligations", "DP_REFINEMENT_OBLIGATIONS"),),
        default=False,
    ),
    Level(
        "refinement-scheduler",
        "the shipped Scheduler plans as the spec scheduler (R3), every path at 2 requests, "
        "block size 2, and runs as it on fixed traces at 8 and 12 requests, block sizes 1, 3, "
        "5, 16 (R4); plans prefill as the spec for any number of requests, block sizes 1-5 "
        "and 16 (R5); and does to each request what the spec's per-request steps do, any "
        "number of requests (R6)",
        ("R3", "R4", "R5", "R6"),
        (
            Source("densegate.proofs.refinement.obligations", "SCHEDULER_REFINEMENT_OBLIGATIONS"),
            Source("densegate.proofs.refinement.scheduler_wide", "WIDE_OBLIGATIONS"),
            Source("densegate.proofs.refinement.obligations", "PLAN_REFINEMENT_OBLIGATIONS"),
            Source("densegate.proofs.refinement.obligations", "REQUEST_REFINEMENT_OBLIGATIONS"),
        ),
        default=False,
    ),
)
"""Every level, in report order (``densegate prove --all`` proves them all; with no
``--level``, the ``default`` ones)."""


def level(name: str) -> Level:
    for lv in LEVELS:
        if lv.name == name:
            return lv
    raise RegistryError(f"unknown proof level {name!r}; known: {[lv.name for lv in LEVELS]}")


def default_levels() -> list[Level]:
    """The levels ``densegate prove`` proves with no ``--level`` and no ``--all``."""
    return [lv for lv in LEVELS if lv.default]


def obligations(levels: Sequence[str] | None = None) -> list[Provable]:
    """The obligations of ``levels`` (every level when None or empty), in report order."""
    chosen = [level(name) for name in levels] if levels else list(LEVELS)
    return [ob for lv in chosen for ob in lv.obligations()]
