"""The DP side by side's arrivals in modeled seconds, and ``--load`` as a fraction of
modeled capacity in tokens per second.

Capacity is what gate-off sustains on the seconds clock (``densegate.lab.bench.dp_clock``)
when the whole trace waits at time 0: output tokens over modeled seconds. Load L then
draws arrivals at ``L * capacity / mean output length`` requests per second: a
Poisson process for the Poisson workloads, Poisson bursts of about ``burst``
requests for a bursty one, seeded, so every policy sees the same arrivals at the
same modeled seconds. The workload's lengths are kept. Modeled figures: they
depend on the profile and the scheduler's passes, not on a machine.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from densegate.impl.engine import EngineConfig
from densegate.impl.traces.workload import TraceRequest
from densegate.lab.bench.dp_clock import US
from densegate.lab.bench.workloads import Workload
from densegate.lab.cost.model import PassModel

__all__ = ["arrival_rate", "capacity_tokens_per_s", "seconds_trace"]


def seconds_trace(
    workload: Workload, seed: int, dp: int, requests: int | None, rate_per_s: float
) -> list[TraceRequest]:
    """``dp`` times the workload's requests (its lengths), arriving ``rate_per_s`` per
    modeled second; ``arrival_pass`` is in microseconds (the seconds clock's unit)."""
    if rate_per_s <= 0:
        raise ValueError(f"rate_per_s must be > 0, got {rate_per_s}")
    n = (workload.requests if requests is None else requests) * dp
    lengths = workload.make(n, seed)
    rng = random.Random(f"seconds:{workload.name}:{seed}")
    burst = workload.burst
    out: list[TraceRequest] = []
    t = 0.0
    while len(out) < n:
        t += rng.expovariate(rate_per_s / burst)
        size = 1 if burst == 1 else rng.randint(burst // 2, burst + burst // 2)
        for _ in range(min(n - len(out), size)):
            r = lengths[len(out)]
            out.append(TraceRequest(round(t * US), r.prompt_len, r.output_len))
    return out


def capacity_tokens_per_s(
    trace: Sequence[TraceRequest], engine: EngineConfig, dp: int, model: PassModel, seed: int = 0
) -> float:
    """Output tokens per modeled second gate-off finishes with the whole trace waiting
    at time 0 (every rank's, over the seconds clock)."""
    from densegate.lab.bench.dp_policies import run_dp_policies

    saturated = [TraceRequest(0, r.prompt_len, r.output_len) for r in trace]
    run = run_dp_policies(saturated, engine, dp, model, ["gate-off"], seed, clock="seconds")
    run = run["gate-off"]
    tokens_per_s = run["modeled"]["output_tokens_per_s"]
    if not tokens_per_s:
        raise ValueError("capacity: gate-off produced no tokens")
    return float(tokens_per_s)


def arrival_rate(trace: Sequence[TraceRequest], load: float, capacity_tok_s: float) -> float:
    """Requests per second that offer ``load`` x capacity in output tokens per second."""
    if load <= 0 or capacity_tok_s <= 0:
        raise ValueError(f"load and capacity must be > 0, got {load}, {capacity_tok_s}")
    mean_out = sum(r.output_len for r in trace) / max(len(trace), 1)
    return load * capacity_tok_s / mean_out
