"""The planted Scheduler twins (``tests.support.planted_sched``): missed by the old checks,
refuted by the widened lockstep, and the same edits R4 refutes inside ``densegate prove``.

For each twin: where the old checks look (at most 6 requests, block sizes 1, 2, 4; and
its own wider sizes), it runs exactly as the shipped Scheduler, pass for pass, so no
check of behaviour there could tell them apart; the same comparison finds a run
where they differ once the sizes widen (the comparison can fail); and the widened
lockstep refutes it with a shrunk run, printed, where the shipped Scheduler passes.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import densegate.impl.sched.scheduler as sched_module
from densegate.impl.sched.scheduler import Scheduler
from densegate.proofs.refinement.scheduler_wide import R4_MUTANTS, scheduler_of
from tests.support.mutation import assert_lockstep_catches, assert_lockstep_passes
from tests.support.planted_sched import PLANTED, Planted, module, pass_log
from tests.support.profiles import examples
from tests.support.scheduler_lockstep import WIDE, WIDE_SLOTS, lockstep_in, setups

IDS = [t.name for t in PLANTED]
MOVES = st.lists(
    st.tuples(st.integers(0, WIDE_SLOTS) | st.just(0), st.integers(0, 8 * WIDE_SLOTS)),
    min_size=1,
    max_size=40,
)
"""Per pass: how many requests arrive (at least one when nothing runs), which is aborted."""


def _same(twin: Planted, setup: dict[str, Any], moves: list[tuple[int, int]]) -> bool:
    return pass_log(scheduler_of(twin.mutant), setup, moves) == pass_log(Scheduler, setup, moves)


SAME = [(t, regimes, sizes) for t in PLANTED for regimes, sizes in t.same_in]
"""Each twin with each of the sizes it runs exactly as the shipped Scheduler at."""


@pytest.mark.parametrize(
    ("twin", "regimes", "sizes"),
    SAME,
    ids=[f"{t.name}-{'+'.join(r)}-bs{'+'.join(map(str, b))}" for t, r, b in SAME],
)
@settings(max_examples=examples(ci=100, nightly=1000), deadline=None)
@given(data=st.data())
def test_twin_runs_as_the_shipped_scheduler_where_the_old_checks_look(
    twin: Planted, regimes: tuple[str, ...], sizes: tuple[int, ...], data: st.DataObject
) -> None:
    setup, moves = data.draw(setups(regimes, sizes)), data.draw(MOVES)
    assert _same(twin, setup, moves)


@pytest.mark.parametrize("twin", PLANTED, ids=IDS)
def test_the_comparison_tells_the_twin_apart_at_the_widened_sizes(twin: Planted) -> None:
    setup, moves = twin.witness
    assert len(setup["lens"]) > 6 or setup["bs"] not in (1, 2, 4, 16)
    assert not _same(twin, setup, moves)


@pytest.mark.parametrize("twin", PLANTED, ids=IDS)
def test_widened_lockstep_refutes_the_twin_and_passes_the_shipped_scheduler(
    twin: Planted, capsys: pytest.CaptureFixture[str]
) -> None:
    regime, sizes = twin.caught_in
    lockstep = lockstep_in(regime, block_sizes=sizes)
    run = settings(stateful_step_count=40, max_examples=examples(ci=20, nightly=400))
    assert_lockstep_passes(lockstep, sched_module, run)
    shrunk = assert_lockstep_catches(lockstep, module(twin), run, raises=Exception)
    with capsys.disabled():
        where = f"{regime} regime, block size {', '.join(map(str, sizes))}"
        print(f"\nlockstep ({where}) refutes {twin.name}, shrunk:\n{shrunk}")


def test_r4_refutes_the_same_edits() -> None:
    edits = [(m.name, m.cls, m.method, m.old, m.new) for m in R4_MUTANTS]
    assert edits == [(t.name, t.mutant.cls, t.mutant.method, t.mutant.old, t.mutant.new)
                     for t in PLANTED]  # fmt: skip
    assert WIDE in {t.caught_in[0] for t in PLANTED}
