"""The aligned gate's per-tick vector: what each rank contributes, what the SUM reads.

Every rank contributes a fixed-size int vector, one ``all_reduce(SUM)`` combines them,
and every rank's ``densegate.impl.dp_gate.AlignedGate`` decides on the sum. Each slot is
a count under SUM, so the sum says how many ranks are in each situation without any
rank's own numbers leaving it (beyond its capped fill).

Vector layout (one int64 slot each; every slot is meaningful under SUM; an idle
rank still contributes ``[1, 0, 0, 0, 0, 0, 0, 0, 1]``, so a missing rank is detected)::

    [RANKS]                  1 from every rank          -> ranks that took part
    [WAITING_RANKS]          1 if admissible work waits  -> ranks with waiting work
    [WAITING_TOKENS]         admissible tokens, capped   -> aggregate fill
                             at dense_tokens
    [DECODE_SEQS]            sequences decoding now      -> decodes on all ranks
    [KV_PRESSURE_RANKS]      1 if KV over high watermark -> ranks under KV pressure
    [PARTIAL_PREFILL_RANKS]  1 if a chunked prefill is   -> ranks prefilling anyway
                             mid-flight
    [FILLED_RANKS]           1 if its capped tokens      -> ranks that fill a pass of
                             reach fill_tokens              their own
    [NO_DECODE_RANKS]        1 if work waits and nothing -> ranks no rule may hold
                             decodes                        (vLLM's own rule)
    [VACANT_RANKS]           1 if nothing waits and      -> ranks ALIGNED need not
                             nothing decodes                wait for

The rank runtime (``densegate.impl.dp.rank``) appends its own slots after the
gate's, so a tick costs one collective and nothing else::

    [ANY_WORK]               1 if the rank holds requests -> 0 with no arrivals left
                                                            ends the phase
    [PREV_PREFILL]           1 if its previous pass      -> aligned / mixed ticks
    [PREV_DECODE_ONLY]       prefilled / only decoded       counted everywhere
    [PREV_REASONS + r]       1 if its previous pass      -> the rules that let each
                             prefilled under reason r       prefill through
    [LOADS + rank]           tokens the rank still owes  -> the least-loaded router
                             (its own slot only)

This docstring is the one description of the vector; ``vector_size(world)``
gives its length.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import SupportsIndex

from densegate.impl.gate import Reason
from densegate.impl.validation import check_bool, check_int, index_int

__all__ = [
    "ANY_WORK",
    "DECODE_SEQS",
    "FILLED_RANKS",
    "KV_PRESSURE_RANKS",
    "LOADS",
    "NO_DECODE_RANKS",
    "PARTIAL_PREFILL_RANKS",
    "PREV_DECODE_ONLY",
    "PREV_PREFILL",
    "PREV_REASONS",
    "RANKS",
    "REASONS",
    "VACANT_RANKS",
    "VECTOR_SIZE",
    "WAITING_RANKS",
    "WAITING_TOKENS",
    "RankObservation",
    "ReducedObservation",
    "contribution",
    "vector_size",
]

RANKS = 0
WAITING_RANKS = 1
WAITING_TOKENS = 2
DECODE_SEQS = 3
KV_PRESSURE_RANKS = 4
PARTIAL_PREFILL_RANKS = 5
FILLED_RANKS = 6
NO_DECODE_RANKS = 7
VACANT_RANKS = 8
VECTOR_SIZE = 9
"""Length of the per-rank contribution and of the reduced vector."""

REASONS: tuple[Reason, ...] = tuple(Reason)
"""Decision reasons in the order of the ``PREV_REASONS`` slots."""
ANY_WORK = VECTOR_SIZE
PREV_PREFILL = VECTOR_SIZE + 1
PREV_DECODE_ONLY = VECTOR_SIZE + 2
PREV_REASONS = VECTOR_SIZE + 3
LOADS = PREV_REASONS + len(REASONS)


def vector_size(world_size: int) -> int:
    """Length of the per-tick vector (gate slots, runtime slots, one load per rank)."""
    return LOADS + world_size


_SLOTS = (
    "ranks",
    "waiting_ranks",
    "waiting_tokens",
    "decode_seqs",
    "kv_pressure_ranks",
    "partial_prefill_ranks",
    "filled_ranks",
    "no_decode_ranks",
    "vacant_ranks",
)


@dataclass(frozen=True, slots=True)
class RankObservation:
    """What one rank knows locally this tick; only its vector leaves the rank.

    ``waiting_tokens`` is what the rank could really admit if the tick fired
    (token budget, sequence slots, free KV blocks respected); ``to_vector``
    caps it at ``dense_tokens`` so no rank can make the aggregate look dense
    on its own, and says whether it reaches ``fill_tokens`` (the rank is filled).
    ``decode_seqs`` counts sequences that really decode.
    """

    waiting_tokens: int
    decode_seqs: int
    kv_pressure: bool = False
    partial_prefill: bool = False

    def __post_init__(self) -> None:
        check_int("RankObservation", "waiting_tokens", self.waiting_tokens, 0)
        check_int("RankObservation", "decode_seqs", self.decode_seqs, 0)
        check_bool("RankObservation", "kv_pressure", self.kv_pressure)
        check_bool("RankObservation", "partial_prefill", self.partial_prefill)

    def to_vector(self, dense_tokens: int, fill_tokens: int) -> list[int]:
        """This rank's contribution to the SUM all-reduce (see the module's layout)."""
        check_int("RankObservation.to_vector", "dense_tokens", dense_tokens, 1)
        check_int("RankObservation.to_vector", "fill_tokens", fill_tokens, 1)
        if fill_tokens > dense_tokens:
            raise ValueError(
                f"RankObservation.to_vector: fill_tokens={fill_tokens} exceeds "
                f"dense_tokens={dense_tokens}"
            )
        return contribution(
            min(self.waiting_tokens, dense_tokens),
            self.decode_seqs,
            self.kv_pressure,
            self.partial_prefill,
            fill_tokens,
        )


def contribution(
    capped: int, decodes: int, kv_pressure: bool, partial: bool, fill_tokens: int
) -> list[int]:
    """The gate's slots of one rank's vector, from its capped fill and decode count: the
    one place that says what each slot holds (the rank loop calls it on its hot path)."""
    waits = 1 if capped > 0 else 0
    return [1, waits, capped, decodes, 1 if kv_pressure else 0, 1 if partial else 0,
            1 if capped >= fill_tokens else 0, 1 if waits and not decodes else 0,
            1 if not waits and not decodes else 0]  # fmt: skip


@dataclass(frozen=True, slots=True)
class ReducedObservation:
    """The SUM of every rank's vector: the only input of the decision.

    ``partial_prefill_ranks`` does not change the decision (continuing chunks
    are not new admissions); the runtime reports it to explain mixed ticks. The
    three per-rank counts default to 0 (no rank filled, none without decodes, none
    vacant) so a sum of the first six slots alone still reads.
    """

    ranks: int
    waiting_ranks: int
    waiting_tokens: int
    decode_seqs: int
    kv_pressure_ranks: int = 0
    partial_prefill_ranks: int = 0
    filled_ranks: int = 0
    no_decode_ranks: int = 0
    vacant_ranks: int = 0

    def __post_init__(self) -> None:
        for name in _SLOTS:
            check_int("ReducedObservation", name, getattr(self, name), 0)
        check_int("ReducedObservation", "ranks", self.ranks, 1)
        for name in ("waiting_ranks", "kv_pressure_ranks", "partial_prefill_ranks"):
            if getattr(self, name) > self.ranks:
                raise ValueError(
                    f"ReducedObservation.{name} must be <= ranks={self.ranks}, "
                    f"got {getattr(self, name)}"
                )
        # Every waiting rank contributes >= 1 token and only waiting ranks contribute.
        if self.waiting_tokens < self.waiting_ranks or (self.waiting_ranks == 0) != (
            self.waiting_tokens == 0
        ):
            raise ValueError(
                f"ReducedObservation.waiting_tokens={self.waiting_tokens} is inconsistent "
                f"with waiting_ranks={self.waiting_ranks}"
            )
        # Filled and no-decode ranks are waiting ranks; vacant ones are not.
        for name, most in (
            ("filled_ranks", self.waiting_ranks),
            ("no_decode_ranks", self.waiting_ranks),
            ("vacant_ranks", self.ranks - self.waiting_ranks),
        ):
            if getattr(self, name) > most:
                raise ValueError(
                    f"ReducedObservation.{name}={getattr(self, name)} is inconsistent with "
                    f"waiting_ranks={self.waiting_ranks} of ranks={self.ranks}"
                )

    @classmethod
    def from_sum(cls, vector: Iterable[SupportsIndex], world_size: int) -> ReducedObservation:
        """Read the all-reduced vector (e.g. ``tensor.tolist()``); checks every rank took part."""
        check_int("ReducedObservation.from_sum", "world_size", world_size, 1)
        values = list(vector)
        if len(values) != VECTOR_SIZE:
            raise ValueError(
                f"ReducedObservation.from_sum: vector must have {VECTOR_SIZE} slots, "
                f"got {len(values)}"
            )
        slots = zip(_SLOTS, values, strict=True)
        ints = [index_int(f"ReducedObservation.{name}", v) for name, v in slots]
        if ints[RANKS] != world_size:
            raise ValueError(
                f"ReducedObservation.ranks must equal world_size={world_size}, got {ints[RANKS]}"
            )
        return cls(*ints)

    def to_vector(self) -> list[int]:
        return [getattr(self, name) for name in _SLOTS]
