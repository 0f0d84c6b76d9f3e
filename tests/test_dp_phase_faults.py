"""A rank dies in any phase, at any tick, or between two phases: nothing is lost.

Ranks are threads (tests/support/dp_threads.py) over the agreement the torch
collective runs; the phases are the CLI's (coordinated, then the two
uncoordinated baselines). Every phase that ran must account for every request
exactly once, and the caller must have been streamed each output position of
each phase exactly once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import pytest

from densegate.impl.dp.config import DPConfig
from densegate.impl.dp.membership import STREAM_KEY, Agreement
from densegate.impl.dp.readmission import StreamView
from densegate.impl.dp.report import RankReport
from densegate.impl.dp.summary import merge_reports
from densegate.lab.dp.inject import Fault
from densegate.lab.dp.phases import bench_phases
from tests.support.dp_small import ENGINE, small_trace
from tests.support.dp_threads import GroupRun, ThreadCollective, ThreadGroup, run_group

PHASES = bench_phases(ENGINE)
NAMES = [p.name for p in PHASES]
CONFIG = DPConfig(ENGINE, phases=PHASES)


def streams(run: GroupRun, world: int) -> dict[str, dict[int, bytes]]:
    """What the launcher reads at the end: every rank's stream of every phase."""
    store = run.store
    out: dict[str, dict[int, bytes]] = {}
    for k, name in enumerate(NAMES):
        keys = {r: STREAM_KEY.format(k, r) for r in range(world)}
        out[name] = {r: store.get(key) if store.check([key]) else b"" for r, key in keys.items()}
    return out


def summary(
    run: GroupRun, world: int, n: int, reports: dict[int, list[RankReport]] | None = None
) -> dict[str, Any]:
    dicts = {r: [x.as_dict() for x in v] for r, v in (reports or run.reports).items()}
    return merge_reports(world, dicts, n, 0.0, None, streams(run, world))


def dead_in(rep: RankReport) -> set[int]:
    return {d for f in rep.faults for d in f["dead_ranks"]}


def check_every_phase(run: GroupRun, world: int, n: int, ran: int) -> dict[str, Any]:
    """Phases ``[0, ran)`` ran; each ended every request once, on the survivors if need
    be, left no request unfinished or KV block taken, and streamed each position once."""
    s = summary(run, world, n)
    assert list(s["accounting"]) == NAMES[:ran]
    assert s["unaccounted"] == [] and s["duplicated"] == [] and s["lost"] == 0
    for k, name in enumerate(NAMES[:ran]):
        acc = s["accounting"][name]
        assert acc["finished"] + acc["rejected"] == n, name
        reps = {r: reps[k] for r, reps in run.reports.items() if len(reps) > k}
        first = reps[min(reps)]
        for rep in reps.values():
            assert rep.unfinished == [] and rep.kv_blocks == [ENGINE.num_blocks] * 2
            assert rep.assignment == first.assignment
            assert dead_in(rep) == dead_in(first)
        order = list(dict.fromkeys(d for f in first.faults for d in f["dead_ranks"]))
        view = StreamView()  # the caller: the dead ranks' streams up to their seals first
        for r in order + [r for r in range(world) if r not in order]:
            view.add(r, streams(run, world)[name][r])
        ordered = sorted(small_trace(n, SEED, RATE), key=lambda q: q.arrival_pass)
        want = {str(i): q.output_len for i, q in enumerate(ordered)}
        assert {rid: len(t) for rid, t in view.tokens.items()} == want, name
    assert s["decisions_agree"] and s["alignment_agree"]
    return s


SEED, RATE, N = 3, 0.5, 30


@pytest.mark.parametrize("phase", [1, 2])
@pytest.mark.parametrize("tick", [0, 9])
@pytest.mark.parametrize("mode", ["exit", "collective"])
def test_a_rank_dying_in_a_later_phase_loses_nothing(phase: int, tick: int, mode: str) -> None:
    """Tick 0 dies before the phase's first collective (or inside it)."""
    fault = Fault(1, tick, mode, 0.001 if mode == "collective" else 0.0, phase)
    run = run_group(3, small_trace(N, SEED, RATE), CONFIG, faults=[fault])
    assert [len(run.reports[r]) for r in (0, 2)] == [phase + 1] * 2  # stopped after it
    assert len(run.reports[1]) == phase  # it reported the phases it finished
    s = check_every_phase(run, 3, N, phase + 1)
    f = s["failure"]
    assert f["phase"] == NAMES[phase] and f["dead_ranks"] == [1] and f["noticed_by_survivors"]
    for r in (0, 2):
        assert [bool(rep.faults) for rep in run.reports[r]] == [False] * phase + [True]
    assert [row["status"] for row in s["ranks"]] == [
        "survived",
        f"dead ({NAMES[phase]})",
        "survived",
    ]


