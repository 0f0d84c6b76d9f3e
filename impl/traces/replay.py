"""Drive an engine through a trace and summarize what the gate did.

The summary's figures are the ones the gate is judged by: how full prefill
passes were, how many under-full prefill passes still interrupted decode (and
which rule let them), how long requests waited for a first token in passes and
in milliseconds, and what the scheduler itself cost per pass. A failed pass
(``PassFailed``: the runner raised) is counted and named, and the replay goes
on: the engine's ``runner_retries`` decides whether its requests run again.
"""

from __future__ import annotations

import collections
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from densegate.impl.engine import Engine
from densegate.impl.figures import percentile
from densegate.impl.sched.config import SchedulerConfig
from densegate.impl.sched.failures import PassFailed
from densegate.impl.sched.plan import PassRecord
from densegate.impl.sched.request import RequestStatus
from densegate.impl.traces.workload import TraceRequest, check_fits

__all__ = [
    "S6_SCOPE",
    "HeadWindow",
    "PassStats",
    "run_trace",
    "s6_figures",
    "summarize",
    "ttft_bound_passes",
]

S6_SCOPE = (
    "any number of requests given its window facts, which S15 proves for any number of "
    "requests of the folds the per-slot scheduler is built from (S16 ties the two at 8 "
    "requests); block size 2, STALL valve off"
)
"""What ``densegate prove`` proves S6 for, in short (a test keeps it true to the prover's
scope): tables say "proved for" this, and "checked" for the replay at hand."""


