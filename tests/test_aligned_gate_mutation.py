"""Bugs injected into AlignedGate make the dp lockstep suite fail.

Each mutant rewrites one spot of ``AlignedGate._rules`` in the real source
(via the AST): flipped or shifted comparisons, a dropped half of a conjunction,
a dropped counter or stall-memory update. None is equivalent to the original
on the inputs the lockstep machine can produce.
"""

from __future__ import annotations

import pytest
from hypothesis import Phase, settings
from hypothesis import strategies as st
from hypothesis.errors import Flaky

import densegate.impl.dp_gate as aligned_module
from tests.support.dp_lockstep import AlignedLockstep, BusyLockstep, PacedLockstep
from tests.support.mutation import (
    assert_lockstep_catches,
    assert_lockstep_passes,
    identity_module,
    mutant_module,
)

# No shrink phase: a mutant's run only has to fail, and shrinking a long
# multi-rank run costs seconds per mutant. The failing run is still printed.
_MUTANT_SETTINGS = settings(
    max_examples=200, stateful_step_count=20, phases=[Phase.explicit, Phase.reuse, Phase.generate]
)
SCOPE = "_rules"


class UnpacedLockstep(AlignedLockstep):
    """The lockstep with the paced mode off: it never reaches ALIGNED, STALL or BUDGET, so
    drawing it would only thin the runs these mutants are caught on (its own mutants:
    tests/test_paced_gate.py)."""

    paces = st.none()


# _rules compares, in order: fill > last_fill, waiting_ranks == 0, decodes == 0,
# no_decode > 0, pressured > 0, waiting_ranks == world, fill >= fill_target, filled > 0,
# stall > 0, tick - grew_at >= stall, h + 1 >= budget, then the surge's filled > 0 and
# reason is PACED. Its ``and``s, inner first: no_decode > 0 and not paced, kv valve and
# pressured, waiting_ranks == world and fill >= fill_target, filled > 0 and not paced,
# paced and not the busy wait, stall > 0 and tick - grew_at >= stall, filled > 0 and reason
# is PACED.
MUTANTS = [
    *[("negate", i) for i in range(11) if i != 5],
    ("shift", 0),  # fill >= last_fill: a flat fill counts as growth
    ("shift", 1),  # no_decode >= 0: every waiting tick NO_DECODE
    ("shift", 2),  # pressured >= 0
    ("shift", 4),  # filled >= 0: DENSE on any tick
    ("shift", 5),  # stall >= 0: "0 = off" lost
    ("shift", 6),  # tick - grew_at > stall
    ("shift", 7),  # h + 1 > budget
    ("off_by_one", 0),  # tick >= stall
    ("off_by_one", 1),  # h >= budget
    ("keep_right", 0),  # NO_DECODE on every tick the paced mode is off
    ("keep_right", 1),  # KV valve flag ignored
    ("keep_left", 2),  # dense whenever every rank waits
    ("keep_right", 3),  # DENSE on every tick the paced mode is off
    ("keep_right", 4),  # PACED whenever the busy wait does not hold: paced mode off too
    ("keep_right", 5),  # stall test without the "0 = off" guard
    ("drop_not", 0),  # enabled test inverted
    ("drop_not", 1),  # a no-decode rank held unless paced
    ("drop_not", 2),  # a filled rank fires DENSE only in paced mode
    ("drop_assign:self._grew_at", 0),
    ("drop_assign:self._last_fill", 0),
    ("drop_assign:self._h", 0),  # a fire no longer resets h
    ("drop_increment", 0),  # a hold no longer counts
]


@pytest.mark.parametrize(("kind", "index"), MUTANTS, ids=[f"{k}{i}" for k, i in MUTANTS])
def test_lockstep_catches_injected_bug(kind: str, index: int) -> None:
    mod = mutant_module(aligned_module, SCOPE, kind, index)
    assert_lockstep_catches(UnpacedLockstep, mod, _MUTANT_SETTINGS, raises=(AssertionError, Flaky))


