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

The vector itself (its slots, each rank's contribution, the reduced sum) lives in
``densegate.impl.dp_vector``; its names are re-exported here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import NamedTuple

from densegate.impl.dp_vector import (
    ANY_WORK,
    DECODE_SEQS,
    FILLED_RANKS,
    KV_PRESSURE_RANKS,
    LOADS,
    NO_DECODE_RANKS,
    PARTIAL_PREFILL_RANKS,
    PREV_DECODE_ONLY,
    PREV_PREFILL,
    PREV_REASONS,
    RANKS,
    REASONS,
    VACANT_RANKS,
    VECTOR_SIZE,
    WAITING_RANKS,
    WAITING_TOKENS,
    RankObservation,
    ReducedObservation,
    vector_size,
)
from densegate.impl.gate import Decision, Reason
from densegate.impl.settings import validate
from densegate.impl.validation import check_int, exact_fraction

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
    "AlignedGate",
    "AlignedGateConfig",
    "AlignedState",
    "RankObservation",
    "ReducedObservation",
    "vector_size",
]

_DECISIONS: dict[Reason, Decision] = {r: Decision(r is not Reason.HOLD, r) for r in Reason}


@dataclass(frozen=True, slots=True)
class AlignedGateConfig:
    """Parameters shared by every rank (they must be identical everywhere).

    ``target_fill`` is the fraction of a full batch (``dense_tokens``) that fills a
    rank: DENSE fires once any rank is filled (that rank's pass is dense on its own; a
    cold rank's emptiness never holds a hot one back) or every rank waits with the
    aggregate at ``target_fill`` per rank. A rank with waiting work and no decode is
    never held (NO_DECODE), as vLLM's own DP rule never defers such a rank.
    ``stall_ticks`` (0 = off) fires once the aggregate fill has not grown for
    that many ticks: holding longer cannot make the batch denser. The KV valve
    fires while any rank is over its KV high watermark: there holding only lets
    decodes grow into the blocks the waiting work needs. ``align_ticks`` (None =
    off) fires ALIGNED once every rank that decodes has waiting work (a rank with
    neither is vacant: nothing to align) and the episode has been held that many
    ticks (0: at once): the prefill tick is then aligned, and
    holding longer trades every waiting request's TTFT for fill alone. With the
    defaults and one rank the gate is exactly ``PrefillGate``.

    ``pace_tokens`` (None = off) is the paced mode: the gate never holds while work
    waits; a tick where every rank waits with the aggregate at ``target_fill`` per rank
    fires DENSE uncapped, any other tick with waiting work and decodes fires PACED
    (no-decode ranks included) with ``Decision.cap =
    pace_tokens`` on every rank, so no rank's prefill stretches the tick past the
    cost model's ridge (the cap comes from the cost model: ``densegate tune --dp``).
    ALIGNED, STALL and BUDGET are then never reached but in the busy wait.
    ``surge_tokens`` (None = off: the cap stays ``pace_tokens``) is the cap of a PACED
    tick where some rank is filled: that rank holds a dense pass's worth of prefill,
    which ``pace_tokens`` would take ``dense_tokens / pace_tokens`` ticks to clear while
    its requests' first tokens wait; it needs ``pace_tokens`` and is at least it.
    ``busy_decodes`` (None = off) is the paced mode's busy wait: where a mixed tick costs
    the decodes a whole pass (an engine whose prefill does not ride along its decodes),
    a PACED tick whose release would be unaligned (some rank that decodes has nothing
    waiting) while the ranks decode at least ``busy_decodes`` requests, none of the
    waiting ranks without decodes, goes to the hold mode's rules instead (STALL,
    BUDGET, HOLD: at most K - 1 held in a row).
    """

    dense_tokens: int
    max_hold_passes: int = 30
    enabled: bool = True
    target_fill: float | Fraction = 1.0
    stall_ticks: int = 0
    kv_pressure_valve: bool = False
    align_ticks: int | None = None
    pace_tokens: int | None = None
    surge_tokens: int | None = None
    busy_decodes: int | None = None

    def __post_init__(self) -> None:
        validate("AlignedGateConfig", self)  # each field's range, and surge >= pace

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
        "_busy",
        "_config",
        "_decisions",
        "_dense",
        "_enabled",
        "_fill",
        "_fill_target",
        "_grew_at",
        "_h",
        "_kv_valve",
        "_last_fill",
        "_paced",
        "_stall",
        "_surged",
        "_world",
    )

    def __init__(self, config: AlignedGateConfig, world_size: int) -> None:
        if not isinstance(config, AlignedGateConfig):
            raise TypeError(f"AlignedGate needs an AlignedGateConfig, got {type(config).__name__}")
        check_int("AlignedGate", "world_size", world_size, 1)
        self._config = config
        self._world = world_size
        self._dense = config.dense_tokens
        self._fill = config.fill_tokens
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
        surge = pace if config.surge_tokens is None else config.surge_tokens
        self._surged = Decision(True, Reason.PACED, surge)  # a PACED tick with a filled rank
        self._busy = 0 if config.busy_decodes is None else config.busy_decodes
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
        return obs.to_vector(self._dense, self._fill)

    def decide(self, reduced: ReducedObservation, tick: int) -> Decision:
        """Rules in order: EMPTY, DISABLED, NO_DECODE, KV_PRESSURE, DENSE, PACED (paced
        mode, but in the busy wait), ALIGNED, STALL, BUDGET, HOLD."""
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
            reduced.filled_ranks,
            reduced.no_decode_ranks,
            reduced.vacant_ranks,
        )

    def _rules(
        self,
        waiting_ranks: int,
        fill: int,
        decodes: int,
        pressured: int,
        tick: int,
        filled: int,
        no_decode: int,
        vacant: int,
    ) -> Decision:
        # Stall memory first: it tracks the fill every tick, whatever is decided.
        if fill > self._last_fill:
            self._grew_at = tick
        self._last_fill = fill
        if waiting_ranks == 0:
            reason = Reason.EMPTY
        elif not self._enabled:
            reason = Reason.DISABLED
        elif decodes == 0 or (no_decode > 0 and not self._paced):
            reason = Reason.NO_DECODE
        elif self._kv_valve and pressured > 0:
            reason = Reason.KV_PRESSURE
        elif (waiting_ranks == self._world and fill >= self._fill_target) or (
            filled > 0 and not self._paced
        ):
            reason = Reason.DENSE
        elif self._paced and not self._busy_wait(waiting_ranks + vacant, decodes, no_decode):
            reason = Reason.PACED
        elif self._aligned(waiting_ranks + vacant):
            reason = Reason.ALIGNED
        elif self._stall > 0 and tick - self._grew_at >= self._stall:
            reason = Reason.STALL
        elif self._h + 1 >= self._budget:
            reason = Reason.BUDGET
        else:
            self._h += 1
            return _DECISIONS[Reason.HOLD]
        self._h = 0
        if filled > 0 and reason is Reason.PACED:
            return self._surged  # some rank holds a dense pass's worth: the surge cap
        return self._decisions[reason]

    def _busy_wait(self, ready: int, decodes: int, no_decode: int) -> bool:
        """The busy wait's test: it is on, some rank is neither waiting nor vacant (the
        release would be unaligned), the ranks decode at least ``busy_decodes`` requests
        and every waiting rank decodes."""
        return self._busy > 0 and decodes >= self._busy and ready < self._world and no_decode == 0

    def _aligned(self, waiting_ranks: int) -> bool:
        """ALIGNED's test: the release is on, the episode has been held ``align_ticks``
        ticks, and every rank is waiting or vacant (so the prefill tick is aligned)."""
        return self._align >= 0 and self._h >= self._align and waiting_ranks == self._world

    def __repr__(self) -> str:
        return f"AlignedGate({self._config!r}, world_size={self._world}, state={self.state})"
