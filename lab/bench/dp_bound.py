"""What no rule can reach on a trace: a lower bound on the slow inter-token gaps of any
rule whose TTFT p99 meets a bar, so a missed goal cell can say whether any rule could meet it.

A cell of the DP side by side (seconds clock) asks densegate for TTFT p99 <= one peer's and
ITL p99 <= another's. Where the two peers are a rule that starts every prefill at once and a
rule that holds prefill out of almost every tick, both bars together may be out of reach of
every rule; this module decides that from the trace and the pass model alone, for every rule
the bench can run (every gate, cap, hold and router over the shared scheduler). It
rests on facts of the bench's clock (``densegate.lab.bench.dp_clock``) and scheduler:

1. a tick starts at or after every arrival it routes, and costs the slowest rank's pass
   (whole microseconds, as priced) plus the collective; a tick in which any rank prefills
   costs at least ``mixed_us`` (the model's cheapest pass with a prefill token), any tick
   in which a request decodes at least ``tick_us``;
2. every running request decodes once in every tick until it has its ``output_len`` tokens
   (the bench's runner has no stop token): no rule preempts it, because a rank runs at
   most ``max_num_seqs`` requests and the trace's ``max_num_seqs`` longest fit in a rank's
   KV pool together (checked; else no bound);
3. percentiles are linear-interpolated (``densegate.impl.figures.percentile``), so a p99 at
   most a bar leaves at most ``n - 1 - floor(0.99 (n - 1))`` of ``n`` values above it.

Then a request meeting the TTFT bar ``B`` had its first token's tick start in
``[a, a + B - mixed_us]``, and from ``a + B`` until ``a + mixed_us + (output_len - 1)
tick_us`` it decodes in every tick; each tick with a prefill in that span ends one of its
gaps, at least ``mixed_us`` long, above the ITL bar when ``mixed_us`` is. Choosing which
requests miss the TTFT bar (at most the p99's allowance) and where the first-token ticks
fall so as to end the fewest such gaps is an interval-stabbing problem, solved exactly
(``_stab_program``); the decodes of requests that miss the bar are discounted
(``_least_slow_gaps``), so the bound is at most every such rule's count. It is a bound on
one trace at one pair of bars, not a statement about other traces.

The pass models must cost no less for more work within a pass kind (the roofline's
``max(compute, memory) + launches`` and a linear model's non-negative coefficients do).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from densegate.impl.engine import EngineConfig
from densegate.impl.traces.workload import TraceRequest
from densegate.lab.cost.model import PassModel, PassWork

__all__ = ["GoalBound", "allowed_above", "bound_words", "goal_bound"]

_INF = math.inf


def allowed_above(n: int, q: float = 99.0) -> int:
    """How many of ``n`` values may exceed a bar that their linear-interpolated ``q``-th
    percentile is at most: the values above the one at ``floor(q/100 (n - 1))``."""
    if n <= 0:
        return 0
    return n - 1 - math.floor((n - 1) * q / 100)


@dataclass(frozen=True)
class GoalBound:
    """The bound for one trace at one (TTFT, ITL) pair of bars, and what it rests on."""

    ttft_ms: float
    itl_ms: float
    mixed_us: int
    """The cheapest tick with a prefill (pass plus collective), whole microseconds."""
    tick_us: int
    """The cheapest tick in which a request decodes."""
    late_allowed: int
    """Requests that may miss the TTFT bar with TTFT p99 still at most it."""
    slow_allowed: int
    """Inter-token gaps that may exceed the ITL bar with ITL p99 still at most it."""
    slow_needed: int | None
    """Fewest gaps above the ITL bar of any rule meeting the TTFT bar; None: no bound."""
    why_none: str = ""
    ttft_alone: bool = False
    """More than ``late_allowed`` requests miss the TTFT bar whatever a rule does."""

    @property
    def unreachable(self) -> bool:
        """No rule meets both bars on this trace."""
        if self.ttft_alone:
            return True
        return self.slow_needed is not None and self.slow_needed > self.slow_allowed

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "unreachable": self.unreachable}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GoalBound:
        """``as_dict``'s inverse (``unreachable`` is derived, so it is dropped)."""
        return cls(**{k: v for k, v in d.items() if k != "unreachable"})

    def describe(self) -> str:
        bars = f"TTFT p99 <= {self.ttft_ms:.3g} ms with ITL p99 <= {self.itl_ms:.3g} ms"
        if self.ttft_alone:
            return (f"no rule can meet TTFT p99 <= {self.ttft_ms:.3g} ms on this trace: more "
                    f"than {self.late_allowed} requests miss it whatever a rule does")  # fmt: skip
        if self.slow_needed is None:
            return f"{bars}: no bound ({self.why_none})"
        counts = (f"{self.slow_needed} gaps above the ITL bar for any rule meeting the TTFT "
                  f"bar, {self.slow_allowed} allowed")  # fmt: skip
        if self.unreachable:
            return f"no rule can meet {bars} on this trace: {counts}"
        return f"{bars} not excluded: {counts}"


def bound_words(d: dict[str, Any]) -> str:
    """A cell's ``"bound"`` (``GoalBound.as_dict``) in words."""
    return GoalBound.from_dict(d).describe()


def _cheapest(model: PassModel, works: Sequence[PassWork]) -> int:
    """The cheapest of ``works`` in whole microseconds, priced as the seconds clock does."""
    return min(round(1e3 * model.pass_ms(w)) for w in works)


