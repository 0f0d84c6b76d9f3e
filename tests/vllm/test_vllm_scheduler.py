"""The gated schedulers on vLLM's real ``Scheduler`` (CPU, no model), replaying our traces.

Per trace, on every step: a firing step that neither preempted nor was
predicted to preempt had the gate observe exactly min(prefill vLLM then
scheduled, dense_tokens); no HOLD step carried prefill; every request finished
with exactly its output length or was aborted on purpose; and the recorded
decision sequence passes the conformance kit's judge (P1-P7 and agreement with
the spec), replayed pass by pass.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from densegate.impl.gate import Decision, GateConfig
from densegate.impl.traces.workload import TraceRequest, synthetic_trace
from densegate.lab.bench.workloads import WORKLOADS
from tests.support.vllm_harness import Limits, Replay, Step, base_config, build, replay
from tests.vllm.conftest import HAS_VLLM, SKIP_REASON

pytestmark = pytest.mark.skipif(not HAS_VLLM, reason=SKIP_REASON)


def _gated(async_: bool) -> type:
    from densegate.integrations.vllm import GatedAsyncScheduler, GatedScheduler

    return GatedAsyncScheduler if async_ else GatedScheduler


# -- plumbing -----------------------------------------------------------------------


def test_scheduler_cls_and_additional_config_go_through_vllm_config_loading() -> None:
    from densegate.integrations.vllm import GatedScheduler

    vc = base_config()  # parsed from --scheduler-cls / --additional-config
    assert vc.scheduler_config.get_scheduler_cls() is GatedScheduler
    sched = build(vc.scheduler_config.get_scheduler_cls(), Limits(), densegate=None)
    # default B, K from the CLI; off by default on one engine without CUDA graphs
    assert sched.gate_config == GateConfig(256 - 16, 9, False)


def test_one_engine_without_graphs_keeps_the_gate_off_unless_asked(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """vLLM's CPU build never replays CUDA graphs: there the gate gains nothing, so a
    GatedScheduler without ``enabled`` fires every step (DISABLED) and says so at start."""
    from densegate.impl.gate import Reason
    from densegate.impl.traces.workload import synthetic_trace

    vc = base_config()
    with caplog.at_level("INFO"):
        sched = build(vc.scheduler_config.get_scheduler_cls(), Limits(), densegate=None)
    assert "gate is off by default here" in caplog.text
    rep = replay(sched, synthetic_trace(12, seed=1))
    assert {s.gate.reason for s in rep.steps} <= {Reason.DISABLED, Reason.EMPTY}
    forced = build(_gated(False), Limits(), {"enabled": True})
    assert forced.gate_config.enabled is True


def test_a_bad_value_is_an_error_at_engine_start_naming_the_key() -> None:
    with pytest.raises(ValueError, match=r"additional_config\['densegate'\]\['dense_tokens'\]"):
        build(_gated(False), Limits(), {"dense_tokens": 10_000})
    with pytest.raises(ValueError, match=r"additional_config\['densegate'\]\['enabled'\]"):
        build(_gated(True), Limits(), {"enabled": 1})


def test_an_unsupported_vllm_is_refused_with_the_range(monkeypatch: pytest.MonkeyPatch) -> None:
    import vllm

    import densegate.integrations.vllm as integration

    monkeypatch.setattr(vllm, "__version__", "0.31.2")
    with pytest.raises(integration.UnsupportedVllmVersion, match=r"vllm>=0\.32\.0,<0\.34"):
        integration.__getattr__("GatedScheduler")


def _release() -> tuple[int, ...]:
    import vllm

    from densegate.integrations.versions import release

    return release(vllm.__version__)


def test_vllms_prefill_cadence_beside_the_gate_is_refused_at_engine_start() -> None:
    cadence = Limits(prefill_schedule_interval=2)
    with pytest.raises(ValueError, match=r"prefill_schedule_interval=2 .* both defer prefills"):
        build(_gated(False), cadence, {})
    with pytest.raises(ValueError, match=r"prefill_schedule_interval=2"):
        build(_gated(True), cadence, {})
    off = build(_gated(False), cadence, {"enabled": False})  # a gate that always fires
    assert off.gate_config.enabled is False


def test_vllm_033_applies_the_cadence_on_one_engine_so_the_gate_must_refuse_it() -> None:
    """Why the refusal matters on 0.33: its own ``Scheduler`` throttles one engine by itself."""
    from vllm.v1.core.sched.scheduler import Scheduler

    plain = build(Scheduler, Limits(prefill_schedule_interval=3))
    # 0.32 leaves the cadence to the DP engine core; 0.33 applies it on one engine too.
    want = 3 if _release()[:2] >= (0, 33) else None
    assert getattr(plain, "local_prefill_interval", None) == want


def test_has_request_answers_on_both_versions() -> None:
    from densegate.impl.traces.workload import TraceRequest as T

    sched = build(_gated(False), Limits(), {})
    rep = replay(sched, [T(0, 8, 3)], max_steps=50)
    assert rep.finished == {"0": "LENGTH"}
    assert not sched.has_request("0")
    from tests.support.vllm_harness import _request

    sched.add_request(_request("r", 8, 3, 1, [], None))
    assert sched.has_request("r") and not sched.has_request("nope")


def test_the_start_up_line_says_this_is_one_engine_without_graphs() -> None:
    import logging

    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())  # type: ignore[method-assign]
    log = logging.getLogger("vllm.densegate")
    log.addHandler(handler)
    level = log.level
    log.setLevel(logging.INFO)
    try:
        build(_gated(False), Limits(), {})
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
    assert len(lines) == 1 and "one engine without CUDA graphs" in lines[0], lines


def test_cuda_graphs_are_read_from_vllms_compilation_config() -> None:
    import copy

    from vllm.config import CUDAGraphMode

    from densegate.integrations.vllm.config import cuda_graphs as _cuda_graphs

    vc = copy.deepcopy(base_config())
    assert not _cuda_graphs(vc)  # vLLM's CPU platform: no graphs
    vc.model_config.enforce_eager = False
    vc.compilation_config.cudagraph_capture_sizes = [1, 2, 4]
    for mode, want in (
        (CUDAGraphMode.FULL_AND_PIECEWISE, True),
        (CUDAGraphMode.FULL_DECODE_ONLY, True),
        (CUDAGraphMode.PIECEWISE, True),
        (CUDAGraphMode.NONE, False),
    ):
        vc.compilation_config.cudagraph_mode = mode
        assert _cuda_graphs(vc) is want, mode
    vc.compilation_config.cudagraph_mode = CUDAGraphMode.FULL
    vc.model_config.enforce_eager = True
    assert not _cuda_graphs(vc)


# -- traces -------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    name: str
    trace: Callable[[], list[TraceRequest]]
    limits: Limits
    gate: dict[str, Any] = field(default_factory=dict)
    async_: bool = False
    aborts: dict[int, int] = field(default_factory=dict)
    expect_preemption: bool = False


def _short(n: int, seed: int) -> list[TraceRequest]:
    return synthetic_trace(n, seed, rate=0.8, max_model_len=1024)


TIGHT = Limits(max_num_seqs=16, max_num_batched_tokens=256, num_blocks=72, watermark=0.04)
CASES = [
    Case("chat-sync", lambda: WORKLOADS["chat"].trace(0, 200), Limits()),
    Case("chat-async", lambda: WORKLOADS["chat"].trace(0, 200), Limits(), async_=True),
    Case("tight-kv", lambda: _short(160, 3), TIGHT, expect_preemption=True),
    Case("tight-kv-async", lambda: _short(160, 3), TIGHT, async_=True, expect_preemption=True),
    Case(
        "threshold",
        lambda: WORKLOADS["long-prompt"].trace(2, 100),
        Limits(long_prefill_token_threshold=64),
        {"max_hold_passes": 6},
    ),
    Case(
        "aborts",
        lambda: WORKLOADS["bursty"].trace(4, 200),
        Limits(),
        aborts={i: i % 9 for i in range(0, 200, 5)},
    ),
]


@pytest.fixture(scope="module", params=CASES, ids=lambda c: c.name)
def run(request: pytest.FixtureRequest) -> tuple[Case, Any, Replay, list[TraceRequest]]:
    case: Case = request.param
    trace = case.trace()
    sched = build(_gated(case.async_), case.limits, case.gate)
    return case, sched, replay(sched, trace, one_step_late=case.async_, aborts=case.aborts), trace


def _clean(s: Step) -> bool:
    return s.preempted == 0 and not s.gate.observation.preempts


def test_firing_steps_observe_what_vllm_then_scheduled(run: Any) -> None:
    case, sched, rep, _ = run
    B = sched.gate_config.dense_tokens
    fired = [s for s in rep.steps if s.gate.fire and _clean(s)]
    assert fired
    wrong = [
        (s.index, s.gate.waiting_tokens, s.prefill_tokens)
        for s in fired
        if s.gate.waiting_tokens != min(s.prefill_tokens, B)
    ]
    assert wrong == []
    assert all(s.gate.observation.decode_seqs == s.decode_seqs for s in fired if s.prefill_tokens)
    preempting = sum(s.preempted > 0 for s in rep.steps)
    assert (preempting > 0) == case.expect_preemption


def test_no_hold_step_carries_prefill_and_holds_happen(run: Any) -> None:
    _, sched, rep, _ = run
    holds = [s for s in rep.steps if not s.gate.fire]
    assert holds, "the trace never made the gate hold: it tests nothing"
    assert [s.index for s in holds if s.prefill_tokens] == []
    assert all(s.decode_seqs > 0 for s in holds)
    assert sum(sched.gate_counts.values()) == len(rep.steps)


def test_every_request_ends_with_exactly_its_output_or_aborted(run: Any) -> None:
    case, _, rep, trace = run
    assert len(rep.finished) == len(trace)
    for i, t in enumerate(trace):
        rid = str(i)
        if rep.finished[rid] == "ABORT":
            assert i in case.aborts
        else:
            assert rep.finished[rid] == "LENGTH", (rid, rep.finished[rid])
            assert len(rep.outputs[rid]) == t.output_len
    if case.aborts:
        assert sum(v == "ABORT" for v in rep.finished.values()) > 0


def _judge(steps: list[Step], cfg: GateConfig) -> dict[str, tuple[int, str]]:
    """The conformance kit's per-pass judge, fed the recorded decisions."""
    from densegate.testing import Observation, RecordedPass, judge_recorded

    log = [
        RecordedPass(
            Observation(
                s.gate.waiting_tokens,
                s.gate.observation.decode_seqs,
                s.decode_seqs,
                s.gate.waiting_tokens,
            ),
            Decision(s.gate.fire, s.gate.reason),
            s.gate.hold_passes,
        )
        for s in steps
    ]
    return judge_recorded(cfg, log)


