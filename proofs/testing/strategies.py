"""Hypothesis strategies for gate configs, observations and observation runs.

Runs are built from *segments* (a stretch of passes of one kind) whose values
are stated relative to the config (``dense_tokens + 2``, "1 below dense"), so
one drawn list of segments makes sense for any config and shrinks towards short
runs of small, boundary values. Use them in your own tests::

    from hypothesis import given
    from densegate.testing import gate_configs, observation_runs

    @given(data=st.data(), config=gate_configs())
    def test_my_gate(data, config):
        for obs in data.draw(observation_runs(config)):
            my_gate.decide(obs.gate_input)

Every observation also carries the raw list counts (``running_seqs >=
decode_seqs``, ``queued_tokens >= waiting_tokens``) for gates that read them.
"""

from __future__ import annotations

import enum
import operator
from dataclasses import dataclass, replace

from hypothesis import strategies as st

from densegate.impl.gate import GateConfig, GateInput
from densegate.lab.baselines.policies import RawCounts

__all__ = [
    "GateRun",
    "Observation",
    "Segment",
    "SegmentKind",
    "decode_counts",
    "dense_thresholds",
    "gate_configs",
    "gate_runs",
    "hold_budgets",
    "observation_runs",
    "observations",
    "segments",
]

MAX_SEGMENT = 40
"""Longest stretch of one kind; several stretches reach any budget in ``hold_budgets``."""


@dataclass(frozen=True, slots=True)
class Observation:
    """One pass as a scheduler sees it: honest counts plus the raw list counts."""

    waiting_tokens: int
    decode_seqs: int
    running_seqs: int
    queued_tokens: int

    @property
    def gate_input(self) -> GateInput:
        return GateInput(self.waiting_tokens, self.decode_seqs)

    @property
    def raw(self) -> RawCounts:
        return RawCounts(self.running_seqs, self.queued_tokens)


class SegmentKind(enum.Enum):
    """The stretches that matter to a gate; first ones are what shrinking prefers."""

    UNDER_FULL = "under_full"
    """0 < w < B with decodes running: the only place a gate may hold."""
    IDLE = "idle"
    """Nothing admissible waits (w = 0): long ones expose counters that drift."""
    DENSE = "dense"
    """w >= B with decodes running: must fire at once."""
    NO_DECODE = "no_decode"
    """Something waits and nothing decodes: must fire (tail escape)."""
    INTERRUPTED = "interrupted"
    """Under-full passes with one dense, idle or no-decode pass amid them: a
    waiting episode cut by a fire, where counters that keep or lose count show."""
    ANY = "any"
    """Unconstrained w and d, for whatever the named kinds miss."""


@dataclass(frozen=True, slots=True)
class Segment:
    """``length`` passes of one kind; the other fields place w, d and the raw counts."""

    kind: SegmentKind
    length: int
    level: int
    """Picks w, 0 the boundary: under-full B-1 - level mod (B-1); dense B + level;
    no-decode 1 + level; any level. Interrupted: the cutting pass's kind."""
    decode: int
    """Picks d: 1 + decode where decodes must run, 0 for no-decode, else decode."""
    parked: int
    """Running-list entries that do not decode: running_seqs = d + parked."""
    blocked: int
    """Queued tokens with no KV block or slot free: queued_tokens = w + blocked."""

    def expand(self, config: GateConfig) -> tuple[Observation, ...]:
        B, kind, level = config.dense_tokens, self.kind, self.level
        d = 1 + self.decode
        if kind is SegmentKind.INTERRUPTED:
            cut = (SegmentKind.DENSE, SegmentKind.IDLE, SegmentKind.NO_DECODE)[level % 3]
            under = replace(self, kind=SegmentKind.UNDER_FULL, length=1, level=0)
            before = self.length // 2
            return (
                under.expand(config) * before
                + replace(self, kind=cut, length=1, level=0).expand(config)
                + under.expand(config) * (self.length - before)
            )
        if kind is SegmentKind.UNDER_FULL:
            w = B - 1 - level % (B - 1) if B > 1 else 0
        elif kind is SegmentKind.IDLE:
            w, d = 0, self.decode
        elif kind is SegmentKind.DENSE:
            w = B + level
        elif kind is SegmentKind.NO_DECODE:
            w, d = 1 + level, 0
        else:
            w, d = level, self.decode
        return (Observation(w, d, d + self.parked, w + self.blocked),) * self.length


@dataclass(frozen=True, slots=True)
class GateRun:
    """A config and the passes to feed a fresh gate built from it."""

    config: GateConfig
    passes: tuple[Observation, ...]


def _small_plus(small: int, *extra: st.SearchStrategy[int]) -> st.SearchStrategy[int]:
    # "small + nothing" comes first and needs no draw, so shrinking a large
    # value can always fall back to a small one.
    return st.builds(operator.add, st.integers(1, small), st.one_of(st.just(0), *extra))


def dense_thresholds() -> st.SearchStrategy[int]:
    """B: small values hit the boundaries, large ones show nothing depends on size."""
    return _small_plus(12, st.integers(0, 4096), st.just(10**9))


def hold_budgets() -> st.SearchStrategy[int]:
    """K: mostly small, so budgets are spent within short runs."""
    return _small_plus(8, st.integers(0, 56))


def decode_counts() -> st.SearchStrategy[int]:
    return st.integers(0, 512)


def gate_configs(*, enabled: bool | None = None) -> st.SearchStrategy[GateConfig]:
    """Valid ``GateConfig`` values; ``enabled=None`` draws it (True two times in three)."""
    flag = st.sampled_from([True, True, False]) if enabled is None else st.just(enabled)
    return st.builds(GateConfig, dense_thresholds(), hold_budgets(), flag)


# Under-full stretches twice as often: holding is where gates go wrong.
_KINDS = (SegmentKind.UNDER_FULL, *SegmentKind)


def segments() -> st.SearchStrategy[Segment]:
    """One stretch of passes, independent of the config it will be expanded for."""
    small_or_any = st.one_of(st.just(0), st.integers(0, 3), st.integers(0, 5000))
    return st.builds(
        Segment,
        kind=st.sampled_from(_KINDS),
        length=st.one_of(st.integers(1, 3), st.integers(1, MAX_SEGMENT)),
        level=small_or_any,
        decode=decode_counts(),
        parked=st.one_of(st.just(0), st.integers(1, 64)),
        blocked=st.one_of(st.just(0), st.integers(1, 5000)),
    )


def _expand(config: GateConfig, segs: list[Segment]) -> tuple[Observation, ...]:
    return tuple(obs for seg in segs for obs in seg.expand(config))


def observation_runs(
    config: GateConfig, *, max_segments: int = 20
) -> st.SearchStrategy[tuple[Observation, ...]]:
    """Passes for one config: empty stretches, dense bursts, no-decode and under-full runs."""
    return st.lists(segments(), max_size=max_segments).map(lambda segs: _expand(config, segs))


def observations(config: GateConfig) -> st.SearchStrategy[Observation]:
    """A single pass for ``config``, drawn like one pass of ``observation_runs``."""
    return segments().map(lambda seg: seg.expand(config)[0])


def gate_runs(
    configs: st.SearchStrategy[GateConfig] | None = None, *, max_segments: int = 20
) -> st.SearchStrategy[GateRun]:
    """A config and a run for it, drawn together so both shrink."""
    return st.builds(
        lambda config, segs: GateRun(config, _expand(config, segs)),
        gate_configs() if configs is None else configs,
        st.lists(segments(), max_size=max_segments),
    )
