"""What a ``TorchRunner`` counts: passes per kind, real tokens and step times.

Step times are kept per kind with real token counts only (never padded rows), so
tokens/s and p50/p99 per kind can be compared between gate settings.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field

from densegate.impl.figures import percentile

__all__ = ["KindSummary", "RunnerStats", "StepKind"]


class StepKind(enum.Enum):
    """How a pass ran; the key of the per-kind timings."""

    PREFILL = "prefill"
    MIXED = "mixed"
    DECODE_GRAPH = "decode_graph"
    DECODE_EAGER = "decode_eager"


def _ms(seconds: float | None) -> float:
    return math.nan if seconds is None else seconds * 1e3


@dataclass(frozen=True, slots=True)
class KindSummary:
    """Steps of one kind: ``tokens`` are real tokens fed (prefill tokens + decode rows)."""

    steps: int
    tokens: int
    seconds: float
    tokens_per_s: float
    p50_ms: float
    p99_ms: float

    def as_dict(self) -> dict[str, float]:
        return {
            "steps": self.steps,
            "tokens": self.tokens,
            "seconds": self.seconds,
            "tokens_per_s": self.tokens_per_s,
            "p50_ms": self.p50_ms,
            "p99_ms": self.p99_ms,
        }


@dataclass(slots=True)
class RunnerStats:
    """Counters and per-kind step times of a ``TorchRunner``."""

    graph_replays: int = 0
    eager_decode_steps: int = 0
    prefill_or_mixed_steps: int = 0
    graphs_captured: int = 0
    padded_rows: int = 0
    step_seconds: dict[StepKind, list[float]] = field(
        default_factory=lambda: {k: [] for k in StepKind}
    )
    step_tokens: dict[StepKind, int] = field(default_factory=lambda: dict.fromkeys(StepKind, 0))

    def record(self, kind: StepKind, seconds: float, tokens: int) -> None:
        self.step_seconds[kind].append(seconds)
        self.step_tokens[kind] += tokens

    def kind_summary(self, kind: StepKind) -> KindSummary:
        times = self.step_seconds[kind]
        total = sum(times)
        tokens = self.step_tokens[kind]
        return KindSummary(
            steps=len(times),
            tokens=tokens,
            seconds=total,
            tokens_per_s=tokens / total if total > 0 else 0.0,
            p50_ms=_ms(percentile(times, 50)),
            p99_ms=_ms(percentile(times, 99)),
        )

    def summary(self) -> dict[str, object]:
        """JSON-ready counters plus ``kinds``: per kind that ran, the ``KindSummary`` fields."""
        kinds = {k.value: self.kind_summary(k).as_dict() for k in StepKind if self.step_seconds[k]}
        return {
            "graph_replays": self.graph_replays,
            "eager_decode_steps": self.eager_decode_steps,
            "prefill_or_mixed_steps": self.prefill_or_mixed_steps,
            "graphs_captured": self.graphs_captured,
            "padded_rows": self.padded_rows,
            "kinds": kinds,
        }
