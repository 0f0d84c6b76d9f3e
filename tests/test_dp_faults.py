"""A rank dies, hangs or is slow: its requests finish on the survivors, which stay aligned.

Ranks are threads (tests/support/dp_threads.py) running the same agreement the torch
collective runs; real processes are in test_dp_fault_injection.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import Any

import pytest

from densegate.cli.dp import parse_faults
from densegate.impl.dp.collective import StoreUnavailable
from densegate.impl.dp.config import DPConfig
from densegate.impl.dp.membership import STREAM_KEY, Agreement
from densegate.impl.dp.readmission import StreamView
from densegate.impl.dp.report import RankReport
from densegate.impl.dp.summary import merge_reports
from densegate.impl.engine import Engine, EngineConfig
from densegate.impl.traces.replay import run_trace
from densegate.impl.traces.workload import synthetic_trace
from densegate.lab.dp.inject import Fault
from densegate.lab.dp.phases import bench_phases
from tests.support.dp_small import ENGINE, MIXED_REASONS, small_trace
from tests.support.dp_threads import GroupRun, ThreadCollective, run_group


def coordinated(run: GroupRun) -> dict[int, RankReport]:
    return {r: reps[0] for r, reps in run.reports.items()}


def summary(run: GroupRun, world: int, n: int) -> dict[str, Any]:
    dicts = {r: [x.as_dict() for x in v] for r, v in run.reports.items()}
    return merge_reports(world, dicts, n, 0.0)


def check_survivors(run: GroupRun, world: int, n: int, dead: list[int]) -> dict[str, Any]:
    """Every request ended exactly once; survivors agree, hold nothing, leak no KV block."""
    reps = coordinated(run)
    assert sorted(reps) == sorted(set(range(world)) - set(dead))
    first = reps[min(reps)]
    for rep in reps.values():
        assert rep.decisions == first.decisions  # D1 for the survivors, before and after
        assert rep.assignment == first.assignment
        assert rep.alignment == first.alignment
        assert rep.readmitted == first.readmitted and rep.ended_on_dead == first.ended_on_dead
        assert rep.unfinished == []
        assert rep.kv_blocks == [ENGINE.num_blocks, ENGINE.num_blocks]
        assert [t for t, _, _ in rep.decisions] == list(range(len(rep.decisions)))
    on_dead = {rid for rid, r in first.assignment.items() if r in dead}
    assert on_dead == set(first.ended_on_dead)  # only what ended there stays there
    s = summary(run, world, n)
    assert s["unaccounted"] == [] and s["duplicated"] == [] and s["lost"] == 0
    assert s["finished"] + s["rejected"] == n
    assert s["decisions_agree"] and s["alignment_agree"]
    mixed = first.alignment["mixed_by_reason"]
    assert set(mixed) <= MIXED_REASONS
    return s


def test_a_dead_rank_s_requests_finish_on_the_survivors() -> None:
    n = 40
    trace = small_trace(n, seed=3, rate=0.5)  # arrivals keep coming after the crash
    config = DPConfig(ENGINE, phases=bench_phases(ENGINE))
    run = run_group(3, trace, config, faults=[Fault(1, 12)])
    s = check_survivors(run, 3, n, dead=[1])
    reps = coordinated(run)
    assert all(len(run.reports[r]) == 1 for r in reps)  # no baselines after a fault
    f = reps[0].faults[0]
    assert f["tick"] == 12 and f["dead_ranks"] == [1] and f["survivors"] == [0, 2]
    moved = reps[0].readmitted
    assert moved and all(src == 1 and dst in (0, 2) for src, dst in moved.values())
    assert {dst for _, dst in moved.values()} == {0, 2}  # round-robin over the survivors
    assert s["readmitted"] == len(moved) and s["failure"]["readmitted_finished"] == len(moved)
    assert s["failure"]["ticks_before"] == 12 and s["failure"]["ticks_after"] > 0
    # one aligned decision per tick over two ranks after the fault: HOLDs happen there too
    after = [reason for t, _, reason in reps[0].decisions if t >= 12]
    assert after and reps[0].local_decisions == []


def test_survivors_that_disagree_on_whether_a_collective_completed_keep_one_history() -> None:
    """Rank 2's call fails after it completed on ranks 0 and 1 (as when a rank dies inside
    it): rank 2 adopts their result, and all three regroup with no request moved."""
    n = 30
    trace = small_trace(n, seed=11, rate=2.0)
    run = run_group(3, trace, DPConfig(ENGINE), late_failure=(2, 12))
    check_survivors(run, 3, n, dead=[])
    reps = coordinated(run)
    assert [reps[r].faults[0]["adopted"] for r in sorted(reps)] == [False, False, True]
    assert all(rep.faults[0]["dead_ranks"] == [] for rep in reps.values())
    assert reps[0].readmitted == {}


@pytest.mark.parametrize("router", ["round-robin", "least-loaded"])
def test_two_ranks_die_one_inside_a_collective(router: str) -> None:
    n = 40
    trace = small_trace(n, seed=5, rate=1.0)
    faults = (Fault(1, 6, "collective", 0.001), Fault(3, 15))
    run = run_group(4, trace, DPConfig(ENGINE, router=router), faults=faults)
    s = check_survivors(run, 4, n, dead=[1, 3])
    reps = coordinated(run)
    assert [f["dead_ranks"] for f in reps[0].faults] == [[1], [3]]
    assert s["failure"]["agreements"] == 2


def test_a_hung_rank_is_noticed_at_the_timeout_and_its_requests_move() -> None:
    n = 20
    trace = small_trace(n, seed=5)
    run = run_group(2, trace, DPConfig(ENGINE), timeout_s=0.3, faults=[Fault(1, 4, "hang")])
    check_survivors(run, 2, n, dead=[1])
    f = coordinated(run)[0].faults[0]
    assert f["tick"] == 4 and f["dead_ranks"] == [1]


def test_a_slow_rank_below_the_timeout_is_waited_for() -> None:
    n = 20
    trace = small_trace(n, seed=6)
    run = run_group(3, trace, DPConfig(ENGINE), timeout_s=3.0, faults=[Fault(1, 5, "slow", 0.4)])
    check_survivors(run, 3, n, dead=[])
    assert all(rep.faults == [] for rep in coordinated(run).values())


def test_a_rank_slower_than_timeout_and_grace_is_excluded_and_ends_nothing_twice() -> None:
    n = 30
    trace = small_trace(n, seed=8, rate=1.0)
    slow = [Fault(1, 20, "slow", 1.5)]
    run = run_group(3, trace, DPConfig(ENGINE), timeout_s=0.3, grace_s=0.3, faults=slow)
    assert run.excluded == [1]
    s = check_survivors(run, 3, n, dead=[1])
    assert s["failure"]["ended_on_dead"] > 0  # it had finished some before it stalled


def _float64_engine() -> EngineConfig:
    return EngineConfig(
        max_num_seqs=6,
        max_num_batched_tokens=96,
        block_size=8,
        num_blocks=96,
        max_model_len=96,
        max_hold_passes=4,
        runner="torch",
        dtype="float64",
    )


@pytest.mark.usefixtures("one_torch_thread")
def test_the_caller_sees_each_token_once_and_greedy_outputs_match_one_rank() -> None:
    """float64: a re-admitted request recomputes prompt + the tokens already streamed and
    streams only what follows; the caller's view equals a single-rank run, token for token."""
    engine = _float64_engine()
    trace = synthetic_trace(10, 2, rate=1.0, prompt_median=20, output_median=10, max_model_len=96)
    config = DPConfig(engine, keep_outputs=True)
    run = run_group(3, trace, config, faults=[Fault(1, 9)])
    single = Engine(engine)
    run_trace(single, trace, seed=0)
    want = {str(i): single.request(str(i)).output_token_ids for i in range(len(trace))}
    reps = coordinated(run)
    outputs = {rid: toks for rep in reps.values() for rid, toks in (rep.outputs or {}).items()}
    seen = {rid: toks for rep in reps.values() for rid, toks in rep.seen.items()}
    assert any(seen.values()), "no re-admitted request had streamed tokens: a weak schedule"
    for rid, prefix in seen.items():
        assert prefix == want[rid][: len(prefix)]  # what the dead rank had streamed
    ended = set(reps[0].ended_on_dead)
    assert {rid: want[rid] for rid in outputs} == outputs
    assert set(outputs) | ended == set(want)
    view = StreamView()  # the caller: the dead rank's stream up to its seal, then the rest
    for r in (1, 0, 2):
        view.add(r, run.store.get(STREAM_KEY.format(0, r)))
    assert view.tokens == want  # each position exactly once, none repeated
    assert len({t for toks in want.values() for t in toks}) > 3