# Caught only with the paced mode on. Off, the every-rank half of DENSE adds nothing to the
# filled half (F >= T*N over N capped summands means one of them reaches T), so a slip in
# it is equivalent there; on, it is the only uncapped release.
PACED_MUTANTS = [
    ("negate", 5),  # dense once the aggregate fills with some rank not waiting
    ("shift", 3),  # fill > fill_target
    ("keep_right", 2),  # dense without every rank waiting
    ("keep_left", 0),  # a no-decode rank fires NO_DECODE uncapped in paced mode
    ("keep_left", 3),  # a filled rank fires DENSE uncapped in paced mode
    ("negate", 11),  # the surge cap where no rank is filled (and pace_tokens where one is)
    ("shift", 8),  # filled >= 0: the surge cap on every PACED tick
    ("keep_left", 6),  # the surge cap on any fire with a filled rank (DENSE included)
    ("keep_right", 6),  # the surge cap on every PACED tick
    ("drop_not", 3),  # PACED only in the busy wait
]


@pytest.mark.parametrize(
    ("kind", "index"), PACED_MUTANTS, ids=[f"{k}{i}" for k, i in PACED_MUTANTS]
)
def test_paced_lockstep_catches_injected_bug(kind: str, index: int) -> None:
    mod = mutant_module(aligned_module, SCOPE, kind, index)
    assert_lockstep_catches(PacedLockstep, mod, _MUTANT_SETTINGS, raises=(AssertionError, Flaky))


# Caught only with the busy wait on: _rules' "paced and not busy" with the wait dropped, and
# _busy_wait's tests (busy > 0, decodes >= busy, ready < world, no_decode == 0; its ``and``).
BUSY_MUTANTS = [
    ("_rules", "keep_left", 4),  # the busy wait ignored: PACED on every paced tick
    *[("_busy_wait", "negate", i) for i in range(4)],  # off, short, aligned, no-decode held
    ("_busy_wait", "shift", 1),  # decodes > busy_decodes: one short of the wait
    ("_busy_wait", "keep_left", 0),  # on whenever configured: nothing else tested
    ("_busy_wait", "keep_right", 0),  # only no-decode tested: off ignored
]


@pytest.mark.parametrize(
    ("scope", "kind", "index"), BUSY_MUTANTS, ids=[f"{s}-{k}{i}" for s, k, i in BUSY_MUTANTS]
)
def test_busy_lockstep_catches_injected_bug(scope: str, kind: str, index: int) -> None:
    mod = mutant_module(aligned_module, scope, kind, index)
    assert_lockstep_catches(BusyLockstep, mod, _MUTANT_SETTINGS, raises=(AssertionError, Flaky))


# _aligned compares, in order: align >= 0, h >= align, waiting_ranks == world.
ALIGNED_MUTANTS = [
    *[("negate", i) for i in range(3)],
    ("shift", 0),  # align > 0: "0 = at once" lost
    ("shift", 1),  # h > align: one more held tick once aligned
    ("keep_left", 0),  # aligned once on: neither the hold nor the ranks tested
    ("keep_right", 0),  # the release fires even when off
]


@pytest.mark.parametrize(
    ("kind", "index"), ALIGNED_MUTANTS, ids=[f"{k}{i}" for k, i in ALIGNED_MUTANTS]
)
def test_lockstep_catches_injected_aligned_bug(kind: str, index: int) -> None:
    mod = mutant_module(aligned_module, "_aligned", kind, index)
    assert_lockstep_catches(UnpacedLockstep, mod, _MUTANT_SETTINGS, raises=(AssertionError, Flaky))


def test_unmutated_source_passes_through_the_same_path() -> None:
    """The harness itself must not break the gate: the identity 'mutant' passes."""
    mod = identity_module(aligned_module)
    assert_lockstep_passes(AlignedLockstep, mod, settings(stateful_step_count=10))
