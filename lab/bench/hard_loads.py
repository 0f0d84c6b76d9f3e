"""The engine side by sides' hard loads, in modeled seconds: where a DP prefill policy can lose.

Each load is a seeded trace whose arrivals are in microseconds of the modeled clock
(``densegate.lab.bench.step_price``), drawn at ``rate`` arrivals per rank per
*nominal step* (``step_us``: the caller states it from its profile, so a load is the
same fraction of an engine's capacity on any profile). Lengths are log-normal
(``synthetic_trace``). The loads:

- ``poisson``: Poisson arrivals routed by the engine's own balancer (today's scenario);
- ``skewed``: the same arrivals, ~75 % pinned to rank 0 and the rest spread over the
  others, as external routing (vLLM's ``data_parallel_rank`` on a request) can do;
- ``oscillating-rate``: the rate alternating between 1.8x and 0.2x the mean every
  ``OSC_PERIOD`` nominal steps (SGLang #35241's load around the threshold);
- ``long-bursts``: bursts of ``4 * dp`` requests at once, the mean rate kept;
- ``kv-tight``: Poisson arrivals with longer requests and ``kv_share`` of the engine's
  KV pool, so admission waits on free KV (and vLLM preempts).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from densegate.impl.traces.workload import synthetic_trace

__all__ = ["HOT_SHARE", "LOADS", "HardLoad", "TimedRequest", "hard_load"]

HOT_SHARE = 0.75
"""The share of arrivals the skewed load pins to rank 0."""
OSC_PERIOD = 40.0
"""Nominal steps per half-period of the oscillating load."""
LOADS = ("poisson", "skewed", "oscillating-rate", "long-bursts", "kv-tight")


@dataclass(frozen=True, slots=True)
class TimedRequest:
    at_us: int
    prompt_len: int
    output_len: int
    rank: int | None = None
    """The rank external routing pins it to; None: the engine's own router chooses."""


@dataclass(frozen=True)
class HardLoad:
    name: str
    dp: int
    requests: tuple[TimedRequest, ...]
    kv_share: float = 1.0
    """The share of the engine's default KV pool this load runs with."""


def _times(name: str, n: int, rate: float, rng: random.Random, dp: int) -> list[float]:
    """``n`` arrival times in nominal steps at ``rate`` per step overall."""
    out: list[float] = []
    t = 0.0
    if name == "long-bursts":
        size = 4 * dp
        while len(out) < n:
            t += rng.expovariate(rate / size)
            out += [t] * min(size, n - len(out))
        return out
    while len(out) < n:
        now = rate
        if name == "oscillating-rate":  # equal time high and low: the mean rate is kept
            now *= 0.2 if int(t // OSC_PERIOD) % 2 else 1.8
        t += rng.expovariate(now)
        out.append(t)
    return out


def hard_load(
    name: str,
    dp: int,
    requests_per_rank: int,
    rate: float,
    step_us: int,
    *,
    prompt_median: int,
    output_median: int,
    max_model_len: int,
    seed: int = 0,
    kv_share: float = 0.25,
) -> HardLoad:
    """Load ``name`` (one of ``LOADS``) for ``dp`` ranks; ``rate`` arrivals per rank per
    nominal step of ``step_us``; ``kv_share`` applies to ``kv-tight`` only."""
    if name not in LOADS:
        raise ValueError(f"unknown load {name!r}; loads: {', '.join(LOADS)}")
    if dp < 1 or requests_per_rank < 1 or rate <= 0 or step_us < 1:
        raise ValueError(f"dp, requests_per_rank, rate, step_us must be > 0: {dp}, "
                         f"{requests_per_rank}, {rate}, {step_us}")  # fmt: skip
    n = dp * requests_per_rank
    tight = name == "kv-tight"
    lengths = synthetic_trace(
        n, seed + 101 * dp, rate=1.0,
        prompt_median=prompt_median * (2 if tight else 1), prompt_sigma=0.8,
        output_median=output_median * (2 if tight else 1), output_sigma=0.6,
        max_model_len=max_model_len,
    )  # fmt: skip
    rng = random.Random(f"hard:{name}:{dp}:{seed}")
    times = _times(name, n, rate * dp, rng, dp)
    out = []
    for t, r in zip(times, lengths, strict=True):
        rank = None
        if name == "skewed":
            rank = 0 if dp == 1 or rng.random() < HOT_SHARE else rng.randrange(1, dp)
        out.append(TimedRequest(round(t * step_us), max(2, r.prompt_len),
                                max(1, r.output_len), rank))  # fmt: skip
    return HardLoad(name, dp, tuple(out), kv_share if tight else 1.0)