def test_dp_crash_spec_parses_and_names_bad_input() -> None:
    assert parse_faults("1:40") == (Fault(1, 40),)
    assert parse_faults("0:3:collective:0.002, 2:9:slow:1") == (
        Fault(0, 3, "collective", 0.002),
        Fault(2, 9, "slow", 1.0),
    )
    assert parse_faults("1:0:hang@2,0:4@1") == (Fault(1, 0, "hang", 0.0, 2), Fault(0, 4, phase=1))
    for bad in ("1", "a:3", "1:2:explode", "1:2:slow:x:y", "1:2@", "1:2@x", "1:2:slow:inf"):
        with pytest.raises(ValueError, match=rf"^DENSEGATE_DP_CRASH: {bad!r}"):
            parse_faults(bad)


def test_summary_flags_a_request_ended_twice() -> None:
    n = 20
    run = run_group(3, small_trace(n, seed=3), DPConfig(ENGINE), faults=[Fault(1, 8)])
    dicts = {r: [x.as_dict() for x in v] for r, v in run.reports.items()}
    counts = collections.Counter(rid for d in dicts.values() for rid in d[0]["finished"])
    rid = next(iter(counts))
    other = next(r for r in dicts if rid not in dicts[r][0]["finished"])
    dicts[other][0]["finished"].append(rid)
    assert merge_reports(3, dicts, n, 0.0)["duplicated"] == [rid]


class _NoStore(ThreadCollective):
    def recover(self, calls: int, total: Sequence[int] | None) -> Agreement:
        raise StoreUnavailable("the store died with rank 0")


def test_without_the_store_survivors_finish_their_own_and_report_rank_0_s_as_lost() -> None:
    """Hand-started ranks keep the store in rank 0: if it dies nobody can agree, so each
    survivor finishes what it holds with its local gate and names rank 0's requests lost."""
    n = 30
    trace = small_trace(n, seed=4, rate=1.0)
    run = run_group(3, trace, DPConfig(ENGINE), member=_NoStore, faults=[Fault(0, 8)])
    reps = coordinated(run)
    assert sorted(reps) == [1, 2]
    lost = reps[1].lost
    assert lost and lost == reps[2].lost
    assert lost == sorted((rid for rid, r in reps[1].assignment.items() if r == 0), key=int)
    for rep in reps.values():
        assert rep.faults[0]["store_lost"] and rep.local_decisions and rep.unfinished == []
        assert rep.kv_blocks == [ENGINE.num_blocks, ENGINE.num_blocks]
    s = summary(run, 3, n)
    assert s["lost"] == len(lost) and s["finished"] + s["lost"] == n
    assert s["unaccounted"] == [] and s["duplicated"] == []
