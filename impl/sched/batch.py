"""What the scheduler hands a runner each pass, and the runner interface.

Kept apart from the scheduler so a model runner depends on nothing but this
file: a pass is a list of per-sequence chunks over a paged KV cache.
"""

from __future__ import annotations

import enum
import operator
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from densegate.impl.validation import check_int

__all__ = ["BatchKind", "KVLayout", "NullRunner", "Runner", "ScheduledBatch", "SeqChunk"]

_SAMPLE = operator.attrgetter("sample")


class BatchKind(enum.Enum):
    """What a pass does: it decides whether a GPU decode graph can run it."""

    EMPTY = "empty"
    PREFILL = "prefill"
    DECODE = "decode"
    MIXED = "mixed"


@dataclass(frozen=True, slots=True)
class KVLayout:
    """Geometry of the paged KV cache shared by the block manager and the runner.

    Slot ``s`` of the flat cache holds position ``p`` of a sequence when
    ``s == block_table[p // block_size] * block_size + p % block_size``. A runner
    may reserve one extra slot past ``num_blocks * block_size`` for padded rows.
    """

    block_size: int
    num_blocks: int
    max_model_len: int
    max_num_seqs: int

    @property
    def num_slots(self) -> int:
        return self.block_size * self.num_blocks

    @property
    def max_blocks_per_seq(self) -> int:
        return -(-self.max_model_len // self.block_size)


@dataclass(slots=True)
class SeqChunk:
    """One sequence's work in a pass.

    ``token_ids`` are fed at positions ``start .. start + len(token_ids) - 1``;
    ``start`` tokens of the sequence are already in the KV cache. ``block_table``
    covers every position fed so far and is the scheduler's live list: read it,
    never keep or mutate it. When ``sample`` is set, the chunk reaches the end of
    the sequence and the runner returns the next token for it.
    """

    seq_id: int
    token_ids: Sequence[int]
    start: int
    block_table: Sequence[int]
    is_prefill: bool
    sample: bool


@dataclass(slots=True)
class ScheduledBatch:
    """One scheduler pass: prefill chunks first, then one-token decode chunks."""

    index: int
    prefills: list[SeqChunk] = field(default_factory=list)
    decodes: list[SeqChunk] = field(default_factory=list)

    @property
    def kind(self) -> BatchKind:
        if self.prefills:
            return BatchKind.MIXED if self.decodes else BatchKind.PREFILL
        return BatchKind.DECODE if self.decodes else BatchKind.EMPTY

    @property
    def num_prefill_tokens(self) -> int:
        return sum(len(c.token_ids) for c in self.prefills)

    def sampled(self) -> list[SeqChunk]:
        """The chunks the runner must return a token for, in the returned order."""
        return [c for c in self.prefills if c.sample] + [c for c in self.decodes if c.sample]


@runtime_checkable
class Runner(Protocol):
    """Executes a pass and returns one sampled token per ``batch.sampled()`` chunk."""

    def execute(self, batch: ScheduledBatch) -> Sequence[int]: ...


class NullRunner:
    """Executes nothing: one fixed token per sampled chunk, for scheduling at scale."""

    __slots__ = ("token",)

    def __init__(self, token: int = 0) -> None:
        check_int("NullRunner", "token", token, 0)
        self.token = token

    def execute(self, batch: ScheduledBatch) -> Sequence[int]:
        return [self.token] * (sum(map(_SAMPLE, batch.prefills)) + sum(map(_SAMPLE, batch.decodes)))
