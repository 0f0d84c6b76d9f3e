"""The real Scheduler agrees with the spec's scheduler machine on every pass.

The run is split by regime (``tests.support.scheduler_lockstep.setups``) so a CI run
drives mostly non-idle passes and hits each edge often: the targets below are
minimums per CI run, deterministic under the derandomized ``ci`` profile, and
the test prints the counts it reached. The narrow regimes run up to 6 requests on
a 6-slot machine; ``wide`` runs 7 to 12 on a 12-slot one (a pass costs about twice
as much there, so it runs fewer examples), and its targets make sure that more than
6 requests really are live, admitted and running into a preemption at once, and
that every block size is drawn: a widening that silently stopped happening fails.
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from tests.support.profiles import examples
from tests.support.scheduler_lockstep import (
    BLOCK_SIZES,
    WIDE,
    SchedulerLockstep,
    lockstep_in,
)

# Examples per regime: "hold" brings the HOLD and BUDGET passes, "tight" the
# preemptions, "any" every parameter drawn freely, "wide" more than 6 requests at once.
RUNS = {
    "hold": examples(ci=100, nightly=1000),
    "tight": examples(ci=90, nightly=900),
    "any": examples(ci=40, nightly=400),
}
WIDE_RUNS = examples(ci=12, nightly=120)
"""Examples of the wide regime per block size (each block size a run of its own, so each
is drawn as often)."""
TARGETS = {"HOLD": 1_000, "BUDGET": 100, "preempting": 100}
WIDE_TARGETS = {">6 live": 320, ">6 admitted": 40, ">6 running, preempting": 25}
"""Passes per CI run with more than 6 requests live (arrived, not ended), admitted in the
pass, running into a preemption: where a bug tied to the 7th request shows."""
PER_BLOCK_SIZE = 150
"""Passes per CI run at each of ``BLOCK_SIZES``, and of them on the 12-slot machine."""
PER_BLOCK_SIZE_WIDE = 120


def _counts(tally: Counter[str], keys: list[str]) -> str:
    return ", ".join(f"{k} {tally[k]}" for k in keys)


def test_scheduler_agrees_with_spec_every_pass(capsys: pytest.CaptureFixture[str]) -> None:
    SchedulerLockstep.passes = 0
    SchedulerLockstep.tally.clear()
    runs = [(lockstep_in(regime), n) for regime, n in RUNS.items()]
    runs += [(lockstep_in(WIDE, block_sizes=(bs,)), WIDE_RUNS) for bs in BLOCK_SIZES]
    for lockstep, n in runs:
        run_state_machine_as_test(
            lockstep, settings=settings(stateful_step_count=40, max_examples=n)
        )
    tally, passes = SchedulerLockstep.tally, SchedulerLockstep.passes
    sizes = [f"bs={bs}" for bs in BLOCK_SIZES]
    wide_sizes = [f"wide {k}" for k in sizes]
    wide = list(WIDE_TARGETS)
    kinds = sorted(k for k in tally if k not in {*sizes, *wide_sizes, *wide})
    with capsys.disabled():  # shown in CI output without -s
        print(f"\nscheduler lockstep: {passes} passes ({_counts(tally, kinds)})")
        print(f"  wider than 6 slots: {_counts(tally, wide)}")
        print(f"  block sizes: {_counts(tally, sizes)}")
        print(f"  block sizes, 12 slots: {_counts(tally, wide_sizes)}")
    assert tally["idle"] <= passes // 10, f"mostly idle: {tally['idle']} of {passes}"
    want = {**TARGETS, **WIDE_TARGETS, **dict.fromkeys(sizes, PER_BLOCK_SIZE)}
    want |= dict.fromkeys(wide_sizes, PER_BLOCK_SIZE_WIDE)
    short = {k: (tally[k], n) for k, n in want.items() if tally[k] < n}
    assert not short, f"lockstep below its targets (got, want): {short}"
