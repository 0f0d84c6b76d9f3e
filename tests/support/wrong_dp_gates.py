"""Someone's own aligned gate, written from the rules, and wrong twins of it, one rule each.

``RuleAlignedGate`` is written independently of ``densegate.impl.dp_gate.AlignedGate``
(from the rule order its docstring gives), with one hook per rule; every other class here
changes one thing, the way a port of the gate into an engine goes wrong. The aligned
conformance kit (``densegate conform --aligned``) must pass the first and name what each
twin breaks; importable by module:factory for the command line.
"""

from __future__ import annotations

from typing import ClassVar

from densegate.impl.dp_gate import AlignedGateConfig, ReducedObservation
from densegate.impl.gate import Decision, Reason


class RuleAlignedGate:
    """EMPTY, DISABLED, NO_DECODE, KV_PRESSURE, DENSE, PACED, ALIGNED, STALL, BUDGET, HOLD;
    a paced tick in the busy wait goes on to ALIGNED."""

    def __init__(self, config: AlignedGateConfig, world_size: int) -> None:
        self.B, self.K, self.T = config.dense_tokens, config.max_hold_passes, config.fill_tokens
        self.N, self.enabled, self.S = world_size, config.enabled, config.stall_ticks
        self.kv, self.A = config.kv_pressure_valve, config.align_ticks
        self.pace, self.surge = config.pace_tokens, config.surge_tokens
        self.busy = config.busy_decodes
        self.h, self.last_fill, self.grew_at = 0, 0, 0

    @property
    def hold_passes(self) -> int:
        return self.h

    def decide(self, r: ReducedObservation, tick: int) -> Decision:
        if r.waiting_tokens > self.last_fill:
            self.grew_at = tick
        self.last_fill = r.waiting_tokens
        if r.waiting_ranks == 0:
            return self.fire(Reason.EMPTY)
        if not self.enabled:
            return self.fire(Reason.DISABLED)
        if self.no_decode(r):
            return self.fire(Reason.NO_DECODE)
        if self.kv and r.kv_pressure_ranks > 0:
            return self.fire(Reason.KV_PRESSURE)
        if self.dense(r):
            return self.fire(Reason.DENSE, self.dense_cap())
        if self.pace is not None and not self.busy_wait(r):
            return self.paced(r, tick)
        return self.unpaced(r, tick)

    def busy_wait(self, r: ReducedObservation) -> bool:
        """Batches at ``busy_decodes`` or over, some rank decoding with nothing waiting, and
        every waiting rank decoding."""
        unaligned = r.waiting_ranks + r.vacant_ranks < self.N
        return (self.busy is not None and unaligned and r.decode_seqs >= self.busy
                and r.no_decode_ranks == 0)  # fmt: skip

    def fire(self, reason: Reason, cap: int | None = None) -> Decision:
        self.h = 0
        return Decision(True, reason, cap)

    def no_decode(self, r: ReducedObservation) -> bool:
        return r.decode_seqs == 0 or (r.no_decode_ranks > 0 and self.pace is None)

    def everyone_dense(self, r: ReducedObservation) -> bool:
        return r.waiting_ranks == self.N and r.waiting_tokens >= self.T * self.N

    def dense(self, r: ReducedObservation) -> bool:
        return self.everyone_dense(r) or (r.filled_ranks > 0 and self.pace is None)

    def dense_cap(self) -> int | None:
        return None

    def paced(self, r: ReducedObservation, tick: int) -> Decision:
        return self.fire(Reason.PACED, self.cap(r))

    def cap(self, r: ReducedObservation) -> int | None:
        if r.filled_ranks > 0 and self.surge is not None:
            return self.surge
        return self.pace

    def unpaced(self, r: ReducedObservation, tick: int) -> Decision:
        if self.aligned(r):
            return self.fire(Reason.ALIGNED)
        if self.stalled(tick):
            return self.fire(Reason.STALL)
        if self.spent():
            return self.fire(Reason.BUDGET)
        self.h += 1
        return Decision(False, Reason.HOLD)

    def aligned(self, r: ReducedObservation) -> bool:
        ready = r.waiting_ranks + r.vacant_ranks == self.N
        return self.A is not None and self.h >= self.A and ready

    def stalled(self, tick: int) -> bool:
        return self.S > 0 and tick - self.grew_at >= self.S

    def spent(self) -> bool:
        return self.h + 1 >= self.K


