"""PrefillGate agrees with the spec's relation on every pass of random runs."""

from __future__ import annotations

from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from tests.support.gate_lockstep import GateLockstep

MIN_PASSES = 5_000


def test_gate_agrees_with_spec_every_pass() -> None:
    GateLockstep.passes = 0
    run_state_machine_as_test(GateLockstep, settings=settings(stateful_step_count=30))
    # The ci profile must really exercise the gate, not just start machines.
    print(f"{GateLockstep.passes} lockstep passes")
    assert GateLockstep.passes >= MIN_PASSES, GateLockstep.passes
