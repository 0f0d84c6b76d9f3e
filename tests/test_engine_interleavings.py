"""The Engine's interleavings: two bugs found in review, reproduced as reported, and their fixes.

Bug 1: a caller's ``request_id="1"`` made every later automatic id collide.
Bug 2: ``abort`` between ``plan()`` and ``execute()`` lost a request (admitted in
the plan) or raised ``KeyError`` (decoding in the plan).
"""

from __future__ import annotations

from collections import Counter

import pytest

from densegate.impl import Engine, EngineConfig, NullRunner, Request, RequestStatus
from densegate.impl.sched.config import SchedulerConfig
from densegate.impl.sched.scheduler import Scheduler


def small(**kw: object) -> EngineConfig:
    base: dict[str, object] = dict(
        max_num_seqs=4, max_num_batched_tokens=16, block_size=4, num_blocks=16, max_model_len=32
    )
    base.update(kw)
    return EngineConfig(**base)  # type: ignore[arg-type]


def drain(eng: Engine, ended: Counter[str]) -> None:
    """Step until nothing is left, counting every end the engine reports."""
    for _ in range(1_000):
        if not eng.has_unfinished():
            break
        for out in eng.step():
            ended[out.request_id] += out.finished
    assert not eng.has_unfinished() and not eng.scheduler.has_work()
    eng.scheduler.check_invariants()
    assert eng.scheduler.blocks.num_free == eng.config.num_blocks


# -- bug 1: automatic ids --------------------------------------------------------------
def test_bug1_caller_id_1_does_not_block_automatic_ids() -> None:
    eng = Engine(small())
    mine = eng.add_request([1, 2], 2, request_id="1")
    autos = [eng.add_request([3], 1) for _ in range(3)]
    assert mine == "1" and "1" not in autos and len(set(autos)) == 3
    assert eng.generate([[4, 5], [6]], 2) == [[0, 0], [0, 0]]
    ended: Counter[str] = Counter()
    drain(eng, ended)
    assert ended == Counter({rid: 1 for rid in [mine, *autos]})
    assert all(eng.request(r).status is RequestStatus.FINISHED for r in [mine, *autos])


def test_bug1_a_caller_id_that_collides_is_named() -> None:
    eng = Engine(small())
    auto = eng.add_request([1], 1)
    with pytest.raises(ValueError, match=f"request_id '{auto}' is already in use"):
        eng.add_request([1], 1, request_id=auto)
    eng.add_request([1], 1, request_id="x")
    with pytest.raises(ValueError, match="request_id 'x' is already in use"):
        eng.add_request([2], 1, request_id="x")


def test_automatic_ids_keep_arrival_order() -> None:
    eng = Engine(small())
    for rid in ("2", "3"):
        eng.add_request([1], 1, request_id=rid)
    ids = [eng.add_request([1], 1) for _ in range(4)]
    assert ids == ["4", "5", "6", "7"]  # "2" and "3" (arrivals 0, 1) are the caller's
    seqs = [eng.request(r).seq_id for r in ["2", "3", *ids]]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)


# -- bug 2: abort between plan() and execute() -----------------------------------------
def _three_waiting() -> tuple[Engine, str, str, str]:
    eng = Engine(small(), runner=NullRunner(5))
    a, b, c = (eng.add_request([1, 2, 3], 3) for _ in range(3))
    return eng, a, b, c


def test_bug2_abort_of_a_request_admitted_in_the_plan() -> None:
    eng, a, b, c = _three_waiting()
    plan = eng.plan()
    assert [r.request_id for r, _ in plan.admits] == [a, b, c]
    assert eng.abort(b) and not eng.abort(b)  # deferred: ends when this pass does
    outs = eng.execute(plan, eng.scheduler.decide(plan))
    by_id = {o.request_id: o for o in outs}
    assert by_id[b].finished and by_id[b].status is RequestStatus.ABORTED
    assert by_id[b].new_token_ids == [5]  # the pass ran as planned and decided
    assert eng.request(c).status is RequestStatus.RUNNING
    eng.scheduler.check_invariants()
    ended = Counter({b: 1})
    drain(eng, ended)
    assert ended == Counter({a: 1, b: 1, c: 1})
    assert eng.request(b).status is RequestStatus.ABORTED
    assert [eng.request(r).status for r in (a, c)] == [RequestStatus.FINISHED] * 2


def test_bug2_abort_of_a_request_decoding_in_the_plan() -> None:
    eng, a, b, c = _three_waiting()
    eng.step()  # all three admitted, each with its first token
    plan = eng.plan()
    assert [r.request_id for r in plan.decodes] == [a, b, c]
    assert eng.abort(b)
    outs = eng.execute(plan, eng.scheduler.decide(plan))
    got = {o.request_id: o for o in outs}
    assert set(got) == {a, b, c}
    assert got[b].status is RequestStatus.ABORTED and got[b].output_token_ids == [5, 5]
    assert not got[a].finished and not got[c].finished
    ended = Counter({b: 1})
    drain(eng, ended)
    assert ended == Counter({a: 1, b: 1, c: 1})


