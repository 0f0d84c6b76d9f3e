"""Reference prefill-admission policies, for comparing against densegate's gate.

Each policy speaks the gate protocol (``decide(GateInput) -> Decision``, the
``hold_passes`` counter, ``reset()``) so the conformance kit and the benchmarks
can drive any of them the same way. ``POLICIES`` names them:

- ``legacy``: no gate at all, prefill-first (what an engine does today);
- ``original``: the gate of the original change (docs/ARCHITECTURE.md), flaws included, so
  that what densegate fixes can be shown rather than asserted;
- ``densegate``: densegate's own ``PrefillGate``.

Like the rest of ``densegate.impl`` this module never imports z3 or the spec.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from densegate.impl.gate import Decision, GateConfig, GateInput, GatePolicy, PrefillGate, Reason
from densegate.impl.validation import check_int

__all__ = [
    "POLICIES",
    "DenseGatePolicy",
    "LegacyPolicy",
    "OriginalPolicy",
    "RawCounts",
    "RawGatePolicy",
]

_FIRE: dict[Reason, Decision] = {r: Decision(True, r) for r in Reason if r is not Reason.HOLD}
_HOLD = Decision(False, Reason.HOLD)


@dataclass(frozen=True, slots=True)
class RawCounts:
    """What a scheduler sees on its lists before working out admissibility.

    A pass's ``GateInput`` holds the honest counts (tokens that could really be
    admitted, sequences that really decode). Some gates were written against
    the raw lists instead; these counts let such a gate be modelled faithfully:
    ``running_seqs >= decode_seqs`` (the running list also holds sequences that
    cannot decode this pass: parked, waiting on remote KV) and ``queued_tokens
    >= waiting_tokens`` (the queue also holds requests with no KV blocks or
    sequence slot free).
    """

    running_seqs: int
    queued_tokens: int

    def __post_init__(self) -> None:
        for field in ("running_seqs", "queued_tokens"):
            check_int("RawCounts", field, getattr(self, field), 0)

    @classmethod
    def honest(cls, inp: GateInput) -> RawCounts:
        """The raw view of a scheduler whose lists hold only admissible work."""
        return cls(inp.decode_seqs, inp.waiting_tokens)


@runtime_checkable
class RawGatePolicy(GatePolicy, Protocol):
    """A policy that reads the raw lists too: the conformance kit feeds it both."""

    def decide_raw(self, inp: GateInput, raw: RawCounts) -> Decision: ...


class LegacyPolicy:
    """No gate: every pass admits whatever it can (prefill-first with
    ``densegate.lab.baselines.prefill_first.PrefillFirstScheduler``, vLLM v0's order).

    This is the gate switched off, so a pass with something waiting is reported
    as ``DISABLED`` whatever the config says (``EMPTY`` when nothing waits).
    The counter never moves. It breaks none of the starvation properties; what
    it gives up is density, which only agreement with the spec pins down.
    """

    __slots__ = ("config",)

    def __init__(self, config: GateConfig) -> None:
        self.config = config

    @property
    def hold_passes(self) -> int:
        return 0

    def reset(self) -> None:
        """Nothing to forget."""

    def decide(self, inp: GateInput) -> Decision:
        return _FIRE[Reason.EMPTY if inp.waiting_tokens == 0 else Reason.DISABLED]

    def __repr__(self) -> str:
        return f"LegacyPolicy({self.config!r})"


class OriginalPolicy:
    """The gate of the original change (docs/ARCHITECTURE.md), flaws kept on purpose.

    The original's ``_prefill_batch_ready()`` returns a bool once per pass; as a
    policy, in its own order:

    1. gate off: fire, counter untouched;
    2. tail escape: the *running list* is empty -> fire, counter := 0;
    3. dense: the *queued* tokens (no KV-block or sequence-slot check) reach
       ``dense_tokens`` -> fire, counter := 0;
    4. otherwise counter += 1, and fire once it reaches ``max_hold_passes``
       (counter := 0), else hold.

    Deviations from densegate's machine, each one of the flaws in docs/ARCHITECTURE.md:

    - there is no "nothing waiting" rule first, so a pass with nothing
      admissible but decodes running is a HOLD that advances the counter
      (flaw 1): a request arriving after an idle stretch finds the budget
      already spent and is fired at once, under-full;
    - the tail escape tests ``running_seqs == 0``, not ``decode_seqs == 0``
      (flaw 2): a running list of parked sequences holds work while nothing
      runs;
    - the dense test reads ``queued_tokens``, not ``waiting_tokens`` (flaw 3):
      a "dense" fire can admit less than ``dense_tokens``.

    The budget itself matches densegate's (increment-then-compare ``h >= K``
    is ``h + 1 >= K``). The cross-rank delayer's second budget (flaw 4) lives
    at the data-parallel level and is not modelled here.

    Through the plain protocol the raw lists are taken to hold only admissible
    work (``RawCounts.honest``), which hides flaws 2 and 3; ``decide_raw``
    shows them. The original returns a bool, so reasons label the branch taken,
    except that a fire with nothing admissible waiting admits nothing and is
    reported ``EMPTY``. The original skips the gate on a pass with nothing running
    or queued; its next call is then always a tail escape that resets the
    counter, so consulting it on every pass changes nothing observable.
    """

    __slots__ = ("_budget", "_dense", "_enabled", "_h", "config")

    def __init__(self, config: GateConfig) -> None:
        self.config = config
        self._dense = config.dense_tokens
        self._budget = config.max_hold_passes
        self._enabled = config.enabled
        self._h = 0

    @property
    def hold_passes(self) -> int:
        return self._h

    def reset(self) -> None:
        self._h = 0

    def decide(self, inp: GateInput) -> Decision:
        return self.decide_raw(inp, RawCounts.honest(inp))

    def decide_raw(self, inp: GateInput, raw: RawCounts) -> Decision:
        if not self._enabled:
            return self._fire(inp, Reason.DISABLED, reset=False)
        if raw.running_seqs == 0:
            return self._fire(inp, Reason.NO_DECODE)
        if raw.queued_tokens >= self._dense:
            return self._fire(inp, Reason.DENSE)
        self._h += 1
        if self._h >= self._budget:
            return self._fire(inp, Reason.BUDGET)
        return _HOLD

    def _fire(self, inp: GateInput, reason: Reason, *, reset: bool = True) -> Decision:
        if reset:
            self._h = 0
        return _FIRE[Reason.EMPTY if inp.waiting_tokens == 0 else reason]

    def __repr__(self) -> str:
        return f"OriginalPolicy({self.config!r}, hold_passes={self._h})"


DenseGatePolicy = PrefillGate
"""densegate's own gate, under the name the other policies follow."""

POLICIES: dict[str, Callable[[GateConfig], GatePolicy]] = {
    "legacy": LegacyPolicy,
    "original": OriginalPolicy,
    "densegate": DenseGatePolicy,
}
"""Shipped policies by name, each built from a ``GateConfig``."""
