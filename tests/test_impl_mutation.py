"""Bugs injected into PrefillGate make the lockstep suite fail with a shrunk run.

Each mutant rewrites one spot of ``decide_counts`` in the real source (via the
AST), so the suite is shown to catch flipped comparisons, boundary shifts and
dropped counter updates in the code that actually ships. None of these mutants
is equivalent to the original on non-negative inputs.
"""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis.errors import Flaky

import densegate.impl.gate as gate_module
from tests.support.gate_lockstep import GateLockstep
from tests.support.mutation import (
    assert_lockstep_catches,
    assert_lockstep_passes,
    identity_module,
    mutant_module,
)

SCOPE = "decide_counts"

# decide_counts compares: the valve's w > last 0, w == 0 1, d == 0 2, w >= dense 3, the
# valve's quiet >= stall 4, h + 1 >= budget 5 (the valve's own mutants, which need
# stall_passes > 0: tests/test_stall_gate.py); increments: the valve's quiet 0, h 1.
MUTANTS = [
    ("negate", 1),  # w != 0
    ("negate", 2),  # d != 0
    ("negate", 3),  # w < dense
    ("negate", 5),  # h + 1 < budget
    ("shift", 1),  # w > dense
    ("shift", 3),  # h + 1 > budget
    ("off_by_one", 0),  # h >= budget
    ("drop_not", 0),  # enabled test inverted
    ("drop_assign:self._h", 0),  # a fire no longer resets h
    ("drop_increment", 1),  # a hold no longer counts
]


@pytest.mark.parametrize(("kind", "index"), MUTANTS, ids=[f"{k}{i}" for k, i in MUTANTS])
def test_lockstep_catches_injected_bug(kind: str, index: int) -> None:
    mod = mutant_module(gate_module, SCOPE, kind, index)
    assert_lockstep_catches(
        GateLockstep, mod, settings(stateful_step_count=30), raises=(AssertionError, Flaky)
    )


def test_unmutated_source_passes_through_the_same_path() -> None:
    """The mutation harness itself must not break the gate: the identity 'mutant' passes."""
    mod = identity_module(gate_module)
    assert_lockstep_passes(GateLockstep, mod, settings(stateful_step_count=10))
