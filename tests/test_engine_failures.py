"""A failed pass is a defined event (issue 26): undone, retried or aborted, always raised.

A runner that raises (a one-off out-of-memory) or returns a malformed result
used to leave the pass's requests RUNNING with ``num_computed == num_tokens``:
nothing to run, blocks held, ``has_unfinished()`` true forever. Now the
runner's part of the pass is undone, its requests run again (``runner_retries``)
or end ABORTED naming the failure, and ``PassFailed`` reaches the caller. Also
here: a second ``plan()`` in one pass no longer hides the first one's
preemptions from the counters and the pass log.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

import pytest

from densegate.impl import Engine, EngineConfig, NullRunner, RequestStatus, ScheduledBatch
from densegate.impl.gate import Decision, Reason
from densegate.impl.sched.failures import MalformedResult, PassFailed

Fault = Callable[[list[int]], Sequence[object]]


def _raise(tokens: list[int]) -> list[int]:
    raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")


FAULTS: dict[str, tuple[Fault, type[BaseException], str]] = {
    "raises": (_raise, RuntimeError, "CUDA out of memory"),
    "too few": (lambda t: t[:-1], MalformedResult, "which samples"),
    "too many": (lambda t: [*t, 0], MalformedResult, "which samples"),
    "not ints": (lambda t: [0.5] * len(t), MalformedResult, "not token ids"),
    "outside the vocabulary": (lambda t: [99] * len(t), MalformedResult, "outside the vocabulary"),
}


class Flaky(NullRunner):
    """``NullRunner`` (token 1, vocabulary 16) whose calls numbered in ``at`` go wrong."""

    def __init__(self, fault: Fault, at: Sequence[int]) -> None:
        super().__init__(token=1)
        self.config = type("Vocab", (), {"vocab_size": 16})()
        self.fault, self.at, self.calls = fault, set(at), 0

    def execute(self, batch: ScheduledBatch) -> Sequence[int]:
        self.calls += 1
        tokens = list(super().execute(batch))
        return self.fault(tokens) if self.calls in self.at else tokens


def _engine(runner: NullRunner, retries: int = 0) -> Engine:
    cfg = EngineConfig(
        max_num_seqs=4,
        max_num_batched_tokens=64,
        block_size=4,
        num_blocks=32,
        max_model_len=64,
        runner_retries=retries,
    )
    return Engine(cfg, runner=runner)


def _drain(eng: Engine) -> tuple[dict[str, tuple[RequestStatus, str | None]], list[PassFailed]]:
    """The README's drain loop, catching what it raises: every end, and every failure."""
    ended: dict[str, tuple[RequestStatus, str | None]] = {}
    failures: list[PassFailed] = []
    for _ in range(200):  # far more passes than these requests need: a hang fails here
        if not eng.has_unfinished():
            break
        try:
            outs = eng.step()
        except PassFailed as e:
            failures.append(e)
            continue
        for o in outs:
            if o.finished:
                assert o.request_id not in ended, f"{o.request_id} ended twice"
                ended[o.request_id] = (o.status, o.reason)
    assert not eng.has_unfinished() and not eng.scheduler.has_work()
    eng.scheduler.check_invariants()
    assert eng.scheduler.blocks.num_free == eng.config.num_blocks
    return ended, failures


@pytest.mark.parametrize("name", list(FAULTS))
def test_a_failed_pass_aborts_its_requests_with_the_reason(name: str) -> None:
    fault, cause, needle = FAULTS[name]
    eng = _engine(Flaky(fault, at=[3]))
    ids = [eng.add_request([2] * 6, 5) for _ in range(6)]
    ended, failures = _drain(eng)
    assert set(ended) == set(ids)
    (failure,) = failures
    assert isinstance(failure.__cause__, cause) and needle in str(failure.__cause__)
    assert failure.aborted and not failure.retrying
    for rid in ids:
        status, reason = ended[rid]
        if rid in failure.aborted:
            assert status is RequestStatus.ABORTED and reason is not None
            assert f"runner failed in pass {failure.index}" in reason and needle in reason
        else:
            assert status is RequestStatus.FINISHED
    assert eng.scheduler.counters.failed_passes == 1


def test_without_a_fault_nothing_fails() -> None:
    """The twin: the same run with a runner that never goes wrong raises nothing."""
    eng = _engine(Flaky(_raise, at=[]))
    ids = [eng.add_request([2] * 6, 5) for _ in range(6)]
    ended, failures = _drain(eng)
    assert failures == [] and eng.scheduler.counters.failed_passes == 0
    assert {s for s, _ in ended.values()} == {RequestStatus.FINISHED} and len(ended) == len(ids)