def test_recorded_decisions_pass_the_conformance_judge(run: Any) -> None:
    _, sched, rep, _ = run
    assert _judge(rep.steps, sched.gate_config) == {}


def test_the_judge_catches_a_tampered_decision(run: Any) -> None:
    import dataclasses

    from densegate.impl.gate import Reason

    _, sched, rep, _ = run
    steps = list(rep.steps)
    k = next(i for i, s in enumerate(steps) if not s.gate.fire)
    bad = dataclasses.replace(steps[k].gate, fire=True, reason=Reason.DENSE, hold_passes=0)
    steps[k] = dataclasses.replace(steps[k], gate=bad)
    broken = _judge(steps, sched.gate_config)
    assert "agreement" in broken and "P4" not in broken


def test_prefix_cache_hits_are_over_counted_so_the_gate_only_fires_earlier() -> None:
    """With prefix caching on and a shared prompt prefix, vLLM prefills less than the
    observation counts: w >= min(prefill scheduled, B) on firing steps, strictly more
    on some. HOLD steps carry no prefill but one case vLLM's deferral path lets through
    by design: a prompt cached but for its last token is admitted as a one-token step."""
    trace = WORKLOADS["chat"].trace(6, 150)
    sched = build(_gated(False), Limits(prefix_caching=True), {})
    rep = replay(sched, trace, shared_prefix=96)
    B = sched.gate_config.dense_tokens
    fired = [s for s in rep.steps if s.gate.fire and _clean(s)]
    assert all(s.gate.waiting_tokens >= min(s.prefill_tokens, B) for s in fired)
    assert any(s.gate.waiting_tokens > min(s.prefill_tokens, B) for s in fired)
    holds = [s for s in rep.steps if not s.gate.fire]
    assert holds and all(s.largest_prefill <= 1 for s in holds)
    done = [rid for rid, why in rep.finished.items() if why == "LENGTH"]
    assert len(done) == len(trace)
    assert all(len(rep.outputs[str(i)]) == t.output_len for i, t in enumerate(trace))


