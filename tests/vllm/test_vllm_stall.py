"""The STALL valve through vLLM's config, and the cadence the side-by-side benchmark drives.

A lone short prompt arriving while long decodes run is the thin fill the valve
is for: nothing new arrives to fill the step, so without the valve the gate
holds it out the whole budget (K - 1 steps); with ``stall_passes=S`` it fires
STALL once the fill has not grown for S steps.
"""

from __future__ import annotations

from typing import Any

import pytest

from densegate.impl.gate import Reason
from densegate.impl.traces.workload import TraceRequest
from tests.support.vllm_harness import Cadence, Limits, build, replay
from tests.vllm.conftest import HAS_VLLM, SKIP_REASON

pytestmark = pytest.mark.skipif(not HAS_VLLM, reason=SKIP_REASON)

LONE_AT = 20
"""The step the lone short prompt arrives, well after the long decodes started."""
TRACE = [TraceRequest(0, 32, 200) for _ in range(8)] + [TraceRequest(LONE_AT, 13, 4)]
LONE = str(len(TRACE) - 1)


def _gated(gate: dict[str, Any]) -> Any:
    from densegate.integrations.vllm import GatedScheduler

    return build(GatedScheduler, Limits(), gate)


def test_stall_passes_reaches_the_gate() -> None:
    sched = _gated({"stall_passes": 3, "max_hold_passes": 12})
    assert sched.gate_config.stall_passes == 3
    assert sched.gate.config.stall_passes == 3
    assert _gated({}).gate.config.stall_passes == 0


def test_a_bad_stall_passes_is_refused_at_engine_start_naming_the_key() -> None:
    for bad in (-1, 2.0, "3"):
        with pytest.raises(ValueError, match=r"additional_config\['densegate'\]\['stall_passes'\]"):
            _gated({"stall_passes": bad})


@pytest.mark.parametrize("stall", [2, 3, 5])
def test_the_valve_fires_stall_on_a_stalled_thin_fill(stall: int) -> None:
    k = 30
    sched = _gated({"stall_passes": stall, "max_hold_passes": k})
    rep = replay(sched, TRACE)
    waiting = rep.steps[LONE_AT : rep.first_token_step[LONE] + 1]
    # what the harness shows: decodes running, 13 tokens waiting, not growing, no prefill held
    assert all(s.decode_seqs == 8 and s.gate.waiting_tokens == 13 for s in waiting)
    assert all(s.prefill_tokens == 0 for s in waiting[:-1]) and waiting[-1].prefill_tokens == 13
    assert [s.gate.reason for s in waiting] == [Reason.HOLD] * stall + [Reason.STALL]
    assert rep.first_token_step[LONE] - rep.arrival_step[LONE] == stall
    assert sched.gate_counts[Reason.STALL] == 1
    assert len(rep.outputs[LONE]) == 4


def test_without_the_valve_the_same_fill_waits_out_the_budget() -> None:
    k = 30
    sched = _gated({"max_hold_passes": k})
    rep = replay(sched, TRACE)
    waiting = rep.steps[LONE_AT : rep.first_token_step[LONE] + 1]
    assert [s.gate.reason for s in waiting] == [Reason.HOLD] * (k - 1) + [Reason.BUDGET]
    assert sched.gate_counts[Reason.STALL] == 0


def test_the_cadence_prefills_on_its_wave_counter_and_restarts_after_idle() -> None:
    """vLLM's engine core: the step counter starts at 0 with each wave (first busy step
    after the engine ran dry), so prefill runs on steps wave_start + n * interval."""
    from vllm.v1.core.sched.scheduler import Scheduler

    waves = (3, 300)  # the first wave drains long before step 300
    trace = [TraceRequest(w + d, 40, 30) for w in waves for d in range(0, 40, 3)]
    sched = build(Scheduler, Limits())
    rep = replay(sched, trace, throttle=Cadence(sched, 8))
    prefill = [s.index for s in rep.steps if s.prefill_tokens]
    assert len(prefill) > 10
    start = [max(w for w in waves if w <= i) for i in prefill]
    assert [(i - w) % 8 for i, w in zip(prefill, start, strict=True)] == [0] * len(prefill)
    assert set(start) == set(waves)


def test_the_cadence_refuses_an_interval_that_is_no_cadence() -> None:
    with pytest.raises(ValueError, match="Cadence interval"):
        Cadence(None, 1)
