"""Shared pieces of the scheduler micro-benchmarks (``scheduler_cost``, ``queue_scaling``).

Only ``Scheduler.schedule`` and ``Scheduler.update`` are timed; the runner's
``execute`` (a ``NullRunner`` here) runs between them untimed, so the figures
are the scheduler's own cost per pass: planning, the gate, committing, and
processing the sampled tokens.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from densegate.impl.gate import GateConfig, GatePolicy, PrefillGate
from densegate.impl.sched.batch import NullRunner, ScheduledBatch
from densegate.impl.sched.config import SchedulerConfig
from densegate.impl.sched.request import Request
from densegate.impl.sched.scheduler import Scheduler
from densegate.impl.traces.workload import TraceRequest

__all__ = [
    "EXTERNAL_STEP_US",
    "ReplayResult",
    "SteadyState",
    "admitting_state",
    "holding_state",
    "median",
    "replay",
]

EXTERNAL_STEP_US = 1400.0
"""A mainstream engine's Python scheduler, about 1.4 ms per step on a trace like
``scheduler_cost``'s. An external figure: never measured by these scripts."""

_PROMPT = list(range(8192))  # shared by every request: tokens() slices, never mutates
_NEVER = 10**9  # a hold budget no benchmark reaches: the gate holds every pass


def median(xs: Sequence[float]) -> float:
    return statistics.median(xs)


def _request(seq: int, prompt_len: int, max_tokens: int, at: int) -> Request:
    return Request(str(seq), seq, _PROMPT[:prompt_len], max_tokens, at, 0.0)


def _timed_pass(s: Scheduler, runner: NullRunner) -> tuple[ScheduledBatch, float, float]:
    """One pass: its batch and the seconds in ``schedule`` and in ``update`` (not the runner)."""
    t0 = time.perf_counter()
    batch = s.schedule()
    t1 = time.perf_counter()
    tokens = runner.execute(batch)
    t2 = time.perf_counter()
    s.update(batch, tokens, t2)
    return batch, t1 - t0, time.perf_counter() - t2


def _step(s: Scheduler, runner: NullRunner) -> float:
    """One pass; the seconds spent in ``schedule`` and ``update`` only."""
    _, scheduling, updating = _timed_pass(s, runner)
    return scheduling + updating


class SteadyState:
    """A scheduler held in one state pass after pass, to time passes in it.

    ``refill`` tops the queue back up to its length after a pass that admitted
    from it (outside the timed part), so the queue length is the same on every
    pass measured.
    """

    def __init__(self, scheduler: Scheduler, waiting: int, prompt_len: int) -> None:
        self.scheduler = scheduler
        self.waiting = waiting
        self.prompt_len = prompt_len
        self._next = max((r.seq_id for r in scheduler.running), default=-1) + 1
        self._runner = NullRunner()
        self.refill()
        gc.collect()  # the build's garbage is not the passes' to pay for

    def refill(self) -> None:
        s = self.scheduler
        for _ in range(self.waiting - len(s.waiting)):
            s.add(_request(self._next, self.prompt_len, 1, s.pass_index))
            self._next += 1

    def time_passes(self, passes: int) -> float:
        """Mean microseconds per pass over ``passes`` passes."""
        total = 0.0
        for _ in range(passes):
            total += _step(self.scheduler, self._runner)
            self.refill()
        return 1e6 * total / passes


def _decoding(
    running: int, cfg: SchedulerConfig, prompt_len: int, max_tokens: int, gate: GatePolicy
) -> Scheduler:
    """A scheduler whose ``running`` requests have all finished prefill and decode."""
    s = Scheduler(cfg, gate)
    for i in range(running):
        s.add(_request(i, prompt_len, max_tokens, 0))
    runner = NullRunner()
    while s.waiting or any(not r.is_decoding for r in s.running):
        _step(s, runner)
    if len(s.running) != running:
        raise RuntimeError(f"built {len(s.running)} running requests, wanted {running}")
    return s


def holding_state(running: int, waiting: int, *, max_tokens: int = 4000) -> SteadyState:
    """``running`` decoding, ``waiting`` queued, and a gate that holds every pass.

    One sequence slot is free and the head of the queue fits it, so every pass
    plans an admission, asks the gate, and is held (the admissible prefill is
    under-full and the hold budget is out of reach): the queue never moves.
    Nothing finishes within ``max_tokens`` passes.
    """
    prompt = 64
    cfg = SchedulerConfig(
        max_num_seqs=running + 1,
        max_num_batched_tokens=max(2048, running + 2 * prompt),
        block_size=16,
        num_blocks=(running + 1) * -(-(prompt + max_tokens) // 16) + 16,
        max_model_len=prompt + max_tokens,
    )
    # Build with an always-firing gate (K = 1), then install one that never
    # fires on an under-full pass. Neither has decide_raw, so swapping is safe.
    s = _decoding(running, cfg, prompt, max_tokens, PrefillGate(GateConfig(cfg.dense, 1)))
    s.gate = PrefillGate(GateConfig(cfg.dense, _NEVER))
    return SteadyState(s, waiting, 32)


def admitting_state(running: int, waiting: int, *, max_tokens: int = 4000) -> SteadyState:
    """``running`` decoding, ``waiting`` queued, every pass admitting a full batch.

    Slots and KV are plentiful, so each pass fills its token budget with new
    prefills (a DENSE fire: 64 prompts of 32 tokens). Those requests want one
    token, so they finish in the same pass's ``update``; the queue is refilled.
    """
    prompt = 64
    cfg = SchedulerConfig(
        max_num_seqs=running + 512,
        max_num_batched_tokens=2048 + running,
        block_size=16,
        num_blocks=(running + 512) * -(-(prompt + max_tokens) // 16),
        max_model_len=prompt + max_tokens,
    )
    s = _decoding(running, cfg, prompt, max_tokens, PrefillGate(cfg.gate_config()))
    return SteadyState(s, waiting, 32)


@dataclass(frozen=True)
class ReplayResult:
    passes: int
    mean_decodes: float
    """Mean sequences decoding per pass, over every pass of the run."""
    mean_decodes_arrivals: float
    """The same over the passes up to the last arrival (the steady part)."""
    schedule_us: float
    update_us: float

    @property
    def us_per_pass(self) -> float:
        return self.schedule_us + self.update_us


def replay(
    trace: Sequence[TraceRequest],
    cfg: SchedulerConfig,
    gate: Callable[[GateConfig], GatePolicy] = PrefillGate,
) -> ReplayResult:
    """Replay ``trace`` through a bare scheduler (arrivals as ``run_trace`` does them)."""
    s = Scheduler(cfg, gate(cfg.gate_config()))
    runner = NullRunner()
    pending = sorted(trace, key=lambda r: r.arrival_pass)
    last_arrival = pending[-1].arrival_pass if pending else 0
    i = n = 0
    sched = upd = 0.0
    decodes = decodes_arrivals = 0
    while i < len(pending) or s.has_work():
        idle = not s.has_work()
        while i < len(pending) and (pending[i].arrival_pass <= s.pass_index or idle):
            r = pending[i]
            s.add(_request(i, r.prompt_len, r.output_len, s.pass_index))
            i += 1
            idle = False
        batch, scheduling, updating = _timed_pass(s, runner)
        sched += scheduling
        upd += updating
        n += 1
        decodes += len(batch.decodes)
        if batch.index <= last_arrival:
            decodes_arrivals += len(batch.decodes)
    window = min(n, last_arrival + 1)
    return ReplayResult(
        n, decodes / n, decodes_arrivals / max(window, 1), 1e6 * sched / n, 1e6 * upd / n
    )