# -- agreement with densegate's own scheduler -----------------------------------------


def test_decisions_agree_with_densegates_scheduler_where_admission_rules_coincide() -> None:
    """Same trace, same limits, ample KV, no threshold, sync: every step decides alike.

    Where the engines differ (so not compared here): vLLM allocates KV per chunk
    and checks that the whole prompt fits at admission, densegate allocates the
    whole prompt; vLLM applies ``long_prefill_token_threshold`` only when more
    than one request is eligible; async scheduling runs one step ahead of outputs.
    """
    from densegate.impl.sched.batch import NullRunner
    from densegate.impl.sched.config import SchedulerConfig
    from densegate.impl.sched.request import Request
    from densegate.impl.sched.scheduler import Scheduler
    from tests.support.vllm_harness import TOKEN, prompt_tokens

    trace = WORKLOADS["steady"].trace(5, 150)
    lim = Limits()
    sched = build(_gated(False), lim, {"max_hold_passes": 8})
    rep = replay(sched, trace)
    ours = Scheduler(
        SchedulerConfig(
            max_num_seqs=lim.max_num_seqs,
            max_num_batched_tokens=lim.max_num_batched_tokens,
            block_size=lim.block_size,
            num_blocks=lim.num_blocks,
            max_model_len=lim.max_model_len,
            dense_tokens=sched.gate_config.dense_tokens,
            max_hold_passes=8,
            pass_log_size=100_000,
        )
    )
    runner = NullRunner(TOKEN)
    order = sorted(range(len(trace)), key=lambda i: (trace[i].arrival_pass, i))
    nxt = step = 0
    while nxt < len(order) or ours.has_work():
        while nxt < len(order) and trace[order[nxt]].arrival_pass <= step:
            i = order[nxt]
            t = trace[i]
            ours.add(Request(str(i), i, prompt_tokens(i, t.prompt_len), t.output_len, step, 0.0))
            nxt += 1
        batch = ours.schedule()
        ours.update(batch, runner.execute(batch), 0.0)
        step += 1
    theirs = [(s.gate.fire, s.gate.reason, s.gate.waiting_tokens, s.decode_seqs) for s in rep.steps]
    mine = [(p.fire, p.reason, p.waiting_tokens, p.decode_seqs) for p in ours.pass_log]
    assert len(mine) > 1000
    assert theirs[: len(mine)] == mine
    assert all(not s.prefill_tokens and not s.decode_seqs for s in rep.steps[len(mine) :])