def ttft_bound_passes(
    cfg: SchedulerConfig, owed: int, prompt: int, longest: int, capacity_wait: bool = True
) -> int:
    """S6's bound on the passes from becoming head of the queue to the first token.

    ``K (q + 1) + longest + 1`` with ``q = ceil((owed + prompt) / c)``, ``c =
    min(cap, T - S + 1)``, ``owed`` the prefill tokens running requests still
    owe and ``longest`` their longest remaining output, both when the request
    became head; ``K (q + 2)`` if smaller and no pass of the window was a
    capacity wait (an EMPTY pass: the head did not fit and nothing was owed).
    ``densegate prove`` proves both (obligation S6, for the scope it prints)
    for a window with no preemption and no abort; arrivals behind are allowed.
    """
    s, t, k = cfg.max_num_seqs, cfg.max_num_batched_tokens, cfg.max_hold_passes
    c = min(cfg.chunk_cap, t - s + 1)
    q = -(-(owed + prompt) // c)
    general = k * (q + 1) + longest + 1
    return general if capacity_wait else min(general, k * (q + 2))


@dataclass
class HeadWindow:
    """What S6's bound needs, read when a request became head of the queue."""

    request_id: str
    head_pass: int
    owed: int
    prompt: int
    longest: int


def _note_head(engine: Engine, seen: dict[tuple[str, int], HeadWindow]) -> None:
    """Record the queue head's window the first time its headship is seen."""
    sched = engine.scheduler
    waiting = getattr(sched, "waiting", None)
    if not waiting or waiting[0].head_pass is None:
        return
    r = waiting[0]
    key = (r.request_id, r.head_pass)
    if key in seen or r.output_token_ids:
        return
    running = getattr(sched, "running", [])
    owed = sum(x.num_tokens - x.num_computed for x in running if not x.is_decoding)
    longest = max((x.max_tokens - len(x.output_token_ids) for x in running), default=0)
    seen[key] = HeadWindow(r.request_id, r.head_pass, owed, r.num_tokens, longest)


@dataclass
class PassStats:
    """Per-pass figures accumulated as a run goes (the pass log is only a ring)."""

    dense_tokens: int
    passes: int = 0
    prefill_passes: int = 0
    fill_sum: float = 0.0
    decode_only_passes: int = 0
    interrupting: int = 0
    underfull_interrupting: collections.Counter[str] = field(default_factory=collections.Counter)
    reasons: collections.Counter[str] = field(default_factory=collections.Counter)
    preempted: int = 0
    preempting_passes: set[int] = field(default_factory=set)
    """Passes that preempted, or failed: windows across them are outside S6's premise."""
    empty_passes: set[int] = field(default_factory=set)
    heads: dict[tuple[str, int], HeadWindow] = field(default_factory=dict)
    failed_passes: int = 0
    failures: list[str] = field(default_factory=list)
    """The first few ``PassFailed`` messages, in pass order."""

    def observe(self, rec: PassRecord) -> None:
        self.passes += 1
        if rec.failed:  # nothing ran: outside S6's premise, as a preemption is
            self.failed_passes += 1
            self.preempting_passes.add(rec.index)
        name = rec.reason._name_  # .name, without the enum property's call
        self.reasons[name] += 1
        self.preempted += rec.preempted
        if rec.preempted:
            self.preempting_passes.add(rec.index)
        if name == "EMPTY":
            self.empty_passes.add(rec.index)
        if rec.prefill_tokens:
            self.prefill_passes += 1
            self.fill_sum += min(1.0, rec.prefill_tokens / self.dense_tokens)
            if rec.interrupts_decode:
                self.interrupting += 1
                if rec.prefill_tokens < self.dense_tokens:
                    self.underfull_interrupting[name] += 1
        elif rec.decode_seqs:
            self.decode_only_passes += 1


def run_trace(
    engine: Engine,
    trace: Sequence[TraceRequest],
    seed: int = 0,
    on_pass: Callable[[int], None] | None = None,
) -> PassStats:
    """Replay ``trace``: requests join when the scheduler reaches their arrival pass.

    When the engine falls idle before the next arrival, that arrival is brought
    forward (an idle pass schedules nothing and measures nothing). Prompt token
    ids are drawn from ``seed`` within the runner's vocabulary, after every entry
    is checked to fit the engine (``check_fits``: ``ValueError`` naming it).
    """
    check_fits(trace, engine.config)
    rng = random.Random(seed)
    vocab = engine.vocab_size or 32000
    stats = PassStats(engine.config.dense)
    pending = sorted(trace, key=lambda r: r.arrival_pass)
    i = 0
    sched = engine.scheduler
    while i < len(pending) or engine.has_unfinished():
        idle = not sched.has_work()
        while i < len(pending) and (pending[i].arrival_pass <= sched.pass_index or idle):
            r = pending[i]
            prompt = [rng.randrange(vocab) for _ in range(r.prompt_len)]
            engine.add_request(prompt, r.output_len)
            _note_head(engine, stats.heads)
            i += 1
            idle = False
        before = sched.pass_index
        try:
            engine.step()
        except PassFailed as e:
            if len(stats.failures) < 3:
                stats.failures.append(str(e))
        _note_head(engine, stats.heads)
        if sched.pass_index != before:
            stats.observe(sched.pass_log[-1])
            if on_pass is not None:
                on_pass(sched.pass_index)
    return stats


def summarize(engine: Engine, stats: PassStats, wall_s: float) -> dict[str, Any]:
    """The run's figures as one JSON-ready dict."""
    cfg = engine.config
    ms = engine.all_metrics()
    done = [m for m in ms if m.status is RequestStatus.FINISHED]
    reqs = [engine.request(m.request_id) for m in done]
    ttft_p = [m.ttft_passes for m in done if m.ttft_passes is not None]
    ttft_ms = [1e3 * m.ttft_s for m in done if m.ttft_s is not None]
    tpot_ms = [1e3 * m.tpot_s for m in done if m.tpot_s is not None]
    tpot_p = [
        (m.finish_pass - m.first_token_pass) / (m.output_tokens - 1)
        for m in done
        if m.output_tokens > 1 and m.finish_pass is not None and m.first_token_pass is not None
    ]
    s6 = s6_figures(cfg, reqs, stats)
    out_tokens = sum(m.output_tokens for m in ms)
    passes = max(stats.passes, 1)
    summary: dict[str, Any] = {
        "requests": len(ms),
        "finished": len(done),
        "ended_otherwise": {
            s.name: sum(m.status is s for m in ms)
            for s in (RequestStatus.ABORTED, RequestStatus.REJECTED)
        },
        "rejected_reasons": _reasons(engine, ms, RequestStatus.REJECTED),
        "aborted_reasons": _reasons(engine, ms, RequestStatus.ABORTED),
        "failed_passes": stats.failed_passes,
        "failures": stats.failures,
        "gate": "on" if cfg.gate_enabled else "off",
        "dense_tokens": cfg.dense,
        "max_hold_passes": cfg.max_hold_passes,
        "passes": stats.passes,
        "prompt_tokens": sum(m.prompt_tokens for m in ms),
        "output_tokens": out_tokens,
        "output_tokens_per_pass": out_tokens / passes,
        "ttft_passes": {
            "p50": percentile(ttft_p, 50),
            "p99": percentile(ttft_p, 99),
            "max": max(ttft_p, default=None),
        },
        "ttft_ms": {"p50": percentile(ttft_ms, 50), "p99": percentile(ttft_ms, 99)},
        "tpot_passes": {"p50": percentile(tpot_p, 50), "p99": percentile(tpot_p, 99)},
        "tpot_ms": {"p50": percentile(tpot_ms, 50), "p99": percentile(tpot_ms, 99)},
        "head_ttft_passes_max": s6["wait_max"],
        "head_ttft_bound_passes": s6["bound_max"],
        "s6": s6,
        "prefill_passes": stats.prefill_passes,
        "mean_prefill_fill": stats.fill_sum / stats.prefill_passes
        if stats.prefill_passes
        else None,
        "decode_only_passes": stats.decode_only_passes,
        "prefill_passes_interrupting_decode": stats.interrupting,
        "underfull_interrupting": sum(stats.underfull_interrupting.values()),
        "underfull_interrupting_by_reason": dict(stats.underfull_interrupting),
        "reasons": dict(stats.reasons),
        "preemptions": stats.preempted,
        "scheduler_us_per_pass": 1e6 * engine.scheduler_seconds / passes,
        "runner_ms_per_pass": 1e3 * engine.runner_seconds / passes,
        "wall_s": wall_s,
    }
    runner_summary = getattr(engine.runner, "summary", None)
    if callable(runner_summary):
        summary["runner"] = runner_summary()
    return summary


def _reasons(engine: Engine, ms: Sequence[Any], status: RequestStatus) -> dict[str, int]:
    """How many requests ended ``status``, per reason."""
    out: collections.Counter[str] = collections.Counter()
    for m in ms:
        if m.status is status:
            out[engine.request(m.request_id).finish_reason or "?"] += 1
    return dict(out)


def s6_figures(cfg: SchedulerConfig, reqs: Sequence[Any], stats: PassStats) -> dict[str, Any]:
    """Each head window's wait against its S6 bound, over windows the bound covers.

    A window runs from ``head_pass`` to ``first_token_pass``; one with a
    preempting or failed pass inside (or a preempted request) is outside S6's
    premise and only counted. One with an EMPTY pass inside gets the bound with ``D``.
    ``worst_ratio`` is the largest wait / bound.
    """
    rows: list[dict[str, Any]] = []
    disturbed = 0
    for r in reqs:
        if r.first_token_pass is None or r.head_pass is None:
            continue
        w = stats.heads.get((r.request_id, r.head_pass))
        span = range(r.head_pass, r.first_token_pass + 1)
        if w is None or r.num_preemptions or any(i in stats.preempting_passes for i in span):
            disturbed += 1
            continue
        wait = r.first_token_pass - r.head_pass + 1
        capacity_wait = any(i in stats.empty_passes for i in span)
        bound = ttft_bound_passes(cfg, w.owed, w.prompt, w.longest, capacity_wait)
        rows.append({"request_id": r.request_id, "wait": wait, "bound": bound,
                     "owed": w.owed, "prompt": w.prompt, "longest": w.longest})  # fmt: skip
    worst = max(rows, key=lambda x: x["wait"] / x["bound"], default=None)
    return {
        "windows": len(rows),
        "disturbed": disturbed,
        "violations": sum(x["wait"] > x["bound"] for x in rows),
        "worst_ratio": worst["wait"] / worst["bound"] if worst else None,
        "worst": worst,
        "wait_max": max((x["wait"] for x in rows), default=None),
        "bound_max": max((x["bound"] for x in rows), default=None),
        "per_request": [[x["request_id"], x["wait"], x["bound"]] for x in rows],
    }


def timed_run(
    engine: Engine,
    trace: Sequence[TraceRequest],
    seed: int = 0,
    on_pass: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    t0 = time.perf_counter()
    stats = run_trace(engine, trace, seed, on_pass)
    return summarize(engine, stats, time.perf_counter() - t0)
