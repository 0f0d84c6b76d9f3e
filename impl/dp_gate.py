"""The aligned gate: one prefill decision per tick, taken identically on every DP rank.

With data-parallel ranks, a prefill on one rank stalls every other rank in the
step's collectives, so ranks must fire together. The original paired a per-rank
gate with a cross-rank delayer, each with its own budget (worst-case hold: their
sum) and a wall clock that differed between ranks. Here every rank contributes a
fixed-size int vector, one ``all_reduce(SUM)`` combines them, and every rank
runs the same pure function of the reduced vector, its own (identical) state and
a tick number that is identical on all ranks. One counter, one budget.

This module is pure: no torch.distributed, no clock, no z3. The collective lives
with the rank runtime; ``densegate.spec.dp_gate`` specifies this machine and the
tests keep the two honest against each other.

Vector layout (one int64 slot each; every slot is meaningful under SUM; an idle
rank still contributes ``[1, 0, 0, 0, 0, 0]``, so a missing rank is detected)::

    [RANKS]                  1 from every rank          -> ranks that took part
    [WAITING_RANKS]          1 if admissible work waits  -> ranks with waiting work
    [WAITING_TOKENS]         admissible tokens, capped   -> aggregate fill
                             at dense_tokens
    [DECODE_SEQS]            sequences decoding now      -> decodes on all ranks
    [KV_PRESSURE_RANKS]      1 if KV over high watermark -> ranks under KV pressure
    [PARTIAL_PREFILL_RANKS]  1 if a chunked prefill is   -> ranks prefilling anyway
                             mid-flight

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

import math
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction
from typing import NamedTuple, SupportsIndex

from densegate.impl.gate import Decision, Reason
from densegate.impl.settings import validate
from densegate.impl.validation import check_bool, check_int, exact_fraction, index_int

__all__ = [
    "ANY_WORK",
    "DECODE_SEQS",
    "KV_PRESSURE_RANKS",
    "LOADS",
    "PARTIAL_PREFILL_RANKS",
    "PREV_DECODE_ONLY",
    "PREV_PREFILL",
    "PREV_REASONS",
    "RANKS",
    "REASONS",
    "VECTOR_SIZE",
    "WAITING_RANKS",
    "WAITING_TOKENS",
    "AlignedGate",
    "AlignedGateConfig",
    "AlignedState",
    "RankObservation",
    "ReducedObservation",
    "vector_size",
]

RANKS = 0
WAITING_RANKS = 1
WAITING_TOKENS = 2
DECODE_SEQS = 3
KV_PRESSURE_RANKS = 4
PARTIAL_PREFILL_RANKS = 5
VECTOR_SIZE = 6
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
)

_DECISIONS: dict[Reason, Decision] = {r: Decision(r is not Reason.HOLD, r) for r in Reason}


@dataclass(frozen=True, slots=True)
class RankObservation:
    """What one rank knows locally this tick; only its vector leaves the rank.

    ``waiting_tokens`` is what the rank could really admit if the tick fired
    (token budget, sequence slots, free KV blocks respected); ``to_vector``
    caps it at ``dense_tokens`` so no rank can make the aggregate look dense
    on its own. ``decode_seqs`` counts sequences that really decode.
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

    def to_vector(self, dense_tokens: int) -> list[int]:
        """This rank's contribution to the SUM all-reduce (see the module's layout)."""
        check_int("RankObservation.to_vector", "dense_tokens", dense_tokens, 1)
        capped = min(self.waiting_tokens, dense_tokens)
        return [
            1,
            int(capped > 0),
            capped,
            self.decode_seqs,
            int(self.kv_pressure),
            int(self.partial_prefill),
        ]


@dataclass(frozen=True, slots=True)
class ReducedObservation:
    """The SUM of every rank's vector: the only input of the decision.

    ``partial_prefill_ranks`` does not change the decision (continuing chunks
    are not new admissions); the runtime reports it to explain mixed ticks.
    """

    ranks: int
    waiting_ranks: int
    waiting_tokens: int
    decode_seqs: int
    kv_pressure_ranks: int = 0
    partial_prefill_ranks: int = 0

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


@dataclass(frozen=True, slots=True)
class AlignedGateConfig:
    """Parameters shared by every rank (they must be identical everywhere).

    ``target_fill`` is the fraction of a full batch per rank (``dense_tokens``)
    the aggregate must reach to fire DENSE (1.0: every rank has a full batch).
    ``stall_ticks`` (0 = off) fires once the aggregate fill has not grown for
    that many ticks: holding longer cannot make the batch denser. The KV valve
    fires while any rank is over its KV high watermark: there holding only lets
    decodes grow into the blocks the waiting work needs. ``align_ticks`` (None =
    off) fires ALIGNED once every rank has waiting work and the episode has been
    held that many ticks (0: at once): the prefill tick is then aligned, and
    holding longer trades every waiting request's TTFT for fill alone. With the
    defaults and one rank the gate is exactly ``PrefillGate``.

    ``pace_tokens`` (None = off) is the paced mode: the gate never holds while work
    waits; a tick where every rank can fill a dense pass fires DENSE uncapped, any
    other tick with waiting work and decodes fires PACED with ``Decision.cap =
    pace_tokens`` on every rank, so no rank's prefill stretches the tick past the
    cost model's ridge (the cap comes from the cost model: ``densegate tune --dp``).
    ALIGNED, STALL and BUDGET are then never reached.
    """

    dense_tokens: int
    max_hold_passes: int = 30
    enabled: bool = True
    target_fill: float | Fraction = 1.0
    stall_ticks: int = 0
    kv_pressure_valve: bool = False
    align_ticks: int | None = None
    pace_tokens: int | None = None

    def __post_init__(self) -> None:
        validate("AlignedGateConfig", self)  # each field's range: densegate.impl.settings

    @property
    def fill_tokens(self) -> int:
        """Per-rank fill threshold ``ceil(target_fill * dense_tokens)``, in [1, dense_tokens]."""
        exact = exact_fraction("AlignedGateConfig", "target_fill", self.target_fill)
        return math.ceil(exact * self.dense_tokens)


