"""What a rank reports of one phase: how the ranks' passes lined up, and its own figures.

JSON-ready, since reports cross process boundaries as files or gathered objects.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from densegate.impl.dp_gate import REASONS

__all__ = ["FIGURES", "AlignmentStats", "RankReport"]


@dataclass
class AlignmentStats:
    """How the ranks' passes lined up, tick by tick (identical on every rank).

    A *mixed* tick has some rank prefilling while another only decodes: the
    decoding ranks wait on the prefilling one in the step's collectives.
    ``mixed_by_reason`` counts, per decision reason of a prefilling rank, the
    mixed ticks it appears in (uncoordinated ranks may differ within a tick).
    """

    ticks: int = 0
    prefill_ticks: int = 0
    """Ticks where at least one rank prefilled."""
    aligned_prefill_ticks: int = 0
    """Prefill ticks where no rank only decoded: the ranks prefilled together."""
    all_ranks_prefill_ticks: int = 0
    """Prefill ticks where every rank prefilled."""
    mixed_ticks: int = 0
    stalled_rank_ticks: int = 0
    """Sum over mixed ticks of the ranks that only decoded."""
    mixed_by_reason: collections.Counter[str] = field(default_factory=collections.Counter)

    def observe(
        self, world_size: int, prefilled: int, decode_only: int, reasons: Sequence[int]
    ) -> None:
        self.ticks += 1
        if not prefilled:
            return
        self.prefill_ticks += 1
        self.all_ranks_prefill_ticks += prefilled == world_size
        if not decode_only:
            self.aligned_prefill_ticks += 1
            return
        self.mixed_ticks += 1
        self.stalled_rank_ticks += decode_only
        for reason, n in zip(REASONS, reasons, strict=True):
            if n:
                self.mixed_by_reason[reason.name] += 1

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["mixed_by_reason"] = dict(sorted(self.mixed_by_reason.items()))
        return d


@dataclass
class RankReport:
    """One rank's account of one phase; JSON-ready through ``as_dict``/``from_dict``.

    ``decisions`` holds ``(tick, fire, reason)`` for every coordinated tick;
    every rank of a healthy aligned phase holds the same list, and after a
    fault every survivor does. Decisions taken alone (only when the store died
    with rank 0) go to ``local_decisions``. ``assignment`` is the whole routing
    (request id -> rank, the survivor for a handed-over request) every rank
    computed alike.

    After a fault: ``faults`` (one entry per agreement: tick, dead ranks,
    detection and recovery seconds), ``readmitted`` (request -> [dead rank it
    left, survivor that took it]), ``ended_on_dead`` (request -> [dead rank,
    status] for what the dead rank's stream had already ended), ``seen``
    (request -> tokens the caller saw before this rank re-admitted it). ``lost``
    is empty unless the store itself died. ``kv_blocks`` is ``[free, total]``
    at the end: equal when every block came back.
    """

    rank: int
    world_size: int
    phase: str
    coordination: str
    gate: str
    runner: str
    router: str
    decisions: list[tuple[int, bool, str]] = field(default_factory=list)
    local_decisions: list[tuple[int, bool, str]] = field(default_factory=list)
    assignment: dict[str, int] = field(default_factory=dict)
    finished: list[str] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    unfinished: list[str] = field(default_factory=list)
    alignment: dict[str, Any] = field(default_factory=dict)
    figures: dict[str, Any] = field(default_factory=dict)
    faults: list[dict[str, Any]] = field(default_factory=list)
    readmitted: dict[str, list[int]] = field(default_factory=dict)
    ended_on_dead: dict[str, list[Any]] = field(default_factory=dict)
    seen: dict[str, list[int]] = field(default_factory=dict)
    lost: list[str] = field(default_factory=list)
    kv_blocks: list[int] = field(default_factory=list)
    outputs: dict[str, list[int]] | None = None
    ticks: int = 0
    wall_s: float = 0.0
    collective_ms_per_tick: float = 0.0
    timing: dict[str, Any] = field(default_factory=dict)
    """What a hook recorded of the phase's passes (the lab's ``TimingHooks``: measured
    times, and the work to model them); empty without one."""

    @property
    def fault_tick(self) -> int | None:
        """The tick of the first fault, or None if the group never broke."""
        return self.faults[0]["tick"] if self.faults else None

    @property
    def assigned(self) -> list[str]:
        """Requests the router sent to this rank."""
        return [rid for rid, r in self.assignment.items() if r == self.rank]

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RankReport:
        d = dict(d)
        for key in ("decisions", "local_decisions"):
            d[key] = [(int(t), bool(f), str(r)) for t, f, r in d.get(key, [])]
        return cls(**d)


FIGURES = (
    "requests",
    "finished",
    "passes",
    "prompt_tokens",
    "output_tokens",
    "prefill_passes",
    "mean_prefill_fill",
    "decode_only_passes",
    "prefill_passes_interrupting_decode",
    "underfull_interrupting",
    "ttft_passes",
    "preemptions",
    "runner_ms_per_pass",
)
"""The single-rank summary figures a rank keeps in ``RankReport.figures``."""
