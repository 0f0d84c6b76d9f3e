"""What a run did pass by pass, and its time figures on a measured or a modeled clock.

``TimedRunner`` wraps any runner and records into a ``PassTimeline`` each pass's
work, its measured start and end, and which sequences got a token in it. The
same record gives the figures two ways: ``measured_figures`` reads the clock,
``modeled_figures`` replaces every pass by the model's time (so a null-runner
replay gets milliseconds), and ``dp_figures`` does either for data-parallel
ranks, a modeled tick costing the slowest rank's pass plus the collective.

Arrivals stay on the replay's pass clock: a request that arrives before pass
``p`` waits from the start of pass ``p``, whatever the passes before it cost.
"""

from __future__ import annotations

import bisect
import collections
import itertools
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from densegate.impl.engine import Engine
from densegate.impl.figures import percentile
from densegate.impl.sched.batch import Runner, ScheduledBatch
from densegate.lab.cost.model import PassModel, PassWork

__all__ = [
    "PassTimeline",
    "RankTiming",
    "TimeFigures",
    "TimedRunner",
    "dp_figures",
    "measured_figures",
    "modeled_figures",
    "rank_timing",
]


_INT = {int}


class PassTimeline:
    """Per pass run: its work and measured start and end; per sequence: its token passes."""

    def __init__(self) -> None:
        self.work: dict[int, PassWork] = {}
        self.start_s: dict[int, float] = {}
        self.end_s: dict[int, float] = {}
        self.tokens: dict[int, list[int]] = collections.defaultdict(list)

    def record(self, batch: ScheduledBatch, t0: float, t1: float) -> None:
        index, tokens = batch.index, self.tokens
        self.work[index] = PassWork.from_batch(batch)
        self.start_s[index] = t0
        self.end_s[index] = t1
        for chunks in (batch.prefills, batch.decodes):  # batch.sampled(), in its order
            for c in chunks:
                if c.sample:
                    tokens[c.seq_id].append(index)


class TimedRunner:
    """A runner that records every pass it runs into ``timeline``; attributes pass through."""

    def __init__(self, inner: Runner, timeline: PassTimeline) -> None:
        self.inner = inner
        self.timeline = timeline

    def execute(self, batch: ScheduledBatch) -> Sequence[int]:
        t0 = time.perf_counter()
        out = self.inner.execute(batch)
        self.timeline.record(batch, t0, time.perf_counter())
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@dataclass
class TimeFigures:
    """A run's (or phase's) time figures in milliseconds; ``tick_ms`` is one entry per
    pass on one rank, per tick with data parallelism."""

    output_tokens: int
    seconds: float
    ttft_ms: list[float]
    itl_ms: list[float]
    tick_ms: list[float]

    @property
    def tokens_per_s(self) -> float | None:
        return self.output_tokens / self.seconds if self.seconds > 0 else None

    def summary(self) -> dict[str, Any]:
        def pcts(xs: Sequence[float], *qs: float) -> dict[str, float | None]:
            return {f"p{q:g}": percentile(xs, q) for q in qs}

        return {
            "output_tokens": self.output_tokens,
            "seconds": self.seconds,
            "output_tokens_per_s": self.tokens_per_s,
            "ttft_ms": {**pcts(self.ttft_ms, 50, 99), "max": max(self.ttft_ms, default=None)},
            "itl_ms": pcts(self.itl_ms, 50, 99),
            "tick_ms": pcts(self.tick_ms, 50, 99),
        }

    @classmethod
    def pooled(cls, runs: Sequence[TimeFigures]) -> TimeFigures:
        """Repeated runs as one: tokens and seconds summed, samples pooled."""
        return cls(
            sum(r.output_tokens for r in runs),
            sum(r.seconds for r in runs),
            [x for r in runs for x in r.ttft_ms],
            [x for r in runs for x in r.itl_ms],
            [x for r in runs for x in r.tick_ms],
        )


def _latencies(
    tokens: Mapping[int, Sequence[int]],
    arrivals: Iterable[tuple[int, float]],
    end_at: Mapping[int, float],
) -> tuple[int, list[float], list[float]]:
    """Output tokens, TTFT and inter-token gaps (ms) from token passes and a clock in s."""
    ttft: list[float] = []
    itl: list[float] = []
    for seq, arrived in arrivals:
        passes = tokens.get(seq, ())
        if not passes:
            continue
        ends = list(map(end_at.__getitem__, passes))
        ttft.append(1e3 * (ends[0] - arrived))
        itl.extend(1e3 * (b - a) for a, b in itertools.pairwise(ends))
    return sum(len(v) for v in tokens.values()), ttft, itl


def measured_figures(engine: Engine, timeline: PassTimeline) -> TimeFigures:
    """Wall-clock figures: TTFT from each request's arrival, seconds from the first pass's
    start to the last pass's end (scheduler time between passes included)."""
    reqs = [engine.request(m.request_id) for m in engine.all_metrics()]
    out, ttft, itl = _latencies(
        timeline.tokens, [(r.seq_id, r.arrival_time) for r in reqs], timeline.end_s
    )
    passes = sorted(timeline.work)
    seconds = timeline.end_s[passes[-1]] - timeline.start_s[passes[0]] if passes else 0.0
    ticks = [1e3 * (timeline.end_s[p] - timeline.start_s[p]) for p in passes]
    return TimeFigures(out, seconds, ttft, itl, ticks)


