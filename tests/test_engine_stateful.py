"""The Engine's public calls in any order: every request ends exactly once, KV is conserved.

Hypothesis interleaves ``add_request`` (automatic ids and callers' ids, some
colliding, some inadmissible), ``abort`` at any point (also between ``plan()``
and ``execute()``), ``plan``/``decide``/``execute`` with the gate's or an
imposed decision, stale ``execute`` calls, ``step`` and ``generate``, while the
runner fails at random (it raises, or returns too few, too many or
out-of-vocabulary tokens) under a drawn ``runner_retries``. Every output is
counted: a request must be reported ended exactly once, and, at the end,
every request must have been; no running request is ever left with nothing
to run. The twin at the bottom breaks the failure handling and sees it caught.
"""

from __future__ import annotations

from collections import Counter
from typing import ClassVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from densegate.impl import Engine, EngineConfig, NullRunner, RequestOutput, RequestStatus
from densegate.impl.gate import Decision, Reason
from densegate.impl.sched.batch import ScheduledBatch
from densegate.impl.sched.failures import PassFailed
from densegate.impl.sched.plan import PassPlan
from densegate.impl.sched.scheduler import Scheduler

CALLER_IDS = ["0", "1", "2", "5", "x", "y"]
"""Callers' ids: digits that automatic ids would take, and others."""


