"""The real Scheduler agrees with the spec's scheduler machine on every pass.

The run is split by regime (``tests.support.scheduler_lockstep.setups``) so a CI run
drives mostly non-idle passes and hits each edge often: the targets below are
minimums per CI run, deterministic under the derandomized ``ci`` profile, and
the test prints the counts it reached.
"""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from tests.support.profiles import examples
from tests.support.scheduler_lockstep import SchedulerLockstep, lockstep_in

# Examples per regime: "hold" brings the HOLD and BUDGET passes, "tight" the
# preemptions, "any" every parameter drawn freely.
RUNS = {
    "hold": examples(ci=100, nightly=1000),
    "tight": examples(ci=90, nightly=900),
    "any": examples(ci=40, nightly=400),
}
TARGETS = {"HOLD": 1_000, "BUDGET": 100, "preempting": 100}


def test_scheduler_agrees_with_spec_every_pass(capsys: pytest.CaptureFixture[str]) -> None:
    SchedulerLockstep.passes = 0
    SchedulerLockstep.tally.clear()
    for regime, n in RUNS.items():
        run_state_machine_as_test(
            lockstep_in(regime), settings=settings(stateful_step_count=40, max_examples=n)
        )
    tally, passes = SchedulerLockstep.tally, SchedulerLockstep.passes
    counts = ", ".join(f"{k} {v}" for k, v in sorted(tally.items()))
    with capsys.disabled():  # shown in CI output without -s
        print(f"\nscheduler lockstep: {passes} passes ({counts})")
    assert tally["idle"] <= passes // 10, f"mostly idle: {tally['idle']} of {passes}"
    short = {k: (tally[k], want) for k, want in TARGETS.items() if tally[k] < want}
    assert not short, f"lockstep below its targets (got, want): {short}"
