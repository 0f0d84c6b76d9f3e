"""The kit as integrations use it: `judge_recorded` over a logged run, `check_gate` on a factory."""

from __future__ import annotations

import dataclasses

from densegate.impl.gate import Decision, GateConfig, PrefillGate, Reason
from densegate.testing import Observation, RecordedPass, judge_recorded

CFG = GateConfig(dense_tokens=100, max_hold_passes=4)
PASSES = [(20, 3), (20, 3), (120, 3), (0, 3), (30, 3), (30, 0), (40, 2), (40, 2), (40, 2), (40, 2)]


def _log() -> list[RecordedPass]:
    gate, log = PrefillGate(CFG), []
    for w, d in PASSES:
        obs = Observation(w, d, d, w)
        dec = gate.decide(obs.gate_input)
        log.append(RecordedPass(obs, Decision(dec.fire, dec.reason), gate.hold_passes))
    return log


def test_a_log_of_the_shipped_gate_conforms() -> None:
    log = _log()
    assert {r.decision.reason for r in log} >= {Reason.HOLD, Reason.DENSE, Reason.BUDGET}
    assert judge_recorded(CFG, log) == {}


def test_a_tampered_decision_is_caught() -> None:
    log = _log()
    k = next(i for i, r in enumerate(log) if r.decision.reason is Reason.HOLD)
    log[k] = dataclasses.replace(log[k], decision=Decision(True, Reason.DENSE), hold_passes=0)
    assert "agreement" in judge_recorded(CFG, log)


def test_a_counter_past_the_budget_is_caught() -> None:
    log = [dataclasses.replace(r, hold_passes=CFG.max_hold_passes) for r in _log()]
    assert "P1" in judge_recorded(CFG, log)


def test_check_gate_names_a_factory_that_returns_none() -> None:
    import pytest

    from densegate.testing import check_gate

    with pytest.raises(TypeError, match="factory returned None"):
        check_gate(lambda cfg: None, max_examples=1)  # type: ignore[arg-type,return-value]
    shared = PrefillGate(CFG)
    with pytest.raises(TypeError, match="the same object twice"):
        check_gate(lambda cfg: shared, max_examples=1)
