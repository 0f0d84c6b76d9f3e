"""Pricing an engine's real steps by the cost model: the engine side by sides' modeled clock.

The vLLM and SGLang side by sides run each engine's real scheduler with no model,
so their figures are in steps. ``StepClock`` gives the same run modeled seconds:
every step costs the slowest rank's modeled pass for what that rank's scheduler
actually scheduled, plus the collective every DP step makes (``tick_ms``), and
arrivals are in modeled seconds, due to the router once the clock has passed them
(idle time jumps to the next one). A policy that makes many cheap steps therefore
sees its arrivals no sooner in modeled time than one that makes few dear ones.
``figures`` gives modeled tokens/s, TTFT and ITL in ms from the step each token
came out in. Modeled figures: they follow from the profile (its name is carried
with them) and the scheduler's steps, not from a machine.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from densegate.impl.figures import percentile
from densegate.lab.cost.model import PassModel, PassWork
from densegate.lab.cost.profile import Profile

__all__ = [
    "DEFAULT_PROFILE",
    "DUMMY_PASS",
    "US",
    "StepClock",
    "load_profile",
    "nominal_step_us",
    "pass_work",
]

US = 1_000_000
"""Clock units per second: arrivals and step ends are integer microseconds."""
DEFAULT_PROFILE = "roofline:H100-SXM"
"""The profile the side by sides price with unless told otherwise (``Profile.load``)."""
DUMMY_PASS = PassWork(decode_seqs=1, decode_context=1)
"""An idle DP rank's dummy batch: vLLM's ``execute_dummy_batch`` runs a one-token forward
(``_dummy_run(1)`` in its GPU worker) so the rank joins the step's collectives."""


def load_profile(name: str = DEFAULT_PROFILE) -> Profile:
    """A saved profile or a shipped roofline by name (``Profile.load``'s forms)."""
    return Profile.load(name)


def pass_work(prefills: Iterable[tuple[int, int]], decode_starts: Iterable[int]) -> PassWork:
    """One rank's pass from what its scheduler scheduled: prefill chunks as ``(start,
    tokens)`` (tokens already in the KV cache, tokens computed now) and, per decoding
    request, the tokens before the one it computes. The same counts as
    ``PassWork.from_batch`` gives for densegate's own ``ScheduledBatch``."""
    tokens = chunks = pairs = ctx = 0
    for start, n in prefills:
        tokens += n
        chunks += 1
        pairs += n * start + n * (n + 1) // 2
        ctx += start + n
    starts = list(decode_starts)
    return PassWork(tokens, chunks, pairs, ctx, len(starts), sum(starts) + len(starts))


@dataclass
class StepClock:
    """One DP run's modeled clock: step ends, and arrivals released as it passes them.

    ``arrivals_us`` are the trace's arrival times (any order); ``due`` hands out the
    indices of those the clock has reached, ``close`` prices one step from every
    rank's work (None: the rank ran no pass) and ``idle`` jumps to the next arrival."""

    model: PassModel
    arrivals_us: Sequence[int]
    profile: str = "model"
    """The profile's name, printed with every modeled figure."""
    now_us: int = 0
    starts_us: list[int] = field(default_factory=list)
    ends_us: list[int] = field(default_factory=list)
    """Per step (in order) the modeled times it started and ended at."""
    _order: list[int] = field(init=False, repr=False)
    _next: int = field(default=0, init=False, repr=False)
    _prices: dict[PassWork, int] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if any(t < 0 for t in self.arrivals_us):
            raise ValueError("arrival times must be >= 0 us")
        self._order = sorted(range(len(self.arrivals_us)), key=self.arrivals_us.__getitem__)
        self._collective_us = round(1e3 * self.model.collective_ms)

    @property
    def pending(self) -> int:
        """Arrivals not yet handed out."""
        return len(self._order) - self._next

    def due(self) -> list[int]:
        """The arrivals the clock has reached and not yet handed out, by arrival time."""
        order, at, start = self._order, self.arrivals_us, self._next
        end = start
        while end < len(order) and at[order[end]] <= self.now_us:
            end += 1
        self._next = end
        return order[start:end]

    def idle(self) -> bool:
        """Every rank idle: jump to the next arrival (False if none is left)."""
        if not self.pending:
            return False
        self.now_us = max(self.now_us, self.arrivals_us[self._order[self._next]])
        return True

    def pass_us(self, work: PassWork) -> int:
        """One rank's modeled pass (us); a model is a function of the work, so cached."""
        us = self._prices.get(work)
        if us is None:
            us = self._prices[work] = round(1e3 * self.model.pass_ms(work))
        return us

    def close(self, works: Sequence[PassWork | None]) -> int:
        """Price one step: the slowest rank's pass plus the collective; its index."""
        slowest = max((self.pass_us(w) for w in works if w is not None), default=0)
        self.starts_us.append(self.now_us)
        self.now_us += slowest + self._collective_us
        self.ends_us.append(self.now_us)
        return len(self.ends_us) - 1

    def step_at(self, t_us: int) -> int:
        """The index of the first step ending at or after ``t_us`` (len if none)."""
        return bisect.bisect_left(self.ends_us, t_us)

    def figures(self, requests: Iterable[tuple[int, Sequence[int]]]) -> dict[str, Any]:
        """Modeled figures from ``(arrival_us, steps its tokens came out in)`` per request:
        tokens/s over the time to the last step's end, TTFT from arrival to the end of
        the first token's step, ITL between consecutive tokens' step ends (ms)."""
        ends = self.ends_us
        ttft: list[float] = []
        itl: list[float] = []
        tokens = 0
        for arrived, steps in requests:
            tokens += len(steps)
            if not steps:
                continue
            at = [ends[s] for s in steps]
            ttft.append((at[0] - arrived) / 1e3)
            itl.extend((b - a) / 1e3 for a, b in itertools.pairwise(at))
        seconds = (ends[-1] if ends else 0) / US
        return {
            "profile": self.profile,
            "output_tokens": tokens,
            "seconds": seconds,
            "tokens_per_s": tokens / seconds if seconds > 0 else 0.0,
            "ttft_ms_p99": percentile(ttft, 99) or 0.0,
            "itl_ms_p99": percentile(itl, 99) or 0.0,
        }


def nominal_step_us(model: PassModel, tokens: int) -> int:
    """A full step as the hard loads' time unit: ``tokens`` prefill tokens in one chunk,
    plus the collective (us), so a load is the same share of capacity on any profile."""
    return round(1e3 * (model.pass_ms(pass_work([(0, tokens)], [])) + model.collective_ms))
