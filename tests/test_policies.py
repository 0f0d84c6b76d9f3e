"""The reference policies behave as documented: legacy always admits, original
differs from densegate's gate exactly where the original change's flaws are."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from densegate.impl.gate import Decision, GateConfig, GateInput, GatePolicy, PrefillGate, Reason
from densegate.lab.baselines.policies import (
    POLICIES,
    DenseGatePolicy,
    LegacyPolicy,
    OriginalPolicy,
    RawCounts,
    RawGatePolicy,
)
from densegate.testing import gate_configs, observation_runs

CFG = GateConfig(dense_tokens=100, max_hold_passes=4)
UNDER = GateInput(waiting_tokens=10, decode_seqs=8)
IDLE = GateInput(waiting_tokens=0, decode_seqs=8)


def test_registry_names_and_protocol() -> None:
    assert list(POLICIES) == ["legacy", "original", "densegate"]
    assert POLICIES["densegate"] is DenseGatePolicy is PrefillGate
    for make in POLICIES.values():
        policy = make(CFG)
        assert isinstance(policy, GatePolicy)
        assert policy.hold_passes == 0
        assert isinstance(policy.decide(UNDER), Decision)
    assert isinstance(OriginalPolicy(CFG), RawGatePolicy)
    assert not isinstance(LegacyPolicy(CFG), RawGatePolicy)


@given(config=gate_configs(), w=st.integers(0, 10**6), d=st.integers(0, 512))
def test_legacy_always_admits(config: GateConfig, w: int, d: int) -> None:
    legacy = LegacyPolicy(config)
    dec = legacy.decide(GateInput(w, d))
    assert dec.fire
    assert dec.reason is (Reason.EMPTY if w == 0 else Reason.DISABLED)
    assert legacy.hold_passes == 0


def test_original_flaw1_idle_passes_spend_the_budget() -> None:
    """After K-1 idle passes a request arriving under-full fires at once (BUDGET)."""
    original, gate = OriginalPolicy(CFG), PrefillGate(CFG)
    for _ in range(CFG.max_hold_passes - 1):
        assert original.decide(IDLE) == Decision(False, Reason.HOLD)
        assert gate.decide(IDLE) == Decision(True, Reason.EMPTY)
    assert original.hold_passes == CFG.max_hold_passes - 1
    assert gate.hold_passes == 0
    assert original.decide(UNDER) == Decision(True, Reason.BUDGET)
    assert gate.decide(UNDER) == Decision(False, Reason.HOLD)


def test_original_flaw2_parked_running_list_blocks_the_tail_escape() -> None:
    waiting_nothing_decodes = GateInput(waiting_tokens=10, decode_seqs=0)
    parked = RawCounts(running_seqs=3, queued_tokens=10)
    assert OriginalPolicy(CFG).decide_raw(waiting_nothing_decodes, parked).reason is Reason.HOLD
    # Told only the honest counts, it escapes like densegate does.
    assert OriginalPolicy(CFG).decide(waiting_nothing_decodes).reason is Reason.NO_DECODE


def test_original_flaw3_dense_on_unadmissible_tokens() -> None:
    blocked = RawCounts(running_seqs=8, queued_tokens=CFG.dense_tokens)
    original = OriginalPolicy(CFG)
    original.decide(UNDER)
    assert original.decide_raw(UNDER, blocked) == Decision(True, Reason.DENSE)
    assert original.hold_passes == 0
    assert PrefillGate(CFG).decide(UNDER).reason is Reason.HOLD


def test_original_disabled_fires_and_keeps_counter() -> None:
    original = OriginalPolicy(GateConfig(100, 4, enabled=False))
    assert original.decide(UNDER) == Decision(True, Reason.DISABLED)
    assert original.decide(IDLE) == Decision(True, Reason.EMPTY)
    assert original.hold_passes == 0


def test_original_reset() -> None:
    original = OriginalPolicy(CFG)
    original.decide(UNDER)
    assert original.hold_passes == 1
    original.reset()
    assert original.hold_passes == 0


@given(data=st.data(), config=gate_configs())
def test_original_equals_densegate_where_its_flaws_cannot_show(
    data: st.DataObject, config: GateConfig
) -> None:
    """Something always waits and the lists hold only admissible work: no flaw
    applies, so the original gate must be densegate's machine exactly."""
    original, gate = OriginalPolicy(config), PrefillGate(config)
    for obs in data.draw(observation_runs(config)):
        inp = GateInput(max(obs.waiting_tokens, 1), obs.decode_seqs)
        assert original.decide(inp) == gate.decide(inp), inp
        assert original.hold_passes == gate.hold_passes


@pytest.mark.parametrize(("running", "queued"), [(-1, 0), (0, -1), (True, 0), (0, 1.5)])
def test_raw_counts_reject_bad_values(running: object, queued: object) -> None:
    with pytest.raises(ValueError, match="RawCounts"):
        RawCounts(running, queued)  # type: ignore[arg-type]


def test_raw_counts_honest_mirrors_the_input() -> None:
    assert RawCounts.honest(GateInput(7, 3)) == RawCounts(running_seqs=3, queued_tokens=7)
