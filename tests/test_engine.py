"""The Engine and Scheduler API: validation, outcomes of every request, honest observations."""

from __future__ import annotations

import dataclasses

import pytest

from densegate.impl import (
    Engine,
    EngineConfig,
    GateInput,
    NullRunner,
    Reason,
    Request,
    RequestStatus,
    Scheduler,
    SchedulerConfig,
)


def small(**kw: object) -> EngineConfig:
    base: dict[str, object] = dict(
        max_num_seqs=4, max_num_batched_tokens=16, block_size=4, num_blocks=16, max_model_len=32
    )
    base.update(kw)
    return EngineConfig(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kw", "needle"),
    [
        ({"max_num_seqs": 0}, "max_num_seqs"),
        ({"block_size": "16"}, "block_size"),
        ({"num_blocks": -1}, "num_blocks"),
        ({"max_num_batched_tokens": 2}, "max_num_batched_tokens"),
        ({"dense_tokens": 17}, "dense_tokens"),
        ({"enable_chunked_prefill": False}, "max_model_len"),
        ({"long_prefill_token_threshold": 0}, "long_prefill_token_threshold"),
        ({"max_hold_passes": 0}, "max_hold_passes"),
        ({"gate_enabled": "yes"}, "gate_enabled"),
        ({"pass_log_size": 0}, "pass_log_size"),
        ({"runner": "gpu"}, "runner"),
        ({"dtype": "int8"}, "dtype"),
        ({"device": ""}, "device"),
        ({"model": object()}, "model"),
    ],
)
def test_engine_config_names_the_bad_field(kw: dict[str, object], needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        small(**kw)


def test_defaults_give_a_working_engine() -> None:
    eng = Engine()
    assert eng.generate([[1, 2, 3], [4, 5]], 3) == [[0, 0, 0], [0, 0, 0]]
    assert not eng.has_unfinished()


@pytest.mark.parametrize(
    ("prompt", "max_tokens", "needle"),
    [
        ("abc", 2, "prompt_token_ids"),
        ([1, "a"], 2, "ints"),
        ([1, True], 2, "ints"),
        ([1, 2], 2.0, "max_tokens"),
    ],
)
def test_malformed_arguments_raise(prompt: object, max_tokens: object, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        Engine(small()).add_request(prompt, max_tokens)  # type: ignore[arg-type]


def test_request_ids_are_unique_strings() -> None:
    eng = Engine(small())
    eng.add_request([1], 1, request_id="a")
    with pytest.raises(ValueError, match="already in use"):
        eng.add_request([1], 1, request_id="a")
    with pytest.raises(ValueError, match="request_id"):
        eng.add_request([1], 1, request_id=7)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("prompt", "max_tokens", "needle"),
    [
        ([], 3, "empty prompt"),
        ([1, 2], 0, "max_tokens must be >= 1, got 0"),
        ([1] * 30, 5, "exceeds max_model_len"),
        ([-1, 2], 3, "token id -1 at position 0"),
    ],
)
def test_inadmissible_requests_end_rejected_with_a_reason(
    prompt: list[int], max_tokens: int, needle: str
) -> None:
    eng = Engine(small())
    rid = eng.add_request(prompt, max_tokens)
    ok = eng.add_request([5, 6], 2)
    assert eng.has_unfinished()
    outs = {o.request_id: o for o in eng.step()}
    assert outs[rid].finished and outs[rid].status is RequestStatus.REJECTED
    assert needle in (outs[rid].reason or "")
    while eng.has_unfinished():
        eng.step()
    assert eng.request(ok).status is RequestStatus.FINISHED
    with pytest.raises(ValueError, match=f"prompt 1 cannot be served: .*{needle[:12]}"):
        Engine(small()).generate([[1], prompt], [1, max_tokens])


def test_request_needing_more_blocks_than_the_cache_is_rejected() -> None:
    eng = Engine(small(num_blocks=2))
    rid = eng.add_request([1] * 9, 1)
    (out,) = eng.step()
    assert out.request_id == rid and out.status is RequestStatus.REJECTED
    assert "needs 3 KV blocks, the whole cache has 2" in (out.reason or "")


def test_abort_waiting_and_running() -> None:
    eng = Engine(small(max_num_seqs=1))
    a = eng.add_request([1, 2, 3], 5)
    b = eng.add_request([4, 5], 5)
    eng.step()
    assert eng.request(a).status is RequestStatus.RUNNING
    assert eng.request(b).status is RequestStatus.WAITING
    assert eng.abort(b) and eng.abort(a)
    assert not eng.abort(a)
    with pytest.raises(KeyError, match="nope"):
        eng.abort("nope")
    outs = eng.step()
    assert {o.request_id for o in outs} == {a, b}
    assert all(o.status is RequestStatus.ABORTED and o.finished for o in outs)
    assert eng.scheduler.blocks.num_free == 16 and not eng.has_unfinished()
    assert eng.step() == []


def test_generate_keeps_prompt_order_and_per_prompt_limits() -> None:
    eng = Engine(small(), runner=NullRunner(9))
    out = eng.generate([[1] * 20, [2], [3, 3]], [4, 1, 6])
    assert out == [[9] * 4, [9], [9] * 6]
    with pytest.raises(ValueError, match="2 entries for 3 prompts"):
        eng.generate([[1], [2], [3]], [1, 2])


def test_metrics_are_consistent() -> None:
    eng = Engine(small())
    rid = eng.add_request([1, 2, 3, 4], 3)
    one = eng.add_request([1], 1)
    while eng.has_unfinished():
        eng.step()
    m = eng.metrics(rid)
    assert m.status is RequestStatus.FINISHED and m.output_tokens == 3
    assert m.arrival_pass == 0 and m.first_token_pass == 0 and m.finish_pass == 2
    assert m.ttft_passes == 1 and m.ttft_s is not None and m.ttft_s >= 0
    assert m.tpot_s is not None and m.tpot_s >= 0
    assert eng.metrics(one).tpot_s is None


def test_pass_log_is_a_bounded_ring() -> None:
    eng = Engine(small(pass_log_size=3))
    eng.generate([[1, 2]], 10)
    log = list(eng.scheduler.pass_log)
    assert len(log) == 3 and [r.index for r in log] == [7, 8, 9]
    assert {"index", "fire", "reason", "prefill_tokens", "prefill_seqs", "decode_seqs"} <= set(
        log[0].__dataclass_fields__
    )


def _req(i: int, n: int, m: int = 4) -> Request:
    return Request(str(i), i, [1] * n, m, 0, 0.0)


def test_observation_counts_only_what_fits_in_kv() -> None:
    """Flaw 3: a head that cannot get KV blocks is not counted as waiting work."""
    cfg = SchedulerConfig(
        max_num_seqs=4, max_num_batched_tokens=32, block_size=4, num_blocks=4,
        max_model_len=32, dense_tokens=8, max_hold_passes=10,
    )  # fmt: skip
    s = Scheduler(cfg)
    s.add(_req(0, 12, 8))  # 3 of the 4 blocks
    s.update(s.schedule(), [0], 0.0)
    s.add(_req(1, 6))  # needs 2 blocks, 1 free: inadmissible
    plan = s.plan()
    assert plan.decode_seqs == 1 and plan.admits == [] and plan.waiting_tokens == 0
    batch = s.commit(plan, s.gate.decide(GateInput(plan.waiting_tokens, plan.decode_seqs)))
    assert batch.prefills == [] and s.pass_log[-1].reason is Reason.EMPTY


def test_running_but_not_decoding_is_no_decode_work() -> None:
    """Flaw 2: a pass whose only running request is mid-prefill has no decode to protect."""
    cfg = SchedulerConfig(
        max_num_seqs=4, max_num_batched_tokens=8, block_size=4, num_blocks=16,
        max_model_len=64, dense_tokens=8, max_hold_passes=30,
    )  # fmt: skip
    s = Scheduler(cfg)
    s.add(_req(0, 20))
    s.update(s.schedule(), [], 0.0)  # first 8-token chunk
    s.update(s.schedule(), [], 0.0)
    rec = s.pass_log[-1]
    assert rec.decode_seqs == 0 and rec.reason in (Reason.NO_DECODE, Reason.DENSE)
    assert rec.prefill_tokens == 8 and len(s.running) == 1


def test_hold_pass_is_decode_only_and_holds_partials_too() -> None:
    cfg = SchedulerConfig(
        max_num_seqs=4, max_num_batched_tokens=16, block_size=4, num_blocks=16,
        max_model_len=64, dense_tokens=12, max_hold_passes=3,
    )  # fmt: skip
    s = Scheduler(cfg)
    s.add(_req(0, 4, 20))
    s.update(s.schedule(), [0], 0.0)  # NO_DECODE: admitted, first token
    s.add(_req(1, 3))
    batch = s.schedule()
    assert s.pass_log[-1].reason is Reason.HOLD and batch.prefills == []
    assert len(batch.decodes) == 1 and s.pass_log[-1].interrupts_decode is False
    s.update(batch, [0], 0.0)
    s.update(s.schedule(), [0], 0.0)  # second HOLD
    batch = s.schedule()
    assert s.pass_log[-1].reason is Reason.BUDGET and len(batch.prefills) == 1


class _CountingRequest(Request):
    __slots__ = ()
    reads = 0

    @property
    def num_tokens(self) -> int:
        _CountingRequest.reads += 1
        return len(self.prompt_token_ids) + len(self.output_token_ids)


def test_planning_never_walks_the_queue() -> None:
    cfg = SchedulerConfig(
        max_num_seqs=8, max_num_batched_tokens=64, block_size=4, num_blocks=10_000,
        max_model_len=64,
    )  # fmt: skip
    s = Scheduler(cfg)
    for i in range(20_000):
        s.add(_CountingRequest(str(i), i, [1] * 16, 4, 0, 0.0))
    _CountingRequest.reads = 0
    plan = s.plan()
    assert len(plan.admits) == 4  # 64-token budget / 16-token prompts
    # One read per admitted request plus the one that stopped the walk, at most.
    assert _CountingRequest.reads <= 2 * (len(plan.admits) + 1)


def test_null_runner_validates_its_token() -> None:
    with pytest.raises(ValueError, match=r"NullRunner\.token"):
        NullRunner(-1)


def test_a_torch_config_can_switch_to_the_null_runner() -> None:
    """Comparison runs (DP baselines, benches) reuse a torch config with runner='null'."""
    cfg = small(runner="torch", num_threads=1)
    null = dataclasses.replace(cfg, runner="null")
    assert Engine(null).generate([[1, 2]], 2) == [[0, 0]]
    with pytest.raises(ValueError, match="num_threads"):
        small(runner="torch", num_threads=0)