@st.composite
def configs(draw: st.DrawFn) -> EngineConfig:
    chunked = draw(st.booleans())
    seqs = draw(st.integers(1, 4))
    max_len = draw(st.integers(4, 16))
    budget = draw(st.integers(max(seqs, 1 if chunked else max_len), max(seqs, max_len) + 8))
    block = draw(st.sampled_from([1, 2, 4]))
    per_seq = -(-max_len // block)
    return EngineConfig(
        max_num_seqs=seqs,
        max_num_batched_tokens=budget,
        block_size=block,
        num_blocks=draw(st.integers(max(1, per_seq // 2), 2 * per_seq)),  # tight: preemption
        max_model_len=max_len,
        enable_chunked_prefill=chunked,
        dense_tokens=draw(st.integers(1, budget)),
        max_hold_passes=draw(st.integers(1, 4)),
        gate_enabled=draw(st.booleans()),
        pass_log_size=4,
        runner_retries=draw(st.integers(0, 2)),
    )


# Mostly admissible; an empty or too long prompt, or max_tokens < 1, ends REJECTED.
PROMPTS = (st.integers(1, 4) | st.integers(0, 12)).map(lambda n: [3] * n)
LIMITS = st.integers(1, 4) | st.integers(-1, 8)
DECISIONS = st.sampled_from(["gate", "gate", "fire", "hold"])


PATHS = (
    "collision",
    "deferred abort",
    "abort at once",
    "stale execute",
    "generate",
    "rejected",
    "failure aborted",
    "failure retried",
)
FAULTS = ("raise", "too few", "too many", "out of vocabulary")
VOCAB = 8


class FlakyRunner(NullRunner):
    """Fails the way ``fail_next`` says, one failure per call, then runs as ``NullRunner``."""

    def __init__(self) -> None:
        super().__init__(token=1)
        self.config = type("Vocab", (), {"vocab_size": VOCAB})()
        self.fail_next: list[str] = []

    def execute(self, batch: ScheduledBatch) -> list[int]:
        tokens = list(super().execute(batch))
        fault = self.fail_next.pop(0) if self.fail_next else None
        if fault == "raise":
            raise RuntimeError("out of memory")
        if fault == "too few":
            return tokens[:-1]
        if fault == "too many":
            return [*tokens, 1]
        if fault == "out of vocabulary":
            return [VOCAB] * len(tokens)
        return tokens


class EngineCalls(RuleBasedStateMachine):
    """The caller's view: ids it added, outputs it was given."""

    reached: ClassVar[Counter[str]] = Counter()
    """How often each of ``PATHS`` was taken, over a whole run."""

    @initialize(cfg=configs())
    def setup(self, cfg: EngineConfig) -> None:
        self.runner = FlakyRunner()
        self.eng = Engine(cfg, runner=self.runner)
        self.ids: list[str] = []
        self.ended: Counter[str] = Counter()
        self.plan: PassPlan | None = None
        self.stale: PassPlan | None = None
        self.pending: set[str] = set()
        """Aborts deferred by the open plan: they must have ended once it closes."""

    # -- requests --------------------------------------------------------------------
    def _added(self, rid: str) -> None:
        assert rid not in self.ids, f"id {rid!r} handed out twice"
        self.ids.append(rid)

    @rule(prompt=PROMPTS, most=LIMITS)
    def add_auto(self, prompt: list[int], most: int) -> None:
        self._added(self.eng.add_request(prompt, most))

    @rule(prompt=PROMPTS, most=LIMITS, rid=st.sampled_from(CALLER_IDS))
    def add_with_id(self, prompt: list[int], most: int, rid: str) -> None:
        if rid in self.ids:
            with pytest.raises(ValueError, match=f"request_id {rid!r} is already in use"):
                self.eng.add_request(prompt, most, request_id=rid)
            self.reached["collision"] += 1
        else:
            assert self.eng.add_request(prompt, most, request_id=rid) == rid
            self._added(rid)

    @precondition(lambda self: bool(self.ids))
    @rule(pick=st.integers(0, 63), live=st.booleans())
    def abort(self, pick: int, live: bool) -> None:
        pool = [r for r in self.ids if not self.eng.request(r).status.ended] if live else []
        pool = pool or self.ids
        rid = pool[pick % len(pool)]
        req = self.eng.request(rid)
        was_ended = req.status.ended
        ok = self.eng.abort(rid)
        assert not (was_ended and ok), f"abort({rid!r}) of an ended request returned True"
        assert self.eng.abort(rid) is False  # at most once, deferred or not
        if ok and self.plan is None:
            assert req.status is RequestStatus.ABORTED  # no open plan: ends at once
        if ok and not req.status.ended:
            self.pending.add(rid)
            self.reached["deferred abort"] += 1
        elif ok:
            self.reached["abort at once"] += 1

    @precondition(lambda self: self.plan is not None and self._runs(self.plan))
    @rule(pick=st.integers(0, 63))
    def abort_planned(self, pick: int) -> None:
        """Abort a request the open plan decodes, prefills or admits (bug 2's case)."""
        assert self.plan is not None
        runs = self._runs(self.plan)
        rid = runs[pick % len(runs)]
        assert self.eng.abort(rid) is (rid not in self.pending)
        assert self.eng.abort(rid) is False
        assert not self.eng.request(rid).status.ended
        self.pending.add(rid)
        self.reached["deferred abort"] += 1

    def _closed(self) -> None:
        """The open plan was executed or replaced: every deferred abort has ended."""
        assert all(self.eng.request(rid).status.ended for rid in self.pending)
        self.pending.clear()

    @staticmethod
    def _runs(plan: PassPlan) -> list[str]:
        reqs = [*plan.decodes, *(r for r, _ in (*plan.partials, *plan.admits))]
        return [r.request_id for r in reqs if not r.status.ended]

    @rule()
    def abort_unknown(self) -> None:
        with pytest.raises(KeyError, match="unknown request_id 'nope'"):
            self.eng.abort("nope")

    # -- passes ----------------------------------------------------------------------
    @rule(faults=st.lists(st.sampled_from(FAULTS), min_size=1, max_size=4))
    def fail_soon(self, faults: list[str]) -> None:
        """The runner's next calls fail (up to 4 in a row: past any drawn ``runner_retries``)."""
        self.runner.fail_next += faults

    def _failed(self, e: PassFailed) -> None:
        assert isinstance(e.__cause__, Exception), "the runner's error must be the cause"
        for rid in e.retrying:
            assert self.eng.request(rid).status is RequestStatus.RUNNING
        for rid in e.aborted:
            req = self.eng.request(rid)
            assert req.status is RequestStatus.ABORTED and "runner failed" in str(req.finish_reason)
        self.reached["failure aborted"] += bool(e.aborted)
        self.reached["failure retried"] += bool(e.retrying)

    def _count(self, outs: list[RequestOutput]) -> None:
        for o in outs:
            assert o.request_id in self.ids, f"output for an id never added: {o.request_id!r}"
            if o.finished:
                self.reached["rejected"] += o.status is RequestStatus.REJECTED
                self.ended[o.request_id] += 1
                assert self.ended[o.request_id] == 1, f"{o.request_id!r} ended twice"
                assert o.status.ended and o.reason and o.output_token_ids is not None
                req = self.eng.request(o.request_id)
                assert len(o.output_token_ids) <= max(req.max_tokens, 0)

    @rule()
    def plan_pass(self) -> None:
        if self.plan is not None:
            self.stale = self.plan
        self.plan = self.eng.plan()
        self._closed()

    @precondition(lambda self: self.plan is not None)
    @rule(how=DECISIONS)
    def execute(self, how: str) -> None:
        plan = self.plan
        assert plan is not None
        decision = {
            "fire": Decision(True, Reason.DENSE),
            "hold": Decision(False, Reason.HOLD),
        }.get(how) or self.eng.scheduler.decide(plan)
        try:
            self._count(self.eng.execute(plan, decision))
        except PassFailed as e:
            self._failed(e)
        self.plan, self.stale = None, plan
        self._closed()

    @precondition(lambda self: self.stale is not None)
    @rule()
    def execute_stale(self) -> None:
        before = (self.eng.scheduler.pass_index, self.eng.scheduler.blocks.num_free)
        with pytest.raises(ValueError, match="plan again"):
            self.eng.execute(self.stale, Decision(True, Reason.DENSE))  # type: ignore[arg-type]
        assert (self.eng.scheduler.pass_index, self.eng.scheduler.blocks.num_free) == before
        self.reached["stale execute"] += 1

    @rule()
    def step(self) -> None:
        try:
            self._count(self.eng.step())
        except PassFailed as e:
            self._failed(e)
        self.plan = None
        self._closed()

    @rule(prompts=st.lists(st.integers(1, 6).map(lambda n: [4] * n), max_size=3), most=LIMITS)
    def generate(self, prompts: list[list[int]], most: int) -> None:
        before = {m.request_id for m in self.eng.all_metrics()}
        if any(self.eng.rejection(p, most) for p in prompts):
            with pytest.raises(ValueError, match="cannot be served"):
                self.eng.generate(prompts, most)
            assert {m.request_id for m in self.eng.all_metrics()} == before
            return
        try:
            out: list[list[int]] | None = self.eng.generate(prompts, most)
        except RuntimeError as e:  # a failed pass aborted one of its prompts
            assert isinstance(e.__cause__, PassFailed) and "ended ABORTED" in str(e)
            out = None
        if prompts:  # it stepped: an open plan was dropped, its deferred aborts ended
            self.plan = None
            self._closed()
        new = [m for m in self.eng.all_metrics() if m.request_id not in before]
        assert len(new) == len(prompts) and all(m.status.ended for m in new)
        if out is not None:
            assert [len(o) for o in out] == [most] * len(prompts)
            assert all(m.status is RequestStatus.FINISHED for m in new)
            self.reached["generate"] += 1
        for m in new:  # generate's own requests end inside it: it consumed their outputs
            self._added(m.request_id)
            self.ended[m.request_id] += 1

    # -- what always holds -----------------------------------------------------------
    @invariant()
    def kv_conserved_and_no_request_lost(self) -> None:
        if not hasattr(self, "eng"):
            return
        sched = self.eng.scheduler
        sched.check_invariants()
        queued = {r.request_id for r in (*sched.waiting, *sched.running)}
        live = {rid for rid in self.ids if not self.eng.request(rid).status.ended}
        assert queued == live, f"live {sorted(live)} but queued {sorted(queued)}"
        assert all(self.ended[rid] == 0 or rid not in live for rid in self.ids)
        stuck = [r for r in sched.running if r.num_computed >= r.num_tokens]
        assert not stuck, f"running with nothing to run: {stuck}"

    def teardown(self) -> None:
        if not hasattr(self, "eng"):
            return
        self.runner.fail_next.clear()
        for _ in range(10_000):
            if not self.eng.has_unfinished():
                break
            self._count(self.eng.step())
        assert not self.eng.has_unfinished()
        assert self.ended == Counter(self.ids), "not every request was reported ended once"
        assert self.eng.scheduler.blocks.num_free == self.eng.config.num_blocks


def test_every_request_ends_exactly_once_whatever_the_caller_does() -> None:
    EngineCalls.reached = Counter()
    run_state_machine_as_test(EngineCalls, settings=settings(stateful_step_count=40))
    print(f"engine calls reached: {dict(sorted(EngineCalls.reached.items()))}")
    # Not vacuous: the paths the two bugs were on are taken.
    assert set(EngineCalls.reached) == set(PATHS), EngineCalls.reached


def test_the_check_catches_a_failed_pass_left_undone(monkeypatch: pytest.MonkeyPatch) -> None:
    """The twin: with ``Scheduler.undo`` a no-op (the hang of issue 26), the machine fails."""
    monkeypatch.setattr(Scheduler, "undo", lambda self, batch: None)
    quick = settings(
        stateful_step_count=40,
        max_examples=200,
        derandomize=True,
        phases=[p for p in settings().phases if p.name != "shrink"],
        suppress_health_check=list(HealthCheck),
    )
    with pytest.raises(AssertionError):
        run_state_machine_as_test(EngineCalls, settings=quick)
