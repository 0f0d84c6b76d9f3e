"""Real ranks: densegate's delayer in 2 and 4 gloo processes, through SGLang's own executor
and SGLang's own all-gather, deciding alike on every rank, pass after pass.

Each group runs a ``RankLoad`` per rank (``tests.support.sglang_ranks``) for a
fixed number of passes: at the plugin's defaults (the paced release at one pass's
room) and in the hold mode (``pace_tokens`` null), with and without its valves. The
checks: every rank logged the same decisions from the same reduced vectors at the same
ticks; every rank made exactly one collective per pass; the decisions agree with the
proved DP machine at every pass; the default holds no pass while work waits; the hold
mode's two-rank run passes the conformance kit's judge; the busy wait's default is sized
from the group's running slots, with ``--max-running-requests`` given or left to SGLang
(then at the first pass, from the ranks' run-time slots, before its decision: two
in-process ranks whose first pass is already held); a rank that never gets a
request still joins every pass (through SGLang's ``finalize``). Every wait is bounded
(gloo's collective timeout, ``GROUP_TIMEOUT_S`` on the group).
"""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from densegate.impl.dp_vector import WAITING_RANKS
from densegate.impl.traces.workload import TraceRequest
from tests.sglang.conftest import HAS_SGLANG, SKIP_REASON
from tests.support.sglang_judge import dp_spec_mismatches, kit_judge, longest_hold_run
from tests.support.sglang_ranks import RankPlan, run_ranks

pytestmark = pytest.mark.skipif(not HAS_SGLANG, reason=SKIP_REASON)

GROUP_TIMEOUT_S = 300
PASSES = 160


