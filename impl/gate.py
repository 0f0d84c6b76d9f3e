"""The dense prefill gate: the one runtime implementation of the proved machine.

While decodes run, an under-full prefill pass interrupts every decode (and on a
GPU knocks decode out of its CUDA graph), so the gate holds new prefills until a
pass can be filled. Two valves keep that from starving anyone: the tail escape
(never hold when nothing decodes) and the pass budget (fire after K held passes).
An optional third, STALL (``stall_passes`` > 0, off by default), fires once the
waiting fill has stopped growing for that many passes, so a burst's last
requests do not wait out the whole budget when nothing new can fill the pass.

The machine is specified in ``densegate.spec.gate`` (with the valve:
``densegate.spec.stall_gate``) and proved there; this module
must never import it (engines embed ``densegate.impl`` without z3). Tests keep
the two honest against each other.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from densegate.impl.validation import check_bool, check_int

__all__ = ["Decision", "GateConfig", "GateInput", "GatePolicy", "PrefillGate", "Reason"]


class Reason(enum.Enum):
    """Why the gate decided as it did, in rule order."""

    EMPTY = "empty"
    """Nothing is waiting: firing admits nothing, and the hold episode ends."""
    DISABLED = "disabled"
    """The gate is off: legacy prefill-first behaviour."""
    NO_DECODE = "no_decode"
    """Tail escape: nothing decodes this pass, so holding would idle the pass."""
    DENSE = "dense"
    """The pass can be filled to ``dense_tokens``."""
    BUDGET = "budget"
    """The waiting episode has been held ``max_hold_passes - 1`` passes already."""
    HOLD = "hold"
    """Under-full prefill while decodes run: keep decoding, admit nothing new."""
    KV_PRESSURE = "kv_pressure"
    """Aligned gate only: a rank's KV usage is over its high watermark, so holding cannot help."""
    STALL = "stall"
    """The valve: the waiting fill stopped growing for ``stall_passes`` passes
    (``PrefillGate`` with the valve on) or the aggregate fill for ``stall_ticks`` ticks
    (aligned gate)."""
    ALIGNED = "aligned"
    """Aligned gate only: every rank has waiting work and the episode has been held
    ``align_ticks`` ticks, so the tick is aligned and holding only waits for fill."""
    PACED = "paced"
    """Aligned gate, paced mode only: work waits and not every rank can fill a dense
    pass, so the tick fires with the pace cap (``Decision.cap``) instead of holding."""

    # A member is equal only to itself: its identity is its hash, in C (Enum's hashes the
    # name in Python), for the tables keyed by reason that every pass reads.
    __hash__ = object.__hash__


@dataclass(frozen=True, slots=True)
class Decision:
    """The gate's verdict for one pass. ``fire`` is False only for ``Reason.HOLD``.

    ``cap`` (None: none) limits the prefill tokens a FIRE runs this pass: the aligned
    gate's paced mode sets it, identically on every rank (``densegate.impl.sched.cap``).
    """

    fire: bool
    reason: Reason
    cap: int | None = None

    def __post_init__(self) -> None:
        if self.fire == (self.reason is Reason.HOLD):
            raise ValueError(f"Decision(fire={self.fire}, reason={self.reason}) is inconsistent")
        if self.cap is not None and (not self.fire or type(self.cap) is not int or self.cap < 1):
            raise ValueError(
                f"Decision.cap must be None or an int >= 1 on a FIRE, got {self.cap!r}"
            )


# Every decision the gate can return, built once so decide() allocates nothing.
_DECISIONS: dict[Reason, Decision] = {r: Decision(r is not Reason.HOLD, r) for r in Reason}


@dataclass(frozen=True, slots=True)
class GateConfig:
    """Parameters of the gate: ``B`` (dense_tokens), ``K`` (max_hold_passes), enabled, and
    ``S`` (stall_passes: 0 = the STALL valve off, today's gate exactly)."""

    dense_tokens: int
    max_hold_passes: int = 30
    enabled: bool = True
    stall_passes: int = 0

    def __post_init__(self) -> None:
        check_int("GateConfig", "dense_tokens", self.dense_tokens, 1)
        check_int("GateConfig", "max_hold_passes", self.max_hold_passes, 1)
        check_bool("GateConfig", "enabled", self.enabled)
        check_int("GateConfig", "stall_passes", self.stall_passes, 0)