def _modeled_clock(tick_ms_by_pass: Mapping[int, float]) -> tuple[list[int], list[float]]:
    """Pass indices in order and the modeled time (s) at the end of each."""
    passes = sorted(tick_ms_by_pass)
    ends: list[float] = []
    total = 0.0
    for p in passes:
        total += tick_ms_by_pass[p] / 1e3
        ends.append(total)
    return passes, ends


def _start_of(passes: list[int], ends: list[float], p: int) -> float:
    """Modeled time when pass ``p`` starts: the end of the last pass run before it."""
    i = bisect.bisect_left(passes, p)
    return ends[i - 1] if i > 0 else 0.0


def _modeled(
    tick_by_pass: Mapping[int, float],
    tokens: Mapping[int, Sequence[int]],
    arrival_pass: Iterable[tuple[int, int]],
) -> TimeFigures:
    passes, ends = _modeled_clock(tick_by_pass)
    end_at = dict(zip(passes, ends, strict=True))
    arrivals = [(seq, _start_of(passes, ends, p)) for seq, p in arrival_pass]
    out, ttft, itl = _latencies(tokens, arrivals, end_at)
    return TimeFigures(out, ends[-1] if ends else 0.0, ttft, itl, [tick_by_pass[p] for p in passes])


def modeled_figures(engine: Engine, timeline: PassTimeline, model: PassModel) -> TimeFigures:
    """The run as if each pass took the model's time (one rank, nothing between passes)."""
    reqs = [engine.request(m.request_id) for m in engine.all_metrics()]
    ticks = {p: model.pass_ms(w) for p, w in timeline.work.items()}
    return _modeled(ticks, timeline.tokens, [(r.seq_id, r.arrival_pass) for r in reqs])


def rank_timing(engine: Engine, timeline: PassTimeline) -> dict[str, Any]:
    """One data-parallel rank's timing record, JSON-ready: measured figures, and the
    work and token passes ``dp_figures`` needs to model the phase.

    A tick is timed from the end of this rank's pass to the end of its next one
    (the pass, the scheduling and the collective between); seconds run from the
    start of its first pass to the end of its last.
    """
    reqs = [engine.request(m.request_id) for m in engine.all_metrics()]
    out, ttft, itl = _latencies(
        timeline.tokens, [(r.seq_id, r.arrival_time) for r in reqs], timeline.end_s
    )
    work = timeline.work
    passes = sorted(work)
    ends = timeline.end_s
    return {
        "output_tokens": out,
        "seconds": ends[passes[-1]] - timeline.start_s[passes[0]] if passes else 0.0,
        "ttft_ms": ttft,
        "itl_ms": itl,
        "tick_ms": [1e3 * (ends[b] - ends[a]) for a, b in itertools.pairwise(passes) if b == a + 1],
        "work": [[p, *work[p].as_list()] for p in passes],
        "requests": [[r.arrival_pass, timeline.tokens.get(r.seq_id, [])] for r in reqs],
        "request_ids": [r.request_id for r in reqs],
    }


class RankTiming:
    """Times a data-parallel rank's engine: installs a ``TimedRunner`` on it, and
    ``report()`` gives the ``rank_timing`` record for the rank's report."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.timeline = PassTimeline()
        engine.runner = TimedRunner(engine.runner, self.timeline)

    def report(self) -> dict[str, Any]:
        return rank_timing(self.engine, self.timeline)


def dp_figures(ranks: Sequence[Mapping[str, Any]], model: PassModel | None = None) -> TimeFigures:
    """A data-parallel phase from its ranks' ``rank_timing`` records.

    Measured (``model`` None): tokens summed over the slowest rank's seconds; latency
    samples pooled; tick times of the rank with the most ticks. Modeled: pass ``t`` of
    every rank is tick ``t`` (ranks step together), costing ``tick_ms`` of their works.
    """
    if not ranks:
        return TimeFigures(0, 0.0, [], [], [])
    if model is None:
        ticks = max((list(r["tick_ms"]) for r in ranks), key=len)
        return TimeFigures(
            sum(int(r["output_tokens"]) for r in ranks),
            max(float(r["seconds"]) for r in ranks),
            [x for r in ranks for x in r["ttft_ms"]],
            [x for r in ranks for x in r["itl_ms"]],
            ticks,
        )
    # model.tick_ms of each tick's works, inlined: the slowest pass (max's order: the
    # first of equals) plus the collective; each distinct valid work priced once (a
    # model is a function of the work), a bad one left to PassWork.from_list to name.
    priced: dict[tuple[int, ...], float] = {}
    slowest: dict[int, float] = {}
    for r in ranks:
        for row in r["work"]:
            counts = row[1:]
            # Exact ints only: a float or a bool equal to a priced work would find its price.
            if type(counts) is list and len(counts) == 6 and set(map(type, counts)) == _INT:
                same = tuple(counts)
                ms = priced.get(same)
                if ms is None:
                    work = PassWork(*counts) if min(counts) >= 0 else PassWork.from_list(counts)
                    ms = priced[same] = model.pass_ms(work)
            else:
                ms = model.pass_ms(PassWork.from_list(counts))
            t = int(row[0])
            top = slowest.get(t)
            if top is None or ms > top:
                slowest[t] = ms
    tick_by_pass = {t: ms + model.collective_ms for t, ms in slowest.items()}
    tokens: dict[int, list[int]] = {}
    arrivals: list[tuple[int, int]] = []
    for r in ranks:
        for arrival, passes in r["requests"]:
            key = len(arrivals)
            tokens[key] = list(passes)
            arrivals.append((key, int(arrival)))
    return _modeled(tick_by_pass, tokens, arrivals)
