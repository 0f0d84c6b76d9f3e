"""The paced release on vLLM's real ``Scheduler`` (CPU, no model): the cap reaches the budget.

With ``pace_tokens`` C the one-engine gate never holds while work waits, and every step
it fires PACED prefills at most C tokens beside all of its decodes (vLLM's own token
budget, lowered for the step and restored after); every request still finishes with its
output length. Without the cap, the same trace has steps that prefill more than C.
"""

from __future__ import annotations

import pytest

from densegate.impl.gate import Reason
from densegate.impl.traces.workload import synthetic_trace
from tests.support.vllm_harness import Limits, build, replay
from tests.vllm.conftest import HAS_VLLM, SKIP_REASON

pytestmark = pytest.mark.skipif(not HAS_VLLM, reason=SKIP_REASON)

CAP = 48


def _sched(async_: bool, densegate: dict[str, object]) -> object:
    from densegate.integrations.vllm import GatedAsyncScheduler, GatedScheduler

    return build(GatedAsyncScheduler if async_ else GatedScheduler, Limits(), densegate)


@pytest.mark.parametrize("async_", [False, True], ids=["sync", "async"])
def test_paced_steps_prefill_at_most_the_cap_beside_every_decode(async_: bool) -> None:
    trace = synthetic_trace(40, seed=3)
    sched = _sched(async_, {"pace_tokens": CAP, "max_hold_passes": 9})
    budget = sched.max_num_scheduled_tokens  # type: ignore[attr-defined]
    rep = replay(sched, trace, one_step_late=async_)
    paced = [s for s in rep.steps if s.gate.reason is Reason.PACED]
    assert paced, "no step fired PACED"
    assert all(s.gate.fire for s in rep.steps)  # D9: never holds
    for s in paced:
        assert s.prefill_tokens <= CAP, s
        assert s.decode_seqs == s.gate.observation.decode_seqs or s.preempted, s
    assert sched.max_num_scheduled_tokens == budget  # type: ignore[attr-defined]
    assert sched.scheduler_config.long_prefill_token_threshold == 0  # type: ignore[attr-defined]
    want = {str(i): r.output_len for i, r in enumerate(trace)}
    assert {k: len(v) for k, v in rep.outputs.items()} == want


def test_without_the_cap_the_same_trace_prefills_past_it() -> None:
    """The twin: the default gate (no pace_tokens) on the same trace has steps over CAP,
    so the paced test's bound is the cap's doing."""
    rep = replay(_sched(False, {"max_hold_passes": 9}), synthetic_trace(40, seed=3))
    assert max(s.prefill_tokens for s in rep.steps) > CAP


def test_a_vllm_without_the_budget_attributes_is_refused_at_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from vllm.v1.core.sched.scheduler import Scheduler

    original = Scheduler.__init__

    def init(self: object, *args: object, **kwargs: object) -> None:
        original(self, *args, **kwargs)  # type: ignore[arg-type]
        del self.adaptive_long_prefill_threshold  # type: ignore[attr-defined]

    monkeypatch.setattr(Scheduler, "__init__", init)
    with pytest.raises(ImportError, match=r"adaptive_long_prefill_threshold.*pace_tokens null"):
        _sched(False, {"pace_tokens": CAP})