def _trace(world: int, idle: tuple[int, ...] = ()) -> list[tuple[int, TraceRequest]]:
    """Short and long prompts (chunked over several passes), round-robin over busy ranks."""
    busy = [r for r in range(world) if r not in idle]
    out = []
    for i in range(14 * len(busy)):
        prompt = 5000 if i % 9 == 4 else 40 + (97 * i) % 700
        out.append((busy[i % len(busy)], TraceRequest(3 * (i // len(busy)), prompt, 4 + i % 11)))
    return out


HOLD_MODE = {"pace_tokens": None}
"""The paced release off: the hold mode (DENSE, ALIGNED, STALL, the budget K)."""


@pytest.fixture(scope="module")
def paced(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Any]:
    """The plugin's defaults: the paced release at one pass's room."""
    plan = RankPlan(world=2, passes=PASSES, max_delay_passes=6, env={}, trace=_trace(2))
    return run_ranks(plan, tmp_path_factory.mktemp("model"), GROUP_TIMEOUT_S)


@pytest.fixture(scope="module")
def unsized(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Any]:
    """The defaults with ``--max-running-requests`` left to SGLang, as most launches do."""
    plan = RankPlan(world=2, passes=PASSES, max_delay_passes=6, env={}, trace=_trace(2),
                    flag_running=False)  # fmt: skip
    return run_ranks(plan, tmp_path_factory.mktemp("model"), GROUP_TIMEOUT_S)


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Any]:
    env = {"DENSEGATE_SGLANG": json.dumps(HOLD_MODE)}
    plan = RankPlan(world=2, passes=PASSES, max_delay_passes=6, env=env, trace=_trace(2))
    return run_ranks(plan, tmp_path_factory.mktemp("model"), GROUP_TIMEOUT_S)


SETTINGS = {**HOLD_MODE, "target_fill": 0.5, "stall_ticks": 3, "kv_pressure_valve": True}


@pytest.fixture(scope="module")
def four(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Any]:
    plan = RankPlan(
        world=4,
        passes=PASSES,
        max_delay_passes=9,
        env={"DENSEGATE_SGLANG": json.dumps(SETTINGS)},
        trace=_trace(4, idle=(3,)),
        idle_ranks=(3,),
    )
    return run_ranks(plan, tmp_path_factory.mktemp("model"), GROUP_TIMEOUT_S)


def _shared(payload: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [rec[:5] for rec in payload["records"]]


@pytest.mark.parametrize("group", ["paced", "unsized", "two", "four"])
def test_every_rank_logs_the_same_decisions(group: str, request: pytest.FixtureRequest) -> None:
    got = request.getfixturevalue(group)
    first = _shared(got[0])
    assert len(first) == PASSES
    for payload in got.values():
        assert _shared(payload) == first
        assert payload["ticks"] == PASSES  # one collective per pass, on every rank
    # The decisions are not all alike: the run exercises holds (the hold mode) or PACED
    # fires, and several reasons.
    reasons = {rec[2] for rec in first}
    fires = "PACED" if group in ("paced", "unsized") else "HOLD"
    assert fires in reasons and len(reasons) >= 3, reasons


@pytest.mark.parametrize("group", ["paced", "unsized", "two", "four"])
def test_decisions_agree_with_the_dp_spec(group: str, request: pytest.FixtureRequest) -> None:
    got = request.getfixturevalue(group)
    for payload in got.values():
        assert dp_spec_mismatches(payload["records"], payload["config"], payload["world"]) == []


@pytest.mark.parametrize("group", ["two", "four"])
def test_no_hold_run_reaches_the_budget(group: str, request: pytest.FixtureRequest) -> None:
    payload = request.getfixturevalue(group)[0]
    assert longest_hold_run(payload["records"]) <= payload["config"].max_hold_passes - 1


def test_the_default_paces_at_the_room_and_never_holds_while_work_waits(
    paced: dict[int, Any],
) -> None:
    for payload in paced.values():
        cfg = payload["config"]
        assert cfg.pace_tokens == cfg.dense_tokens == 2048  # one pass's room, the default
        for rec in payload["records"]:
            assert rec[1] or rec[4][WAITING_RANKS] == 0, rec  # HOLD only with nothing waiting
        assert payload["finished"] == payload["submitted"]
    records = list(paced[0]["records"])
    k = next(i for i, r in enumerate(records) if r[2] == "PACED")
    tick, _, _, _, reduced, local = records[k]
    records[k] = (tick, False, "HOLD", 1, reduced, local)  # a hold while work waits
    assert dp_spec_mismatches(records, paced[0]["config"], paced[0]["world"])


def test_the_busy_wait_is_sized_from_the_groups_slots(
    paced: dict[int, Any], unsized: dict[int, Any]
) -> None:
    """With the flag, from it at construction; without it, at the first pass from the ranks'
    run-time slots summed by the pass's all-gather: 3/4 of 2 x 128 on every rank (a rank's
    own 128 alone would give 96)."""
    for payload in paced.values():
        assert payload["busy_at_start"] == payload["config"].busy_decodes == 192
    for payload in unsized.values():
        assert payload["busy_at_start"] is None
        assert payload["config"].busy_decodes == 192


def test_the_first_pass_is_decided_with_the_busy_wait_sized() -> None:
    """Sized at the first pass before its decision: 2 ranks (in-process exchange), flag unset,
    8 run-time slots each (busy 12), 24 decodes, rank 1 with nothing waiting: the first pass
    is already the busy wait's HOLD on both ranks (sized after it, it would fire PACED)."""
    from densegate.integrations.sglang.observe import PassObservation
    from tests.support.sglang_load import Limits
    from tests.support.sglang_priced import Exchange, densegate_delayer

    ex, unsized = Exchange(2), Limits(max_running_requests=0)
    seen: dict[int, tuple[Any, ...]] = {}

    def rank(r: int) -> None:
        d = densegate_delayer(2, r, ex, 6, unsized)
        assert d.gate_config.busy_decodes is None
        d.observe_pass(PassObservation(100 if r == 0 else 0, 12, False, running_slots=8))
        d._negotiate_should_allow_prefill(local_prefillable=r == 0, token_usage=0.5)
        seen[r] = (d.gate_config.busy_decodes, d.log[0].fire, d.log[0].reason.name)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=GROUP_TIMEOUT_S)
    assert seen == {0: (12, False, "HOLD"), 1: (12, False, "HOLD")}


def test_the_conformance_kit_judges_the_two_rank_run(two: dict[int, Any]) -> None:
    payload = two[0]
    assert payload["config"].dense_tokens == 2048  # SGLang's chunk size after DP attention
    assert kit_judge(payload["records"], payload["config"], payload["world"]) == {}


def test_the_judges_catch_a_tampered_decision(two: dict[int, Any]) -> None:
    payload = two[0]
    records = list(payload["records"])
    k = next(i for i, r in enumerate(records) if r[2] == "HOLD")
    tick, _, _, _, reduced, local = records[k]
    records[k] = (tick, True, "DENSE", 0, reduced, local)
    assert dp_spec_mismatches(records, payload["config"], payload["world"])
    assert "agreement" in kit_judge(records, payload["config"], payload["world"])


def test_the_settings_variable_reaches_every_rank(four: dict[int, Any]) -> None:
    reasons = {rec[2] for rec in four[0]["records"]}
    assert {"KV_PRESSURE", "STALL"} <= reasons, reasons  # both valves fired, on every rank
    for payload in four.values():
        cfg = payload["config"]
        assert (cfg.target_fill, cfg.stall_ticks, cfg.kv_pressure_valve) == (0.5, 3, True)
        assert cfg.max_hold_passes == 9 and payload["world"] == 4


def test_an_idle_rank_joins_every_pass(four: dict[int, Any]) -> None:
    idle = four[3]
    assert idle["submitted"] == 0
    assert idle["ticks"] == PASSES
    assert not any(idle["negotiated_locally"])  # it only ever joined through finalize
    assert all(rec[5] == (1, 0, 0, 0, 0, 0, 0, 0, 1) for rec in idle["records"])  # vacant
    assert any(four[0]["negotiated_locally"])


def test_work_routed_to_busy_ranks_finishes(two: dict[int, Any], four: dict[int, Any]) -> None:
    for got in (two, four):
        for payload in got.values():
            assert payload["finished"] == payload["submitted"]