@pytest.mark.parametrize("name", list(FAULTS))
def test_a_retried_pass_gives_the_tokens_a_clean_run_gives(name: str) -> None:
    fault, _, _ = FAULTS[name]

    def run(runner: NullRunner) -> list[list[int]]:
        eng = _engine(runner, retries=1)
        ids = [eng.add_request([2] * (3 + i), 4 + i) for i in range(5)]
        _drain(eng)
        return [eng.request(r).output_token_ids for r in ids]

    flaky = Flaky(fault, at=[2, 5])
    assert run(flaky) == run(NullRunner(1))
    assert flaky.calls > 5  # both faults happened


def test_retries_are_bounded_then_the_requests_abort() -> None:
    eng = _engine(Flaky(_raise, at=range(1, 1_000)), retries=2)
    rid = eng.add_request([2] * 6, 5)
    ended, failures = _drain(eng)
    assert [(f.aborted, f.retrying) for f in failures] == [([], [rid]), ([], [rid]), ([rid], [])]
    assert ended[rid][0] is RequestStatus.ABORTED


def test_the_gate_decision_stands_and_the_log_marks_the_pass() -> None:
    eng = _engine(Flaky(_raise, at=[1]), retries=1)
    rid = eng.add_request([2] * 6, 3)
    plan = eng.plan()
    free = eng.scheduler.blocks.num_free
    with pytest.raises(PassFailed, match="pass 0 failed") as caught:
        eng.execute(plan, Decision(True, Reason.DENSE))
    sched = eng.scheduler
    req = eng.request(rid)
    assert caught.value.retrying == [rid] and req.status is RequestStatus.RUNNING
    assert req.num_computed == 0 and req.output_token_ids == []  # the runner's part, undone
    assert sched.pass_index == 1 and sched.counters.reasons[Reason.DENSE] == 1  # the gate's, kept
    assert sched.blocks.num_free == free - 2 and len(req.block_table) == 2  # admitted: held
    assert [r.failed for r in sched.pass_log] == [True]
    eng.step()
    assert req.output_token_ids == [1] and [r.failed for r in sched.pass_log] == [True, False]


def test_outputs_of_a_failed_pass_are_reported_by_the_next_step() -> None:
    eng = _engine(Flaky(_raise, at=[1]))
    bad = eng.add_request([], 3)  # rejected: reported by the pass that fails
    good = eng.add_request([2, 2], 3)
    with pytest.raises(PassFailed):
        eng.step()
    assert eng.has_unfinished()
    outs = {o.request_id: o.status for o in eng.step()}
    assert outs == {bad: RequestStatus.REJECTED, good: RequestStatus.ABORTED}
    assert not eng.has_unfinished()


def test_a_deferred_abort_still_ends_when_its_pass_fails() -> None:
    eng = _engine(Flaky(_raise, at=[2]), retries=3)
    rid = eng.add_request([2] * 4, 5)
    eng.step()
    plan = eng.plan()
    assert eng.abort(rid) and not eng.request(rid).status.ended  # deferred: the plan decodes it
    with pytest.raises(PassFailed):
        eng.execute(plan, eng.scheduler.decide(plan))
    assert eng.request(rid).status is RequestStatus.ABORTED
    ended, _ = _drain(eng)
    assert ended == {rid: (RequestStatus.ABORTED, "aborted")}


def test_ctrl_c_in_the_runner_is_raised_as_it_is_and_leaves_nothing_stuck() -> None:
    def interrupt(tokens: list[int]) -> list[int]:
        raise KeyboardInterrupt

    eng = _engine(Flaky(interrupt, at=[2]), retries=1)
    rid = eng.add_request([2] * 4, 3)
    eng.step()
    with pytest.raises(KeyboardInterrupt):
        eng.step()
    req = eng.request(rid)
    assert req.status is RequestStatus.RUNNING and req.num_computed < req.num_tokens
    ended, _ = _drain(eng)
    assert ended[rid][0] is RequestStatus.FINISHED


def test_generate_rides_out_a_retried_failure() -> None:
    assert _engine(Flaky(_raise, at=[2]), retries=1).generate([[2, 3], [4]], 3) == [[1] * 3] * 2


