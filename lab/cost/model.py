"""The pass-time model: what one pass costs, from what it runs.

A pass is described by ``PassWork`` (prefill tokens, chunks and attention
pairs; decode rows and the keys they attend to), which the scheduler's
``ScheduledBatch`` determines exactly, so a null-runner replay can be timed
by the model as well as a real run by the clock. A data-parallel tick costs
the slowest rank's pass plus the one all-reduce every tick makes.

Two forms share the ``PassModel`` protocol: ``LinearPassModel`` (fitted to a
measured profile, one coefficient vector per pass kind) and the roofline in
``densegate.lab.cost.roofline`` (computed from stated hardware inputs).
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from densegate.impl.sched.batch import ScheduledBatch
from densegate.impl.sched.fast_init import fast_init
from densegate.impl.validation import (
    check_int,
    check_nonnegative_float,
    int_problem,
    number_problem,
)

__all__ = [
    "FEATURES",
    "KINDS",
    "LinearPassModel",
    "PassModel",
    "PassWork",
    "kind_of",
    "tick_ms",
]

_START = operator.attrgetter("start")
_COUNTS = operator.attrgetter(
    "prefill_tokens",
    "prefill_chunks",
    "prefill_pairs",
    "prefill_context",
    "decode_seqs",
    "decode_context",
)
"""A work's fields in ``as_list``'s order, read in C."""
KINDS = ("prefill", "mixed", "decode_eager", "decode_graph")
"""Pass kinds, as the torch runner times them (``StepKind`` values)."""

FEATURES = (
    "base",
    "prefill_tokens",
    "prefill_chunks",
    "prefill_pairs",
    "decode_seqs",
    "decode_context",
)
"""What a linear model's coefficients multiply, in order (``PassWork.features``)."""


@fast_init  # one per pass, or two
@dataclass(frozen=True, slots=True)
class PassWork:
    """What one pass computes; every field is a count, so the model is exact in its inputs."""

    prefill_tokens: int = 0
    prefill_chunks: int = 0
    prefill_pairs: int = 0
    """Query-key pairs of the prefill chunks' causal attention: ``n * start + n (n + 1) / 2``."""
    prefill_context: int = 0
    """Keys the prefill chunks read (``start + n`` each): the KV a chunk streams in."""
    decode_seqs: int = 0
    decode_context: int = 0
    """Keys the decode rows attend to: the sum of their lengths."""

    @classmethod
    def from_batch(cls, batch: ScheduledBatch) -> PassWork:
        tokens = chunks = pairs = ctx = 0
        for c in batch.prefills:
            n = len(c.token_ids)
            tokens += n
            chunks += 1
            pairs += n * c.start + n * (n + 1) // 2
            ctx += c.start + n
        decodes = batch.decodes  # decode_context: the sum of (start + 1) over them
        return cls(
            tokens, chunks, pairs, ctx, len(decodes), sum(map(_START, decodes)) + len(decodes)
        )

    @property
    def empty(self) -> bool:
        return not self.prefill_tokens and not self.decode_seqs

    def features(self) -> tuple[float, ...]:
        """The values ``FEATURES`` names (``base`` is 1)."""
        return (
            1.0,
            float(self.prefill_tokens),
            float(self.prefill_chunks),
            float(self.prefill_pairs),
            float(self.decode_seqs),
            float(self.decode_context),
        )

    def as_list(self) -> list[int]:
        return list(_COUNTS(self))

    @classmethod
    def from_list(cls, xs: Sequence[int]) -> PassWork:
        if not isinstance(xs, list) or len(xs) != 6:
            raise ValueError(f"PassWork needs a list of 6 counts, got {xs!r}")
        for x in xs:
            why = int_problem("a PassWork count", x, 0)
            if why is not None:
                raise ValueError(why)
        return cls(*xs)


def kind_of(work: PassWork, graph_max_rows: int) -> str | None:
    """The pass kind ``work`` runs as: decode-only passes of at most ``graph_max_rows``
    rows replay a graph; None for an empty pass (it runs nothing)."""
    if work.prefill_tokens:
        return "mixed" if work.decode_seqs else "prefill"
    if work.decode_seqs:
        return "decode_graph" if work.decode_seqs <= graph_max_rows else "decode_eager"
    return None


class PassModel(Protocol):
    """Milliseconds of a pass, and of the collective each data-parallel tick adds."""

    @property
    def collective_ms(self) -> float: ...

    def pass_ms(self, work: PassWork) -> float: ...


@dataclass(frozen=True)
class LinearPassModel:
    """Per pass kind, ``ms = sum(coefficient * feature)`` over ``FEATURES``.

    ``graph_max_rows`` > 0 says decode-only passes up to that many rows replay a
    CUDA graph (kind ``decode_graph``, which must then have coefficients).
    """

    coefficients: Mapping[str, Sequence[float]]
    graph_max_rows: int = 0
    collective_ms: float = 0.0

    def __post_init__(self) -> None:
        need = ["prefill", "mixed", "decode_eager"]
        if self.graph_max_rows > 0:
            need.append("decode_graph")
        for kind in need:
            if kind not in self.coefficients:
                raise ValueError(f"LinearPassModel has no coefficients for pass kind {kind!r}")
        for kind, cs in self.coefficients.items():
            if kind not in KINDS:
                raise ValueError(f"unknown pass kind {kind!r}; kinds are {KINDS}")
            if isinstance(cs, (str, bytes)) or len(cs) != len(FEATURES):
                raise ValueError(
                    f"pass kind {kind!r} needs {len(FEATURES)} coefficients, got {cs!r}"
                )
            for f, c in zip(FEATURES, cs, strict=True):
                # A negative or NaN coefficient would price a pass below zero or as nothing.
                why = number_problem(f"pass kind {kind!r} coefficient {f}", c, minimum=0.0)
                if why is not None:
                    raise ValueError(why)
        check_int("LinearPassModel", "graph_max_rows", self.graph_max_rows, 0)
        check_nonnegative_float("LinearPassModel", "collective_ms", self.collective_ms)

    def pass_ms(self, work: PassWork) -> float:
        kind = kind_of(work, self.graph_max_rows)
        if kind is None:
            return 0.0
        cs = self.coefficients[kind]
        return sum(c * f for c, f in zip(cs, work.features(), strict=True))


def tick_ms(model: PassModel, works: Sequence[PassWork]) -> float:
    """One data-parallel tick: the slowest rank's pass, then the all-reduce every rank waits on."""
    return max((model.pass_ms(w) for w in works), default=0.0) + model.collective_ms