def test_the_phase_a_rank_died_in_hands_over_only_that_phase_s_requests() -> None:
    """The reproducer of issue 26: survivors once read the coordinated phase's "ended"
    records for phase 2 and re-admitted nothing. Now phase 2's requests in flight on the
    dead rank are re-admitted and finish on the survivor."""
    run = run_group(2, small_trace(N, SEED, RATE), CONFIG, faults=[Fault(1, 14, "exit", 0, 1)])
    s = check_every_phase(run, 2, N, 2)
    rep = run.reports[0][1]
    assert rep.readmitted and all(src == 1 and dst == 0 for src, dst in rep.readmitted.values())
    assert s["accounting"][NAMES[1]]["readmitted"] == len(rep.readmitted)


class _Counting(ThreadCollective):
    """Remembers every member it made, to read how many calls a healthy run took."""

    made: ClassVar[list[ThreadCollective]] = []

    def __init__(self, group: ThreadGroup, rank: int) -> None:
        super().__init__(group, rank)
        _Counting.made.append(self)


def _calls_of(config: DPConfig, world: int) -> int:
    _Counting.made.clear()
    run_group(world, small_trace(N, SEED, RATE), config, member=_Counting)
    (calls,) = {c.calls for c in _Counting.made}
    return calls


def test_a_lagger_that_failed_a_phase_s_last_call_applies_the_agreement_in_the_next() -> None:
    """Rank 2's last call of phase 0 fails after it completed everywhere (as when a rank
    dies inside it): the others are already in phase 1's first call. Calls count over
    every phase, so rank 2 adopts the result, ends phase 0, and applies the agreement at
    phase 1's first call like the others: one history, one fault, nobody excluded."""
    last = _calls_of(DPConfig(ENGINE, phases=PHASES[:1]), 3) - 1
    run = run_group(3, small_trace(N, SEED, RATE), CONFIG, late_failure=(2, last))
    assert run.excluded == [] and sorted(run.reports) == [0, 1, 2]
    for reps in run.reports.values():
        assert [bool(rep.faults) for rep in reps] == [False, True]
        (f,) = reps[1].faults
        assert f["tick"] == 0 and f["dead_ranks"] == [] and f["survivors"] == [0, 1, 2]
    assert [run.reports[r][1].faults[0]["adopted"] for r in range(3)] == [False, False, True]
    check_every_phase(run, 3, N, 2)


def test_a_lagger_of_the_run_s_last_call_adopts_it_from_ranks_that_left() -> None:
    """The last call of the last phase fails on rank 2 only: the others have left (their
    left mark carries the result), so rank 2 adopts it at once instead of waiting out the
    grace and excluding ranks that merely finished."""
    last = _calls_of(CONFIG, 3) - 1
    run = run_group(3, small_trace(N, SEED, RATE), CONFIG, late_failure=(2, last), grace_s=30)
    assert run.excluded == [] and sorted(run.reports) == [0, 1, 2]
    (f,) = run.reports[2][-1].faults
    assert f["left"] == [0, 1] and f["dead_ranks"] == [] and f["adopted"]
    assert all(not rep.faults for r in (0, 1) for rep in run.reports[r])
    check_every_phase(run, 3, N, 3)


def test_a_rank_dead_after_its_last_call_but_before_reporting_is_counted_from_its_stream() -> None:
    """Nobody's collective failed (it died after the phase's last call), so no survivor
    took anything over: its stream, as the launcher reads it, shows every request of the
    phase ended there, and the summary names the failure."""
    run = run_group(3, small_trace(N, SEED, RATE), CONFIG)
    reports = {r: list(reps) for r, reps in run.reports.items()}
    reports[1] = reports[1][:2]  # rank 1 died after the run's last call, before its report
    s = summary(run, 3, N, reports)
    assert s["unaccounted"] == [] and s["duplicated"] == []
    ended = run.reports[1][2].finished + run.reports[1][2].rejected
    assert s["accounting"][NAMES[2]]["ended_on_dead"] == len(ended) > 0
    assert s["failure"]["phase"] == NAMES[2] and not s["failure"]["noticed_by_survivors"]
    assert s["failure"]["dead_ranks"] == [1] and not s["healthy"]
    without = merge_reports(3, {r: [x.as_dict() for x in v] for r, v in reports.items()}, N, 0.0)
    # without the streams, what it ended is named unaccounted, never silently counted
    assert without["unaccounted"] == [f"{NAMES[2]}:{rid}" for rid in sorted(ended, key=int)]


class _Recording(ThreadCollective):
    agreements: ClassVar[list[Agreement]] = []

    def recover(self, calls: int, total: Sequence[int] | None) -> Agreement:
        agreed = super().recover(calls, total)
        _Recording.agreements.append(agreed)
        return agreed


def test_an_agreement_carries_the_dead_rank_s_stream_of_the_phase_it_is_applied_in() -> None:
    _Recording.agreements.clear()
    trace = small_trace(N, SEED, RATE)
    run_group(3, trace, CONFIG, member=_Recording, faults=[Fault(2, 6, phase=2)])
    assert {a.phase for a in _Recording.agreements} == {2}
    assert all(set(a.streams) == {2} for a in _Recording.agreements)
