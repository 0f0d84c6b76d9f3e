"""How ``densegate prove`` splits its obligations into tasks for worker processes.

Obligations sharing a machine go in one task, so they share its proved invariant (the
prover proves consecution once per machine and invariant); each model obligation's
mutants are a task of their own (they need no proof of the obligation, only its
statement). A code obligation refutes its mutants with its proof: they start from
states its proof sampled. Tasks are ordered likely-costliest first, so the longest
one starts at once; the order changes how long a run takes, never what it proves.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from densegate.proofs.obligation import Obligation, Provable
from densegate.proofs.registry import Level

__all__ = ["MAX_DEFAULT_WORKERS", "Task", "default_workers", "tasks"]

MAX_DEFAULT_WORKERS = 8
"""The default's cap: past a handful, workers only add start-up and memory (the longest
single task, about 3 s here, bounds the run)."""


@dataclass(frozen=True)
class Task:
    """Prove ``ids`` of ``level`` (a model obligation's mutants left to a task of their
    own), or, with ``mutants_only``, refute the one model obligation's mutants. A worker
    rebuilds the obligations from the level: they hold z3 terms, which do not pickle."""

    level: Level
    ids: tuple[str, ...]
    mutants_only: bool


def tasks(work: Sequence[tuple[Level, Provable]]) -> list[Task]:
    """Every obligation of ``work`` proved in exactly one task and every model
    obligation's mutants refuted in exactly one; the likely costliest first."""
    groups: dict[tuple[str, int], list[Provable]] = {}
    levels: dict[str, Level] = {}
    for lv, ob in work:
        levels[lv.name] = lv
        groups.setdefault((lv.name, id(ob.machine)), []).append(ob)
    weighed: list[tuple[int, Task]] = []
    for (name, _), members in groups.items():
        lv = levels[name]
        cost = max(ob.cost for ob in members)
        weighed.append((cost, Task(lv, tuple(ob.id for ob in members), False)))
        for ob in members:
            if isinstance(ob, Obligation) and ob.mutants:
                weighed.append((ob.cost * len(ob.mutants) // 4, Task(lv, (ob.id,), True)))
    return [t for _, t in sorted(weighed, key=lambda wt: -wt[0])]


def default_workers() -> int:
    """CPUs this process may run on (a container's limit, not the host's count), capped."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        n = os.cpu_count() or 1
    return max(1, min(n, MAX_DEFAULT_WORKERS))