def _ticks_us(model: PassModel) -> tuple[int, int]:
    """(cheapest tick with a prefill, cheapest tick with a decode), collective included:
    within a kind more work costs no less, so each kind's least work is its cheapest."""
    coll = round(1e3 * model.collective_ms)
    prefill = PassWork(1, 1, 1, 1)  # one token, nothing beside it
    mixed = PassWork(1, 1, 1, 1, 1, 1)
    rows = getattr(model, "graph_max_rows", 0) + 1  # the fewest rows of an eager decode
    decodes = (PassWork(decode_seqs=1, decode_context=1),
               PassWork(decode_seqs=rows, decode_context=rows))  # fmt: skip
    return _cheapest(model, (prefill, mixed)) + coll, _cheapest(model, (*decodes, mixed)) + coll


def _no_preemption(trace: Sequence[TraceRequest], engine: EngineConfig) -> str:
    """Why a rule might preempt a running request on ``trace``; empty when none can: a
    rank runs at most ``max_num_seqs`` requests, a request holds at most the blocks of its
    prompt and output, and the ``max_num_seqs`` largest of those fit a rank's pool."""
    need = sorted((-(-(r.prompt_len + r.output_len) // engine.block_size) for r in trace),
                  reverse=True)[: engine.max_num_seqs]  # fmt: skip
    if sum(need) <= engine.num_blocks:
        return ""
    return (f"the trace's {len(need)} longest requests need {sum(need)} KV blocks at once, "
            f"a rank's pool has {engine.num_blocks}: a rule could preempt")  # fmt: skip


def goal_bound(
    trace: Sequence[TraceRequest],
    engine: EngineConfig,
    model: PassModel,
    ttft_ms: float,
    itl_ms: float,
) -> GoalBound:
    """The bound for ``trace`` (``arrival_pass`` in microseconds: the seconds clock's trace)
    served by ``engine``'s scheduler and priced by ``model``, at the two bars."""
    mixed_us, tick_us = _ticks_us(model)
    n = len(trace)
    gaps = sum(max(r.output_len - 1, 0) for r in trace)
    late, slow = allowed_above(n), allowed_above(gaps)
    base = GoalBound(ttft_ms, itl_ms, mixed_us, tick_us, late, slow, None)
    why = _no_preemption(trace, engine)
    if not why and mixed_us <= itl_ms * 1e3 + 1:  # a µs of margin for the ms floats
        why = f"a tick with a prefill can cost {mixed_us / 1e3:g} ms, within the ITL bar"
    if why:
        return GoalBound(**{**asdict(base), "why_none": why})
    bar_us = math.floor(ttft_ms * 1e3) + 1  # generous by a µs: the bound only weakens
    needed = _least_slow_gaps(trace, bar_us, mixed_us, tick_us, late)
    if needed is None:
        return GoalBound(**{**asdict(base), "ttft_alone": True})
    return GoalBound(**{**asdict(base), "slow_needed": needed})


def _least_slow_gaps(
    trace: Sequence[TraceRequest], bar_us: int, mixed_us: int, tick_us: int, late: int
) -> int | None:
    """The fewest gaps ended by first-token ticks over every choice of at most ``late``
    requests that miss the TTFT bar and every placement of the others' first-token ticks
    (None: more than ``late`` miss it whatever the placement).

    A request decodes in a tick starting at ``s`` when ``a + bar <= s < a + mixed +
    (output_len - 1) tick`` if it met the bar. Requests that missed it are not counted,
    two ways, and the larger bound holds: every tick counts ``late`` fewer; or the count
    is of every request, less what ``late`` requests could contribute, each at most one
    per prefill tick in its span (ticks do not overlap and last ``mixed`` at least)."""
    spans = [(r.arrival_pass + bar_us, r.arrival_pass + mixed_us + (r.output_len - 1) * tick_us)
             for r in trace]  # fmt: skip
    spans = [(a, b) for a, b in spans if a < b]
    arrivals = sorted(r.arrival_pass for r in trace)
    w = bar_us - mixed_us
    each = _stab_program(arrivals, spans, w, late, late)
    if each is None:
        return None
    most = sorted(((b - a) // mixed_us + 1 for a, b in spans), reverse=True)[:late]
    whole = _stab_program(arrivals, spans, w, late, 0)
    assert whole is not None  # the same arrivals to cover as ``each``'s
    return max(each, whole - sum(most))


def _stab_program(
    arrivals: Sequence[int], spans: Sequence[tuple[int, int]], w: int, late: int, less: int
) -> int | None:
    """The least sum, over first-token ticks, of ``max(spans holding the tick's start -
    less, 0)``, every arrival but at most ``late`` having a tick start in ``[a, a + w]``
    (None: none does). Arrivals in order; ``best[i][d]``: the least for arrivals ``i..``
    with ``d`` misses left. Arrival ``i`` misses, or the first tick covering it (start in
    ``[a_k, a_i + w]``) covers ``i..k``, at the least count any start there meets."""
    starts = sorted(a for a, _ in spans)
    stops = sorted(b for _, b in spans)

    def holding(s: int) -> int:
        return bisect.bisect_right(starts, s) - bisect.bisect_right(stops, s)

    def fewest(lo: int, hi: int) -> int:  # the count only falls where a span stops
        least = holding(lo)
        for e in stops[bisect.bisect_right(stops, lo) : bisect.bisect_right(stops, hi)]:
            least = min(least, holding(e))
        return max(least - less, 0)

    n = len(arrivals)
    best: list[list[float]] = [[0.0] * (late + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        row = [_INF, *best[i + 1][:late]]  # arrival i misses the bar
        k = i
        while w >= 0 and k < n and arrivals[k] <= arrivals[i] + w:
            cost, nxt = fewest(arrivals[k], arrivals[i] + w), best[k + 1]
            row = [min(x, cost + y) for x, y in zip(row, nxt, strict=True)]
            k += 1
        best[i] = row
    found = best[0][late]
    return None if found == _INF else int(found)
