"""The aligned gate across two real processes, each a vLLM DP engine core's step path.

Each process loads vLLM's general plugins (so densegate's entry point installs
the gate), holds a real ``Scheduler`` and a real gloo DP group, and runs the
busy loop of ``tests.support.vllm_dp.drive`` (vLLM's own ``_process_engine_step``,
dummy batches and ``_has_global_unfinished_reqs``; no model). One pair of
processes runs three scenarios in turn, every wait bounded: a trace with an
idle rank and two waves, then ranks with different configs, then the first trace
with the paced release, then a rank that dies mid-wave.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest

from tests.vllm.conftest import HAS_VLLM, SKIP_REASON

pytestmark = pytest.mark.skipif(not HAS_VLLM, reason=SKIP_REASON)

HOLD = 6
CAP = 24


def _arrivals() -> tuple[Any, ...]:
    from tests.support.vllm_dp import Arrival

    # Wave 1: rank 0 alone for its first requests (rank 1 idle, on dummy batches), then
    # both; a gap long enough for the wave to end; wave 2 on rank 1 only.
    out = [Arrival(str(i), 3 * i, 30 + (37 * i) % 150, 4 + i % 9, rank=0) for i in range(6)]
    out += [
        Arrival(str(i), 2 * i, 20 + (53 * i) % 170, 3 + i % 11, rank=i % 2) for i in range(6, 16)
    ]
    out += [Arrival(str(i), 200 + i, 60 + (29 * i) % 120, 5, rank=1) for i in range(16, 20)]
    return tuple(out)


@functools.cache
def _runs() -> list[list[Any]]:
    from tests.support.vllm_dp_runs import Scenario, run_processes

    trace = _arrivals()
    # The hold release (pace_tokens null): without CUDA graphs the default is the paced one.
    cfg = {"max_hold_passes": HOLD, "pace_tokens": None}
    paced = {"max_hold_passes": HOLD, "pace_tokens": CAP}
    return run_processes(
        [
            Scenario(2, trace, densegate=(cfg, cfg), timeout_s=30),
            Scenario(2, trace, densegate=(cfg, {"max_hold_passes": HOLD + 1}), timeout_s=30),
            Scenario(2, trace, densegate=(paced, paced), timeout_s=30),
            Scenario(2, trace, densegate=(cfg, cfg), die=(1, 9), timeout_s=10),
        ],
        wall_s=400.0,
    )


def _ok(runs: list[Any]) -> list[Any]:
    from tests.support.vllm_dp import RankRun

    assert all(isinstance(r, RankRun) for r in runs), runs
    return runs


def test_every_rank_takes_the_same_decisions_in_every_iteration_it_steps() -> None:
    a, b = _ok(_runs()[0])
    assert a.decisions == b.decisions and a.decisions
    # One decision per iteration that ran a forward pass, on both ranks alike.
    assert len(a.decisions) == len(a.recs) == len(b.recs)
    assert [r.tick for r in a.recs] == [t for t, _, _ in a.decisions] == [r.tick for r in b.recs]
    assert [r.g for r in a.recs] == [r.g for r in b.recs]
    # vLLM's step() was told the decision: throttle exactly on HOLD.
    for run in (a, b):
        assert [r.throttle for r in run.recs] == [not fire for _, fire, _ in run.decisions]
    reasons = {why for _, _, why in a.decisions}
    assert "HOLD" in reasons and reasons & {"DENSE", "BUDGET"}


def test_the_idle_rank_contributes_on_its_dummy_batches() -> None:
    a, b = _ok(_runs()[0])
    idle = [k for k, r in enumerate(b.recs) if r.dummy]
    assert idle and any(not a.recs[k].dummy for k in idle)  # rank 0 stepped, rank 1 dummy
    # Rank 0 held on some of those ticks: the reduced vector counted rank 1 (ranks == 2).
    assert any(not a.decisions[k][1] for k in idle)


def test_held_ticks_defer_prefill_on_ranks_with_decodes_and_the_waves_restart() -> None:
    a, b = _ok(_runs()[0])
    for run in (a, b):
        for rec in run.recs:
            if rec.throttle and rec.decodes:
                assert rec.prefill == 0, rec
    assert [r.tick for r in a.recs].count(0) >= 2  # the gap ended wave 1; wave 2 restarted


def test_every_request_finishes_with_its_output_length() -> None:
    runs = _ok(_runs()[0])
    want = {x.rid: x.output_len for x in _arrivals()}
    tokens = {rid: n for run in runs for rid, n in run.tokens.items()}
    finished = {rid: why for run in runs for rid, why in run.finished.items()}
    assert tokens == want
    assert set(finished) == set(want) and set(finished.values()) == {"LENGTH"}


def test_ranks_with_different_configs_fail_at_the_handshake_not_later() -> None:
    from tests.support.vllm_dp_runs import Failure

    for f in _runs()[1]:
        assert isinstance(f, Failure) and f.kind == "DpGateError", f
        assert "start-up handshake: DP ranks run different gate configs" in f.message


def test_a_rank_that_dies_makes_the_survivor_fail_loudly_not_hang() -> None:
    from tests.support.vllm_dp_runs import Failure

    survivor, dead = _runs()[3]
    assert isinstance(dead, Failure) and dead.kind == "NoReport" and "exit code 3" in dead.message
    assert isinstance(survivor, Failure) and survivor.kind == "DpGateError", survivor
    assert "rank 0, step_counter 9" in survivor.message
    assert "a rank died or stopped stepping" in survivor.message


def test_the_paced_cap_reaches_every_ranks_token_budget() -> None:
    """Every rank fires every tick it steps (D9), the same decisions on both; a PACED
    step prefills at most the cap on each rank; every request finishes."""
    a, b = _ok(_runs()[2])
    assert a.decisions == b.decisions and all(fire for _, fire, _ in a.decisions)
    paced = [k for k, (_, _, why) in enumerate(a.decisions) if why == "PACED"]
    assert paced
    for run in (a, b):
        assert all(run.recs[k].prefill <= CAP for k in paced), run.rank
    assert max(r.prefill for r in _ok(_runs()[0])[0].recs) > CAP  # uncapped, the same trace
    want = {x.rid: x.output_len for x in _arrivals()}
    assert {rid: n for run in (a, b) for rid, n in run.tokens.items()} == want
