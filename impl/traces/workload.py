"""Seeded synthetic workloads and JSON traces for ``densegate run`` and the benchmarks.

Lengths are log-normal, like chat traffic: most prompts and answers are short,
a few are very long, and those few are what make prefill passes under-full or
over-full. Arrivals are a Poisson process measured in scheduler passes, so a
run is reproducible from its seed whatever the machine's speed.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from densegate.impl.sched.admission import length_rejection
from densegate.impl.sched.config import SchedulerConfig
from densegate.impl.validation import (
    check_int,
    check_positive_float,
    fit_problem,
    int_problem,
    is_int,
    json_value,
    shown,
)

__all__ = ["TraceRequest", "check_fits", "dump_trace", "load_trace", "synthetic_trace"]

_FIELDS = (("arrival_pass", 0), ("prompt_len", 1), ("output_len", 1))


@dataclass(frozen=True, slots=True)
class TraceRequest:
    arrival_pass: int
    prompt_len: int
    output_len: int


def synthetic_trace(
    n: int,
    seed: int = 0,
    *,
    rate: float = 0.8,
    prompt_median: int = 256,
    prompt_sigma: float = 1.1,
    output_median: int = 128,
    output_sigma: float = 0.9,
    max_model_len: int = 4096,
) -> list[TraceRequest]:
    """``n`` requests arriving ``rate`` per pass on average, long-tailed lengths."""
    check_int("synthetic_trace", "n", n, 0)
    check_positive_float("synthetic_trace", "rate", rate)
    check_int("synthetic_trace", "max_model_len", max_model_len, 2)
    rng = random.Random(seed)
    t = 0.0
    out = []
    for _ in range(n):
        t += rng.expovariate(rate)
        p = _lognormal(rng, prompt_median, prompt_sigma, max_model_len - 1)
        o = _lognormal(rng, output_median, output_sigma, max_model_len - p)
        out.append(TraceRequest(int(t), p, o))
    return out


def _lognormal(rng: random.Random, median: int, sigma: float, cap: int) -> int:
    return max(1, min(cap, round(rng.lognormvariate(math.log(median), sigma))))


def dump_trace(trace: Sequence[TraceRequest], path: str | Path) -> None:
    Path(path).write_text(json.dumps([asdict(r) for r in trace], indent=0) + "\n")


def load_trace(path: str | Path) -> list[TraceRequest]:
    """Read a JSON list of ``{"arrival_pass", "prompt_len", "output_len"}``.

    Errors name the entry and the field, so a hand-edited trace is easy to fix.
    """
    try:
        data = json_value(Path(path).read_text(encoding="utf-8"), str(path))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a JSON list of requests, got {type(data).__name__}")
    out = []
    for i, item in enumerate(data):
        if not isinstance(item, dict):
            raise ValueError(f"{path}: entry {i} must be an object, got {shown(item)}")
        vals = []
        for key, low in _FIELDS:
            v = item.get(key)
            why = int_problem(key, v, low)
            if why is not None or not is_int(v):  # is_int: for the type checker
                raise ValueError(f"{path}: entry {i}: {why}")
            vals.append(v)
        extra = set(item) - {"arrival_pass", "prompt_len", "output_len"}
        if extra:
            raise ValueError(f"{path}: entry {i}: unknown field(s) {sorted(extra)}")
        out.append(TraceRequest(*vals))
    return out


def check_fits(trace: Sequence[TraceRequest], cfg: SchedulerConfig, label: str = "trace") -> None:
    """``ValueError`` naming the first entry of ``trace`` no engine of ``cfg`` could ever admit
    (over ``max_model_len``, as ``--dp`` refuses it, or needing more KV blocks than the
    cache has): checked before any prompt is built, which for a length like 3e8 would not
    fit in memory either."""
    for i, req in enumerate(trace):
        for key, low in _FIELDS:
            why = int_problem(f"{label} entry {i}: {key}", getattr(req, key, None), low)
            if why is not None:
                raise ValueError(why)
        p, o = req.prompt_len, req.output_len
        why = fit_problem(f"{label} entry {i}", p, o, cfg.max_model_len)
        if why is None and (more := length_rejection(cfg, p, o)) is not None:
            why = f"{label} entry {i}: {more}"
        if why is not None:
            raise ValueError(why)
