"""The goal bound (``densegate.lab.bench.dp_bound``): exact on small instances against a
brute force, never below what a real run reached, and able to say "no rule can"."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from densegate.cli.main import main as cli_main
from densegate.impl.figures import percentile
from densegate.impl.traces.workload import TraceRequest
from densegate.lab.bench import WORKLOADS, bench_config, dp_clock, dp_policies
from densegate.lab.bench.dp_bound import (
    GoalBound,
    _least_slow_gaps,
    _stab_program,
    allowed_above,
    goal_bound,
)
from densegate.lab.bench.dp_policies import policy_rows, run_dp_policies
from densegate.lab.bench.dp_seconds import arrival_rate, capacity_tokens_per_s, seconds_trace
from densegate.lab.bench.dp_verdict import format_verdicts
from densegate.lab.cost.profile import roofline_profile
from densegate.lab.cost.timeline import TimeFigures

MODEL = roofline_profile("H100-SXM").model


@given(st.lists(st.integers(0, 50), min_size=1, max_size=300), st.integers(0, 50))
def test_allowed_above_is_what_a_p99_at_most_the_bar_leaves(xs: list[int], bar: int) -> None:
    """At most ``allowed_above`` values above the bar if the p99 is at most it, and the
    p99 is at most it with fewer (the interpolation's upper neighbour is then below it)."""
    above = sum(x > bar for x in xs)
    p99 = percentile(xs, 99)
    assert p99 is not None
    if p99 <= bar:
        assert above <= allowed_above(len(xs))
    if above < allowed_above(len(xs)):
        assert p99 <= bar


def _brute(a: list[int], spans: list[tuple[int, int]], w: int, late: int, less: int) -> float:
    """Every subset of candidate tick starts, every choice of late arrivals."""

    def cost(s: int) -> int:
        return max(sum(lo <= s < hi for lo, hi in spans) - less, 0)

    points = sorted({*a, *(x + w for x in a), *(hi for _, hi in spans)})
    best = math.inf
    for size in range(len(points) + 1):
        for chosen in itertools.combinations(points, size):
            missed = sum(not any(x <= s <= x + w for s in chosen) for x in a)
            if missed <= late:
                best = min(best, sum(cost(s) for s in chosen))
    return best


@given(
    st.lists(st.tuples(st.integers(0, 20), st.integers(1, 12)), min_size=1, max_size=4),
    st.integers(3, 12),
    st.integers(0, 2),
    st.booleans(),
)
def test_the_stabbing_program_is_exact_on_small_traces(
    reqs: list[tuple[int, int]], bar: int, late: int, per_tick: bool
) -> None:
    """The program against every placement of first-token ticks (a prefill tick costs 3,
    a decode 2), with the late requests' discount per tick or none."""
    a = sorted(x for x, _ in reqs)
    spans = [(x + bar, x + 3 + (o - 1) * 2) for x, o in reqs]
    spans = [(lo, hi) for lo, hi in spans if lo < hi]
    less = late if per_tick else 0
    got = _stab_program(a, spans, bar - 3, late, less)
    assert (math.inf if got is None else got) == _brute(a, spans, bar - 3, late, less)


def _true_least(trace: list[TraceRequest], bar: int, mixed: int, tick: int, late: int) -> float:
    """The objective itself, by brute force: every set of late requests, every set of
    first-token tick starts at least ``mixed`` apart covering the others, counting only the
    decodes of requests that met the bar."""
    a = [r.arrival_pass for r in trace]
    spans = [
        (x + bar, x + mixed + (r.output_len - 1) * tick) for x, r in zip(a, trace, strict=True)
    ]
    w = bar - mixed
    points = sorted({*a, *(x + w for x in a), *(lo for lo, _ in spans), *(hi for _, hi in spans)})
    best = math.inf
    for k in range(late + 1):
        for missed in itertools.combinations(range(len(a)), k):
            met = [i for i in range(len(a)) if i not in missed]
            for size in range(len(points) + 1):
                for chosen in itertools.combinations(points, size):
                    if any(y - x < mixed for x, y in itertools.pairwise(chosen)):
                        continue
                    if all(any(a[i] <= s <= a[i] + w for s in chosen) for i in met):
                        n = sum(spans[j][0] <= s < spans[j][1] for s in chosen for j in met)
                        best = min(best, n)
    return best


@given(
    st.lists(st.tuples(st.integers(0, 16), st.integers(1, 10)), min_size=1, max_size=3),
    st.integers(3, 8),
    st.integers(0, 1),
)
# The late request is the long one: counting its decodes (no per-request discount) says 1.
@example(reqs=[(0, 10), (3, 1), (5, 1)], bar=3, late=1)
def test_the_bound_is_below_every_placement_on_small_traces(
    reqs: list[tuple[int, int]], bar: int, late: int
) -> None:
    """Both discounts for the late requests (per tick; per request, by the ticks its span
    can hold) keep the bound at or below the least any placement reaches."""
    trace = [TraceRequest(x, 1, o) for x, o in reqs]
    got = _least_slow_gaps(trace, bar, 2, 1, late)
    want = _true_least(trace, bar, 2, 1, late)
    assert (math.inf if got is None else got) <= want


def _cell(
    workload: str, requests: int, policies: list[str], dp: int = 2, load: float = 0.3
) -> tuple[list[TraceRequest], list[dict[str, Any]], list[TimeFigures]]:
    """One cell, its trace built as the bench builds it; its rows, and each policy's raw
    figures (every TTFT and inter-token gap), in policy order."""
    w, engine = WORKLOADS[workload], bench_config()
    probe = seconds_trace(w, 0, dp, requests, 1.0)
    rate = arrival_rate(probe, load, capacity_tokens_per_s(probe, engine, dp, MODEL, 0))
    trace = seconds_trace(w, 0, dp, requests, rate)
    seen: list[TimeFigures] = []

    def keep(*args: Any) -> TimeFigures:
        seen.append(dp_clock.figures(*args))
        return seen[-1]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(dp_policies, "figures", keep)
        runs = run_dp_policies(
            trace, engine, dp, MODEL, policies, 0, clock="seconds", pace_tokens=365
        )
    return trace, policy_rows(runs), seen


def test_no_run_has_fewer_slow_gaps_than_the_bound_at_its_own_ttft() -> None:
    """Each policy's run meets its own TTFT p99, so it is one of the rules the bound is
    about: its gaps at least a prefill tick long are at least the bound's count (the ITL bar
    set below every tick, so no guard stops the count). At its own ITL p99 too, the bound
    must not exclude what the run reached."""
    tested = 0
    for load in (0.3, 0.9):
        pols = ["densegate", "gate-off", "vllm-cadence-2", "sglang-delayer", "atom-coalescer",
                "trtllm-adp"]  # fmt: skip
        trace, rows, raw = _cell("bursty", 20, pols, 8, load)
        assert [x["name"] for x in rows] == pols and len(raw) == len(pols)
        gaps = sum(r.output_len - 1 for r in trace)  # every request ran to its length
        assert all(len(fig.itl_ms) == gaps for fig in raw)
        for x, fig in zip(rows, raw, strict=True):
            b = goal_bound(trace, bench_config(), MODEL, x["ttft_ms_p99"], 0.0)
            assert b.slow_needed is not None
            slow = sum(g >= b.mixed_us / 1e3 for g in fig.itl_ms)
            assert slow >= b.slow_needed, (load, x["name"], slow, b)
            tested += b.slow_needed > 0
            own = goal_bound(trace, bench_config(), MODEL, x["ttft_ms_p99"], x["itl_ms_p99"])
            assert not own.unreachable, (load, x["name"], own)
    assert tested >= 6  # the bound counted something on most runs: the check has teeth


def test_the_best_peers_bars_together_are_out_of_reach_on_steady() -> None:
    """Twin: cadence-2's TTFT p99 with ATOM's ITL p99 on steady: excluded at 16 requests a
    rank, not at 8 (too few arrivals to force prefill into 1% of the gaps)."""
    for requests, out in ((16, True), (8, False)):
        trace, rows, _ = _cell("steady", requests, ["vllm-cadence-2", "atom-coalescer"])
        by = {x["name"]: x for x in rows}
        ttft, itl = by["vllm-cadence-2"]["ttft_ms_p99"], by["atom-coalescer"]["itl_ms_p99"]
        b = goal_bound(trace, bench_config(), MODEL, ttft, itl)
        assert b.slow_needed is not None
        assert b.unreachable is out, b.describe()
        assert ("no rule can" in b.describe()) is out


def test_no_bound_where_a_rule_could_preempt_or_a_prefill_tick_is_fast_enough() -> None:
    trace = [TraceRequest(i * 1000, 600, 500) for i in range(4)]
    small = dataclasses.replace(bench_config(), num_blocks=100)
    b = goal_bound(trace, small, MODEL, 50.0, 6.0)
    assert b.slow_needed is None and "could preempt" in b.why_none and not b.unreachable
    b = goal_bound(trace, bench_config(), MODEL, 50.0, 60.0)
    assert b.slow_needed is None and "within the ITL bar" in b.why_none
    assert GoalBound.from_dict(b.as_dict()) == b


def test_the_verdict_and_the_json_carry_the_bound(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["bench", "--dp", "2", "--cost", "roofline:H100-SXM", "--workload", "steady",
            "--requests", "16", "--policies", "densegate,vllm-cadence-2,atom-coalescer",
            "--load", "0.3", "--json", "--quiet"]  # fmt: skip
    assert cli_main(argv) == 0
    cell = json.loads(capsys.readouterr().out)["workloads"][0]
    assert cell["bound"]["unreachable"] is True
    lines = format_verdicts([cell], ["vllm-cadence-2", "atom-coalescer"])
    assert "NOT met (no rule can)" in lines[2]
    assert lines[-2].startswith("no rule can meet the best peers' TTFT and ITL p99 together")
    assert lines[-1].startswith("an engine rule beats densegate on tokens/s, TTFT p99 and ITL p99")
    assert cli_main(argv[:-2]) == 0  # the tables: the cell's line in words
    assert "the best peers' bars together: no rule can meet TTFT p99" in capsys.readouterr().out


def test_a_ttft_bar_below_any_prefill_tick_is_out_of_reach_alone() -> None:
    """A bar shorter than the cheapest prefill tick: every request misses it, more than the
    p99 allows (1 of 3), whatever the ITL bar."""
    trace = [TraceRequest(i * 100_000, 64, 8) for i in range(3)]
    b = goal_bound(trace, bench_config(), MODEL, 1.0, 6.0)
    assert b.ttft_alone and b.unreachable and b.slow_needed is None
    assert b.describe().startswith("no rule can meet TTFT p99 <= 1 ms on this trace")
    assert not goal_bound(trace, bench_config(), MODEL, 50.0, 6.0).unreachable  # twin
