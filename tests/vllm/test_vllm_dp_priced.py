"""The priced DP side by side on real vLLM ranks: every step costs the slowest rank's pass for
what its real ``Scheduler`` scheduled plus the collective, an arrival reaches the router in
the first step that starts after its modeled time, pinned arrivals land on their rank, and
the benchmark's exit follows its bars (today's always, the goal's with ``--goal``)."""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.front import check_front
from tests.vllm.conftest import HAS_VLLM, SKIP_REASON

pytestmark = pytest.mark.skipif(not HAS_VLLM, reason=SKIP_REASON)

COLLECTIVE_MS = 0.25
COEF = [1.0, 0.01, 0.0, 0.0, 0.05, 0.0]
"""base, per prefill token, per chunk, per pair, per decode row, per key: a model the
test can price from the ranks' records alone (prefill tokens and decode rows)."""


def _model() -> Any:
    from densegate.lab.cost.model import LinearPassModel

    kinds = {k: COEF for k in ("prefill", "mixed", "decode_eager")}
    return LinearPassModel(kinds, collective_ms=COLLECTIVE_MS)


def _run(pinned: bool) -> tuple[list[Any], Any, list[Any]]:
    from densegate.lab.bench.step_price import StepClock
    from tests.support.vllm_dp import Arrival
    from tests.support.vllm_dp_runs import Scenario, run_threads
    from tests.support.vllm_harness import Limits

    arrivals = [Arrival(str(i), 700 * i * (i % 3), 40 + 30 * i, 3 + i % 4, i % 2)
                for i in range(10)]  # fmt: skip
    limits = Limits(max_num_seqs=4, max_num_batched_tokens=64)
    sc = Scenario(2, tuple(arrivals), limits=limits, gate=False, timeout_s=60, pinned=pinned)
    clock = StepClock(_model(), [a.step for a in arrivals], "linear-test")
    return run_threads(sc, clock=clock), clock, arrivals


def _expected_us(rec: Any) -> int:
    if rec.dummy:  # DUMMY_PASS: a one-token decode
        rows, tokens = 1, 0
    else:
        rows, tokens = rec.decodes, rec.prefill
    if not rows and not tokens:
        return 0
    return round(1e3 * (COEF[0] + COEF[1] * tokens + COEF[4] * rows))


def test_every_step_costs_the_slowest_rank_plus_the_collective() -> None:
    runs, clock, _ = _run(pinned=False)
    steps = list(zip(*(r.recs for r in runs), strict=True))
    assert len(steps) == len(clock.ends_us) > 10
    assert any(rec.prefill for row in steps for rec in row)
    coll = round(1e3 * COLLECTIVE_MS)
    for k, row in enumerate(steps):
        want = max(_expected_us(rec) for rec in row) + coll
        assert clock.ends_us[k] - clock.starts_us[k] == want, (k, row)
    assert len({_expected_us(rec) for row in steps for rec in row}) > 2  # the work varied


def test_arrivals_reach_the_router_once_the_clock_passes_them() -> None:
    runs, clock, arrivals = _run(pinned=False)
    index = {rec.g: k for k, rec in enumerate(runs[0].recs)}
    seen = {rid: g for r in runs for rid, g in r.arrival.items()}
    assert set(seen) == {a.rid for a in arrivals}
    for a in arrivals:
        k = index[seen[a.rid]]  # the step it was first in a scheduler: it ran
        assert clock.starts_us[k] >= a.step, a
        assert k == 0 or clock.starts_us[k - 1] < a.step, a  # not held back a step
    finished = sum(len(r.finished) for r in runs)
    assert finished == len(arrivals)
    assert all(r.tokens[rid] == len(r.token_steps[rid]) for r in runs for rid in r.tokens)


def test_pinned_arrivals_land_on_their_rank() -> None:
    runs, _, arrivals = _run(pinned=True)
    for r in runs:
        assert set(r.arrival) == {a.rid for a in arrivals if a.rank == r.rank}


@pytest.fixture(scope="module")
def bench() -> Any:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import vllm_dp_side_by_side as sbs

    return sbs


def _main(sbs: Any, *extra: str) -> tuple[int, dict[str, Any]]:
    out = io.StringIO()
    argv = ["--json", "--scenarios", "skewed,kv-tight", "--dps", "2", "--requests-per-rank", "6"]
    with contextlib.redirect_stdout(out):
        code = sbs.main([*argv, *extra])
    return code, json.loads(out.getvalue())


def test_the_bench_prices_every_arm_and_exits_on_its_bars(bench: Any) -> None:
    code, doc = _main(bench)
    rows, goal = doc["arms"], doc["goal"]
    assert doc["profile"].startswith("roofline-H100-SXM")
    assert {r["name"] for r in rows} == {"plain", "cadence-2", "cadence-4", "cadence-8",
                                         "densegate"}  # fmt: skip
    assert {r["scenario"] for r in rows} == {"skewed", "kv-tight"}
    for r in rows:
        m = r["modeled"]
        assert m["profile"] == doc["profile"]
        assert m["tokens_per_s"] > 0 and m["ttft_ms_p99"] > 0 and m["itl_ms_p99"] > 0
        assert r["steps"] > 0
    assert code == (1 if bench.failures(rows) else 0)
    assert {v["bar"] for v in goal} >= {"steps", "ttft-steps", "modeled-tokens/s",
                                        "modeled-ttft-p99", "modeled-itl-p99"}  # fmt: skip
    missed = any(not v["met"] for v in goal)
    code_goal, doc_goal = _main(bench, "--goal")
    assert doc_goal["goal"] == goal  # the same runs: deterministic
    assert code_goal == (1 if missed or code else 0)
    check_front(rows, doc["dominated_by"], "scenario", "name")
