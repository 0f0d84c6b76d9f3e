"""The benchmark's seeded workloads and the limits every policy shares.

Each workload is sized to run in seconds on the null runner, and each stresses
one thing the gate decides about: steady arrivals, chat turns, long prompts,
bursts.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from densegate.impl.sched.config import REFERENCE_CONFIG
from densegate.impl.traces.workload import TraceRequest, synthetic_trace

__all__ = ["MAX_MODEL_LEN", "MAX_NUM_SEQS", "TOKEN_BUDGET", "WORKLOADS", "Workload"]

MAX_MODEL_LEN = REFERENCE_CONFIG.max_model_len
MAX_NUM_SEQS = REFERENCE_CONFIG.max_num_seqs
TOKEN_BUDGET = REFERENCE_CONFIG.max_num_batched_tokens
"""Tokens per pass, shared by every policy: whole prompts (``legacy``) must fit a pass
beside a full set of decodes, or a long prompt would wait for decodes to drain
(vLLM v0 ran prefill-only steps, so any prompt fitted its budget)."""


# -- workloads ------------------------------------------------------------------------
@dataclass(frozen=True)
class Workload:
    """A seeded trace generator and its default size (sized to run in seconds, null runner)."""

    name: str
    description: str
    requests: int
    make: Callable[[int, int], list[TraceRequest]]
    """``make(n, seed)``: the trace; the same arguments give the same trace."""
    burst: int = 1
    """Requests arriving at once, on average (the seconds clock draws its arrivals so)."""

    def trace(self, seed: int, requests: int | None = None) -> list[TraceRequest]:
        return self.make(self.requests if requests is None else requests, seed)


def _steady(n: int, seed: int) -> list[TraceRequest]:
    return synthetic_trace(
        n,
        seed,
        rate=0.6,
        prompt_median=256,
        prompt_sigma=0.4,
        output_median=128,
        output_sigma=0.4,
        max_model_len=MAX_MODEL_LEN,
    )


def _chat(n: int, seed: int) -> list[TraceRequest]:
    return synthetic_trace(n, seed, rate=0.6, max_model_len=MAX_MODEL_LEN)


def _long_prompt(n: int, seed: int) -> list[TraceRequest]:
    return synthetic_trace(
        n,
        seed,
        rate=0.35,
        prompt_median=1024,
        prompt_sigma=0.5,
        output_median=64,
        output_sigma=0.6,
        max_model_len=MAX_MODEL_LEN,
    )


_BURST = 12


def _bursty(n: int, seed: int, burst: int = _BURST, rate: float = 0.6) -> list[TraceRequest]:
    """Chat-like lengths; arrivals in bursts of about ``burst`` at once, ``rate`` on average."""
    lengths = synthetic_trace(n, seed, rate=rate, max_model_len=MAX_MODEL_LEN)
    rng = random.Random(f"bursty:{seed}")
    out: list[TraceRequest] = []
    t = 0.0
    while len(out) < n:
        t += rng.expovariate(rate / burst)
        for _ in range(min(n - len(out), rng.randint(burst // 2, burst + burst // 2))):
            r = lengths[len(out)]
            out.append(TraceRequest(int(t), r.prompt_len, r.output_len))
    return out


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload("steady", "steady Poisson arrivals, moderate lengths", 800, _steady),
        Workload("bursty", "bursts of ~12 requests at once, chat-like lengths", 800, _bursty,
                 _BURST),
        Workload("long-prompt", "long-prompt heavy: ~1k-token prompts, short answers", 500,
                 _long_prompt),
        Workload("chat", "chat-like: Poisson arrivals, long-tailed lengths", 800, _chat),
    )
}  # fmt: skip
"""The default workloads, in table order."""