def test_a_request_the_plan_does_not_run_ends_at_once() -> None:
    eng = Engine(small(max_num_seqs=1))
    a = eng.add_request([1], 4)
    b = eng.add_request([2], 4)
    plan = eng.plan()
    assert [r.request_id for r, _ in plan.admits] == [a]
    assert eng.abort(b)
    assert eng.request(b).status is RequestStatus.ABORTED
    outs = eng.execute(plan, eng.scheduler.decide(plan))
    assert [(o.request_id, o.status) for o in outs if o.finished] == [(b, RequestStatus.ABORTED)]


def test_a_deferred_abort_the_pass_finishes_ends_finished_once() -> None:
    eng = Engine(small())
    a = eng.add_request([1, 2], 1)
    plan = eng.plan()
    assert eng.abort(a)
    outs = eng.execute(plan, eng.scheduler.decide(plan))
    assert [(o.request_id, o.status, o.finished) for o in outs] == [
        (a, RequestStatus.FINISHED, True)
    ]
    assert not eng.has_unfinished() and eng.step() == []


def test_planning_again_applies_the_deferred_abort_first() -> None:
    eng, a, b, c = _three_waiting()
    eng.plan()
    eng.abort(a)
    plan = eng.plan()
    assert eng.request(a).status is RequestStatus.ABORTED
    assert [r.request_id for r, _ in plan.admits] == [b, c]
    outs = eng.execute(plan, eng.scheduler.decide(plan))
    assert outs[0].request_id == a and outs[0].status is RequestStatus.ABORTED


def test_execute_takes_only_the_open_plan_and_changes_nothing_otherwise() -> None:
    eng, *_ = _three_waiting()
    old = eng.plan()
    new = eng.plan()
    with pytest.raises(ValueError, match="plan for pass 0 is not the open plan"):
        eng.execute(old, eng.scheduler.decide(old))
    assert eng.scheduler.pass_index == 0 and len(eng.scheduler.waiting) == 3
    eng.execute(new, eng.scheduler.decide(new))
    with pytest.raises(ValueError, match="plan again"):
        eng.execute(new, eng.scheduler.decide(new))  # executed already
    assert eng.scheduler.pass_index == 1
    eng.scheduler.check_invariants()


def test_generate_keeps_other_requests_outputs_for_the_next_step() -> None:
    eng = Engine(small())
    x = eng.add_request([1, 2], 2)
    assert eng.generate([[3]], 1) == [[0]]
    outs = eng.step()
    assert any(o.request_id == x and o.finished for o in outs)
    assert not eng.has_unfinished()


# -- the scheduler underneath: a stale plan is refused before anything changes -----------
def _sched() -> tuple[Scheduler, list[Request]]:
    s = Scheduler(
        SchedulerConfig(
            max_num_seqs=4, max_num_batched_tokens=16, block_size=4, num_blocks=16,
            max_model_len=32,
        )
    )  # fmt: skip
    reqs = [Request(str(i), i, [1, 2, 3], 3, 0, 0.0) for i in range(3)]
    for r in reqs:
        s.add(r)
    return s, reqs


def _snapshot(s: Scheduler) -> tuple[object, ...]:
    return (
        s.pass_index,
        [r.request_id for r in s.waiting],
        [r.request_id for r in s.running],
        s.blocks.num_free,
        s.queued_tokens,
    )


@pytest.mark.parametrize("decoding", [False, True], ids=["admitted", "decoding"])
def test_scheduler_refuses_a_plan_that_runs_an_aborted_request(decoding: bool) -> None:
    s, (_, b, _) = _sched()
    if decoding:
        s.update(s.schedule(), [0, 0, 0], 0.0)
    plan = s.plan()
    s.abort(b)
    before = _snapshot(s)
    with pytest.raises(ValueError, match="stale: it runs request '1', aborted since"):
        s.commit(plan, s.decide(plan))
    assert _snapshot(s) == before
    s.update(s.schedule(), [0, 0], 0.0)
    s.check_invariants()


def test_scheduler_refuses_admits_that_no_longer_head_the_queue() -> None:
    s, (a, _, _) = _sched()
    plan = s.plan()
    s.waiting.rotate(1)  # as another plan()'s preemption would
    before = _snapshot(s)
    with pytest.raises(ValueError, match="admits request '0'"):
        s.commit(plan, s.decide(plan))
    assert _snapshot(s) == before and a.status is RequestStatus.WAITING