class AlignedState(NamedTuple):
    """Everything the gate remembers; equal on every rank after every tick."""

    hold_passes: int
    last_fill: int
    grew_at: int


class AlignedGate:
    """One rank's copy of the aligned gate; every rank's copy decides alike.

    Determinism across ranks rests on three things only: the same config, the
    same reduced vector and the same tick. Call ``decide`` exactly once per
    tick on every rank (and ``reset`` on all ranks or none).
    """

    __slots__ = (
        "_align",
        "_budget",
        "_config",
        "_decisions",
        "_dense",
        "_enabled",
        "_fill_target",
        "_grew_at",
        "_h",
        "_kv_valve",
        "_last_fill",
        "_paced",
        "_stall",
        "_world",
    )

    def __init__(self, config: AlignedGateConfig, world_size: int) -> None:
        if not isinstance(config, AlignedGateConfig):
            raise TypeError(f"AlignedGate needs an AlignedGateConfig, got {type(config).__name__}")
        check_int("AlignedGate", "world_size", world_size, 1)
        self._config = config
        self._world = world_size
        self._dense = config.dense_tokens
        self._fill_target = config.fill_tokens * world_size
        self._budget = config.max_hold_passes
        self._enabled = config.enabled
        self._stall = config.stall_ticks
        self._kv_valve = config.kv_pressure_valve
        self._align = -1 if config.align_ticks is None else config.align_ticks
        pace = config.pace_tokens
        self._paced = pace is not None
        self._decisions = dict(_DECISIONS)  # PACED carries the cap
        self._decisions[Reason.PACED] = Decision(True, Reason.PACED, pace)
        self._h = 0
        self._last_fill = 0
        self._grew_at = 0

    @property
    def config(self) -> AlignedGateConfig:
        return self._config

    @property
    def world_size(self) -> int:
        return self._world

    @property
    def hold_passes(self) -> int:
        """Ticks the current waiting episode has been held (0 <= h < max_hold_passes)."""
        return self._h

    @property
    def state(self) -> AlignedState:
        """The whole memory; ranks may compare it to detect divergence."""
        return AlignedState(self._h, self._last_fill, self._grew_at)

    def reset(self) -> None:
        """Forget the hold episode and the stall memory (on every rank at once)."""
        self._h = 0
        self._last_fill = 0
        self._grew_at = 0

    def contribution(self, obs: RankObservation) -> list[int]:
        """This rank's vector for the all-reduce, capped with this gate's ``dense_tokens``."""
        return obs.to_vector(self._dense)

    def decide(self, reduced: ReducedObservation, tick: int) -> Decision:
        """Rules in order: EMPTY, DISABLED, NO_DECODE, KV_PRESSURE, DENSE, PACED (paced
        mode), ALIGNED, STALL, BUDGET, HOLD."""
        if reduced.ranks != self._world:
            raise ValueError(
                f"ReducedObservation.ranks must equal world_size={self._world}, got {reduced.ranks}"
            )
        if reduced.waiting_tokens > reduced.waiting_ranks * self._dense:
            raise ValueError(
                f"ReducedObservation.waiting_tokens={reduced.waiting_tokens} exceeds "
                f"waiting_ranks * dense_tokens: some rank did not cap its contribution"
            )
        check_int("AlignedGate.decide", "tick", tick, 0)
        return self._rules(
            reduced.waiting_ranks,
            reduced.waiting_tokens,
            reduced.decode_seqs,
            reduced.kv_pressure_ranks,
            tick,
        )

    def _rules(
        self, waiting_ranks: int, fill: int, decodes: int, pressured: int, tick: int
    ) -> Decision:
        # Stall memory first: it tracks the fill every tick, whatever is decided.
        if fill > self._last_fill:
            self._grew_at = tick
        self._last_fill = fill
        if waiting_ranks == 0:
            reason = Reason.EMPTY
        elif not self._enabled:
            reason = Reason.DISABLED
        elif decodes == 0:
            reason = Reason.NO_DECODE
        elif self._kv_valve and pressured > 0:
            reason = Reason.KV_PRESSURE
        elif waiting_ranks == self._world and fill >= self._fill_target:
            reason = Reason.DENSE
        elif self._paced:
            reason = Reason.PACED
        elif self._aligned(waiting_ranks):
            reason = Reason.ALIGNED
        elif self._stall > 0 and tick - self._grew_at >= self._stall:
            reason = Reason.STALL
        elif self._h + 1 >= self._budget:
            reason = Reason.BUDGET
        else:
            self._h += 1
            return _DECISIONS[Reason.HOLD]
        self._h = 0
        return self._decisions[reason]

    def _aligned(self, waiting_ranks: int) -> bool:
        """ALIGNED's test: the release is on, the episode has been held ``align_ticks``
        ticks, and every rank has waiting work (so the prefill tick is aligned)."""
        return self._align >= 0 and self._h >= self._align and waiting_ranks == self._world

    def __repr__(self) -> str:
        return f"AlignedGate({self._config!r}, world_size={self._world}, state={self.state})"