def test_generate_raises_when_a_failure_aborts_its_prompt() -> None:
    eng = _engine(Flaky(_raise, at=[2]))
    with pytest.raises(RuntimeError, match="ended ABORTED: runner failed in pass 1") as caught:
        eng.generate([[2, 3], [4]], 3)
    assert isinstance(caught.value.__cause__, PassFailed)
    assert not eng.has_unfinished() and eng.scheduler.blocks.num_free == eng.config.num_blocks


# -- issue 26, item 5: a second plan() in one pass ---------------------------------------
def _preempting_engine() -> Engine:
    """Two requests whose second decode needs a block that is not there: one is preempted."""
    cfg = EngineConfig(
        max_num_seqs=2, max_num_batched_tokens=8, block_size=2, num_blocks=3, max_model_len=8
    )
    eng = Engine(cfg)
    for _ in range(2):
        eng.add_request([1, 2], 4)
    eng.step()  # both admitted, one block each; both decode next
    return eng


@pytest.mark.parametrize("plans", [1, 2, 3])
def test_preemptions_are_counted_however_often_the_pass_is_planned(plans: int) -> None:
    eng = _preempting_engine()
    sched = eng.scheduler
    firsts = [eng.plan() for _ in range(plans)]
    assert len(firsts[0].preempted) == 1
    # Only the first plan preempts: any later one finds nothing left to preempt.
    assert all(p.preempted == [] for p in firsts[1:])
    eng.execute(firsts[-1], sched.decide(firsts[-1]))
    assert sched.counters.preemptions == 1 and sched.pass_log[-1].preempted == 1


def test_a_pass_without_preemption_counts_none() -> None:
    """The twin: the count is the preemptions that happened, not one per pass planned twice."""
    eng = Engine(EngineConfig(max_num_seqs=2, max_num_batched_tokens=8, max_model_len=8))
    eng.add_request([1, 2], 4)
    eng.step()
    eng.plan()
    plan = eng.plan()
    eng.execute(plan, eng.scheduler.decide(plan))
    assert eng.scheduler.counters.preemptions == 0 and eng.scheduler.pass_log[-1].preempted == 0
    assert Counter(r.preempted for r in eng.scheduler.pass_log) == Counter({0: 2})


# -- densegate run's summary: failed passes and unfinished requests, counted and named ------
def test_a_replay_goes_on_past_a_failed_pass_and_says_what_it_cost() -> None:
    from densegate.cli.run import _failures, _unfinished
    from densegate.impl.traces.replay import timed_run
    from densegate.impl.traces.workload import synthetic_trace

    trace = synthetic_trace(12, 1, prompt_median=6, output_median=4, max_model_len=32)
    s = timed_run(_engine(Flaky(_raise, at=[4])), trace)
    assert s["failed_passes"] == 1 and "CUDA out of memory" in s["failures"][0]
    (reason,) = s["aborted_reasons"]
    assert reason.startswith("runner failed in pass 3") and s["finished"] < 12
    assert f"{s['aborted_reasons'][reason]} aborted (runner failed" in _unfinished(s)
    assert _failures(s).startswith("1 (first: pass 3 failed")
    clean = timed_run(_engine(NullRunner(1)), trace)  # the twin: nothing failed, all finished
    assert (clean["failed_passes"], clean["finished"], _unfinished(clean)) == (0, 12, "-")


def test_rejected_requests_are_counted_by_reason() -> None:
    from densegate.cli.run import _unfinished
    from densegate.impl.traces.replay import timed_run

    eng = _engine(NullRunner(1))
    for _ in range(2):
        eng.add_request([2] * 70, 1)  # over max_model_len: rejected, not run
    s = timed_run(eng, [])
    assert s["rejected_reasons"] == {
        "prompt (70) + max_tokens (1) = 71 exceeds max_model_len (64)": 2
    }
    assert _unfinished(s).startswith("2 rejected (prompt (70)")


def test_densegate_run_exits_1_when_a_request_did_not_finish(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from densegate.cli.main import main

    argv = ["run", "--requests", "30", "--runner", "null", "--json"]
    assert main(argv) == 0  # the twin: a clean run
    assert json.loads(capsys.readouterr().out)["finished"] == 30
    calls = Counter[str]()
    execute = NullRunner.execute

    def once(self: NullRunner, batch: ScheduledBatch) -> Sequence[int]:
        calls["n"] += 1
        return _raise([]) if calls["n"] == 5 else execute(self, batch)

    monkeypatch.setattr(NullRunner, "execute", once)
    assert main(argv) == 1
    s = json.loads(capsys.readouterr().out)
    assert s["failed_passes"] == 1 and s["finished"] + s["ended_otherwise"]["ABORTED"] == 30