@dataclass(frozen=True, slots=True)
class GateInput:
    """One pass's observation.

    ``waiting_tokens`` is what the pass could really admit if it fired (token
    budget, sequence slots and free KV blocks respected); ``decode_seqs`` counts
    the sequences that really decode this pass, not merely the running ones.
    """

    waiting_tokens: int
    decode_seqs: int

    def __post_init__(self) -> None:
        check_int("GateInput", "waiting_tokens", self.waiting_tokens, 0)
        check_int("GateInput", "decode_seqs", self.decode_seqs, 0)


class PrefillGate:
    """Decides, once per scheduler pass, whether new prefills may be admitted.

    O(1) per call; returns shared, immutable ``Decision`` objects. With the valve
    off, the stall memory is neither kept nor read (a falsy test on the valve).
    """

    __slots__ = ("_budget", "_config", "_dense", "_enabled", "_h", "_last", "_quiet", "_stall")

    def __init__(self, config: GateConfig) -> None:
        if not isinstance(config, GateConfig):
            raise TypeError(f"PrefillGate needs a GateConfig, got {type(config).__name__}")
        self._config = config
        self._dense = config.dense_tokens
        self._budget = config.max_hold_passes
        self._enabled = config.enabled
        self._stall = config.stall_passes
        self._h = 0
        self._last = 0
        self._quiet = 0

    @property
    def config(self) -> GateConfig:
        return self._config

    @property
    def hold_passes(self) -> int:
        """Passes the current waiting episode has been held (0 <= h < max_hold_passes)."""
        return self._h

    @property
    def stall_memory(self) -> tuple[int, int]:
        """The valve's memory: the previous pass's fill and passes since it last grew
        (the spec's ``q`` and ``n``; kept only while ``stall_passes`` > 0)."""
        return self._last, self._quiet

    def reset(self) -> None:
        """Forget the current hold episode and the stall memory (e.g. after a drain)."""
        self._h = 0
        self._last = 0
        self._quiet = 0

    def decide(self, inp: GateInput) -> Decision:
        """Apply the rules in order: EMPTY, DISABLED, NO_DECODE, DENSE, BUDGET, else HOLD."""
        return self.decide_counts(inp.waiting_tokens, inp.decode_seqs)

    def decide_counts(self, waiting_tokens: int, decode_seqs: int) -> Decision:
        """``decide`` without building a ``GateInput``: for callers holding bare counts.

        The caller guarantees non-negative ints (``GateInput`` checks them).
        """
        if self._stall:
            # the valve's memory is kept on every pass, whatever the decision
            if waiting_tokens > self._last:
                self._quiet = 0
            else:
                self._quiet += 1
            self._last = waiting_tokens
        if waiting_tokens == 0:
            reason = Reason.EMPTY
        elif not self._enabled:
            reason = Reason.DISABLED
        elif decode_seqs == 0:
            reason = Reason.NO_DECODE
        elif waiting_tokens >= self._dense:
            reason = Reason.DENSE
        elif self._stall and self._quiet >= self._stall:
            reason = Reason.STALL
        elif self._h + 1 >= self._budget:
            reason = Reason.BUDGET
        else:
            self._h += 1
            return _DECISIONS[Reason.HOLD]
        self._h = 0
        return _DECISIONS[reason]

    def __repr__(self) -> str:
        return f"PrefillGate({self._config!r}, hold_passes={self._h})"


@runtime_checkable
class GatePolicy(Protocol):
    """What a scheduler needs from a prefill-admission policy, once per pass.

    ``PrefillGate`` is the proved one; ``densegate.lab.baselines`` holds others
    to compare against, and an engine may bring its own (the conformance kit
    checks it against the spec).
    """

    @property
    def hold_passes(self) -> int:
        """Passes the current waiting episode has been held."""
        ...

    def decide(self, inp: GateInput) -> Decision: ...

    def reset(self) -> None: ...