class OldFillRule(RuleAlignedGate):
    """DENSE only once every rank waits with ``world * fill_tokens`` in all: one filled rank
    beside cold ones is held (the rule before the per-rank fill)."""

    def dense(self, r: ReducedObservation) -> bool:
        return self.everyone_dense(r)


class HoldsNoDecodeRank(RuleAlignedGate):
    """The tail escape on the aggregate only: a waiting rank with no decode of its own is held
    while another rank decodes."""

    def no_decode(self, r: ReducedObservation) -> bool:
        return r.decode_seqs == 0


class AlignedWaitsForVacant(RuleAlignedGate):
    """ALIGNED only once every rank waits: a vacant rank (nothing waiting, nothing decoding)
    keeps the release shut."""

    def aligned(self, r: ReducedObservation) -> bool:
        return self.A is not None and self.h >= self.A and r.waiting_ranks == self.N


class PacedCapPerWorld(RuleAlignedGate):
    """A PACED fire capped at ``pace_tokens`` per rank summed over the world, not per rank."""

    def cap(self, r: ReducedObservation) -> int | None:
        return None if self.pace is None else self.pace * self.N


class SurgeIgnored(RuleAlignedGate):
    """Reads ``pace_tokens`` but not ``surge_tokens``: a tick with a filled rank keeps the
    pace cap, so that rank's dense pass waits ``B / pace_tokens`` ticks."""

    def cap(self, r: ReducedObservation) -> int | None:
        return self.pace


class SurgeOnOwnRank(RuleAlignedGate):
    """The surge judged on the aggregate fill reaching one rank's fill threshold (what a rank
    sees of its own queue), not on a rank filled on its own."""

    def cap(self, r: ReducedObservation) -> int | None:
        if r.waiting_tokens >= self.T and self.surge is not None:
            return self.surge
        return self.pace


class PacedUncapped(RuleAlignedGate):
    """A PACED fire without its cap."""

    def cap(self, r: ReducedObservation) -> int | None:
        return None


class DenseCappedInPacedMode(RuleAlignedGate):
    """The paced mode's cap on its DENSE fires too (the one uncapped release)."""

    def dense_cap(self) -> int | None:
        return self.pace


class PacedHolds(RuleAlignedGate):
    """The paced mode keeps its per-rank rules but releases as the plain gate does: it holds,
    and fires ALIGNED, STALL or BUDGET, where the paced mode fires PACED."""

    def paced(self, r: ReducedObservation, tick: int) -> Decision:
        return self.unpaced(r, tick)


class BudgetOffByOne(RuleAlignedGate):
    """Spends the budget one tick late: K holds in a row."""

    def spent(self) -> bool:
        return self.h >= self.K


class DisabledIgnored(RuleAlignedGate):
    """Gates even when the config turns it off."""

    def __init__(self, config: AlignedGateConfig, world_size: int) -> None:
        super().__init__(config, world_size)
        self.enabled = True


class StallLate(RuleAlignedGate):
    """The STALL valve one tick late (the fill flat for more than S ticks): a valve that fires
    later, which only agreement can see."""

    def stalled(self, tick: int) -> bool:
        return self.S > 0 and tick - self.grew_at > self.S


class SharedCounter(RuleAlignedGate):
    """Keeps its counter on the class, so the ranks' copies in one process share it: each
    copy's hold counts for all."""

    shared: ClassVar[list[int]] = [0]

    @property
    def hold_passes(self) -> int:
        return self.shared[0] % self.K

    def fire(self, reason: Reason, cap: int | None = None) -> Decision:
        self.shared[0] = self.h = 0
        return Decision(True, reason, cap)

    def unpaced(self, r: ReducedObservation, tick: int) -> Decision:
        self.h = self.shared[0] % self.K
        dec = super().unpaced(r, tick)
        if not dec.fire:
            self.shared[0] += 1
        return dec


class RaisesOnWideWorld(RuleAlignedGate):
    """Fails on a world of more than four ranks (a fixed-size buffer)."""

    def decide(self, r: ReducedObservation, tick: int) -> Decision:
        if self.N > 4:
            raise IndexError(f"rank buffer holds 4 ranks, got {self.N}")
        return super().decide(r, tick)


def returns_none(config: AlignedGateConfig, world_size: int) -> None:
    """A factory that forgets to return its gate."""
