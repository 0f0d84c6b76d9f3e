"""Unit tests of PrefillGate: validation, each rule, and the original change's flaws."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import itertools

import pytest

from densegate.impl import Decision, GateConfig, GateInput, PrefillGate, Reason


def test_reason_members_are_exactly_the_rules() -> None:
    """PrefillGate's rules are the first six members, in order; the rest are the aligned gate's."""
    rules = ["EMPTY", "DISABLED", "NO_DECODE", "DENSE", "BUDGET", "HOLD"]
    assert [r.name for r in Reason][:6] == rules
    assert [r.name for r in Reason][6:] == ["KV_PRESSURE", "STALL", "ALIGNED", "PACED"]
    # each extra member is documented (attribute docstring) as the aligned gate's or the
    # valve's: PrefillGate with the valve off never reaches them
    body = ast.parse(inspect.getsource(Reason)).body[0].body  # type: ignore[attr-defined]
    docs = {
        a.targets[0].id: d.value.value
        for a, d in itertools.pairwise(body)
        if isinstance(a, ast.Assign) and isinstance(d, ast.Expr)
    }
    assert docs["KV_PRESSURE"].startswith("Aligned gate only")
    assert docs["STALL"].startswith("The valve")
    assert docs["ALIGNED"].startswith("Aligned gate only")
    assert docs["PACED"].startswith("Aligned gate, paced mode only")
    # PrefillGate can reach every one of its six reasons and nothing else
    gate = PrefillGate(GateConfig(dense_tokens=10, max_hold_passes=2))
    off = PrefillGate(GateConfig(dense_tokens=10, enabled=False))
    seen = {gate.decide(GateInput(w, d)).reason for w in (0, 3, 10) for d in (0, 1) for _ in "ab"}
    seen.add(off.decide(GateInput(3, 1)).reason)
    assert [r.name for r in Reason if r in seen] == rules


@pytest.mark.parametrize(
    ("kwargs", "field", "value"),
    [
        ({"dense_tokens": 0}, "dense_tokens", "0"),
        ({"dense_tokens": -5}, "dense_tokens", "-5"),
        ({"dense_tokens": 8, "max_hold_passes": 0}, "max_hold_passes", "0"),
        ({"dense_tokens": 8, "max_hold_passes": -1}, "max_hold_passes", "-1"),
        ({"dense_tokens": 2.5}, "dense_tokens", "2.5"),
        ({"dense_tokens": True}, "dense_tokens", "True"),
        ({"dense_tokens": 8, "enabled": 1}, "enabled", "1"),
    ],
)
def test_bad_config_names_field_and_value(kwargs: dict, field: str, value: str) -> None:
    with pytest.raises(ValueError, match=rf"GateConfig\.{field}.*{value}"):
        GateConfig(**kwargs)


@pytest.mark.parametrize(
    ("w", "d", "field", "value"),
    [
        (-1, 0, "waiting_tokens", "-1"),
        (0, -3, "decode_seqs", "-3"),
        ("4", 1, "waiting_tokens", "'4'"),
    ],
)
def test_bad_input_names_field_and_value(w: object, d: object, field: str, value: str) -> None:
    with pytest.raises(ValueError, match=rf"GateInput\.{field}.*{value}"):
        GateInput(w, d)  # type: ignore[arg-type]


def test_config_and_decision_are_frozen() -> None:
    cfg = GateConfig(8)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.dense_tokens = 9  # type: ignore[misc]
    with pytest.raises(ValueError):
        Decision(True, Reason.HOLD)
    with pytest.raises(ValueError):
        Decision(False, Reason.DENSE)


def test_non_config_rejected() -> None:
    with pytest.raises(TypeError, match="GateConfig"):
        PrefillGate({"dense_tokens": 8})  # type: ignore[arg-type]


def _run(gate: PrefillGate, *obs: tuple[int, int]) -> list[tuple[Reason, int]]:
    out = []
    for w, d in obs:
        dec = gate.decide(GateInput(w, d))
        assert dec.fire == (dec.reason is not Reason.HOLD)
        out.append((dec.reason, gate.hold_passes))
    return out


def test_each_rule_in_order() -> None:
    gate = PrefillGate(GateConfig(dense_tokens=10, max_hold_passes=3))
    assert gate.config.enabled
    assert _run(gate, (0, 5), (4, 0), (10, 5), (40, 5), (4, 5), (4, 5), (4, 5), (9, 5)) == [
        (Reason.EMPTY, 0),
        (Reason.NO_DECODE, 0),
        (Reason.DENSE, 0),
        (Reason.DENSE, 0),  # more than dense_tokens is dense, not an error
        (Reason.HOLD, 1),
        (Reason.HOLD, 2),
        (Reason.BUDGET, 0),
        (Reason.HOLD, 1),
    ]
    disabled = PrefillGate(GateConfig(dense_tokens=10, enabled=False))
    assert _run(disabled, (0, 5), (3, 5), (3, 0)) == [
        (Reason.EMPTY, 0),
        (Reason.DISABLED, 0),
        (Reason.DISABLED, 0),
    ]


def test_budget_of_one_never_holds() -> None:
    gate = PrefillGate(GateConfig(dense_tokens=10, max_hold_passes=1))
    assert _run(gate, (1, 1), (1, 1)) == [(Reason.BUDGET, 0), (Reason.BUDGET, 0)]


def test_every_fire_resets_and_reset_method() -> None:
    for fire_obs in [(0, 5), (3, 0), (10, 5)]:
        gate = PrefillGate(GateConfig(dense_tokens=10, max_hold_passes=5))
        _run(gate, (3, 5), (3, 5))
        assert gate.hold_passes == 2
        _run(gate, fire_obs)
        assert gate.hold_passes == 0
    gate = PrefillGate(GateConfig(dense_tokens=10, max_hold_passes=5))
    _run(gate, (3, 5))
    gate.reset()
    assert gate.hold_passes == 0


def test_decisions_are_shared_objects() -> None:
    gate = PrefillGate(GateConfig(dense_tokens=10, max_hold_passes=100))
    a = gate.decide(GateInput(3, 5))
    b = gate.decide(GateInput(4, 6))
    assert a is b and a.reason is Reason.HOLD


def test_flaw1_idle_stretch_does_not_spend_the_budget() -> None:
    """Flaw 1: the original counted idle passes, so a late arrival fired at once, under-full."""
    gate = PrefillGate(GateConfig(dense_tokens=100, max_hold_passes=4))
    assert gate.config.enabled
    _run(gate, *[(0, 8)] * 50)  # long stretch with decodes and nothing waiting
    assert gate.hold_passes == 0
    # The late arrival is held for the full budget: K - 1 holds, then BUDGET.
    assert _run(gate, *[(5, 8)] * 4) == [
        (Reason.HOLD, 1),
        (Reason.HOLD, 2),
        (Reason.HOLD, 3),
        (Reason.BUDGET, 0),
    ]


def test_flaw2_tail_escape_is_about_decode_work_not_running_list() -> None:
    """Flaw 2: sequences that are running but cannot decode must not make the gate hold.

    The gate sees only ``decode_seqs``; a scheduler with three parked sequences
    and none decoding reports 0, and the gate must fire at once.
    """
    gate = PrefillGate(GateConfig(dense_tokens=100, max_hold_passes=30))
    assert gate.config.enabled
    running_but_parked = 3
    decode_seqs = 0
    assert running_but_parked > 0
    assert _run(gate, (5, decode_seqs)) == [(Reason.NO_DECODE, 0)]
    # ... and mid-episode: the moment decode work drains, the held work fires.
    _run(gate, (5, 2), (5, 2))
    assert _run(gate, (5, 0)) == [(Reason.NO_DECODE, 0)]


def test_flaw5_gate_tests_run_with_the_gate_enabled() -> None:
    """Flaw 5: two original tests passed only because the gate was disabled.

    An enabled gate and a disabled gate must differ on an under-full pass with
    decodes running; if the tests here ran disabled, this would be the check to
    fail. The mutation tests (test_impl_mutation.py) show the agreement suite
    catches every single-rule bug in the enabled gate.
    """
    on = PrefillGate(GateConfig(dense_tokens=100, max_hold_passes=30))
    off = PrefillGate(GateConfig(dense_tokens=100, max_hold_passes=30, enabled=False))
    assert on.decide(GateInput(5, 2)).reason is Reason.HOLD
    assert off.decide(GateInput(5, 2)).reason is Reason.DISABLED
