"""The real Scheduler agrees with the spec's scheduler machine on every pass."""

from __future__ import annotations

from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from tests.scheduler_lockstep import SchedulerLockstep


def test_scheduler_agrees_with_spec_every_pass() -> None:
    SchedulerLockstep.passes = 0
    run_state_machine_as_test(SchedulerLockstep, settings=settings(stateful_step_count=40))
    print(f"{SchedulerLockstep.passes} scheduler lockstep passes")
    assert SchedulerLockstep.passes >= 2_000
