"""The per-request steps of a pass's prefill planning and the fold that runs them.

R5 takes ``scan`` as given (it runs the step on each item in order until the totals are
``done``) and proves the steps stop only where they change nothing; here Hypothesis checks
the consequence on real steps: ``scan`` equals the step folded over every item, no early
stop, keeping the items given tokens.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from densegate.impl.sched.steps import AdmitTotals, PartialTotals, admit_next, owed_chunk, scan

_N = st.integers(0, 40)


def _full(step: Any, acc: Any, items: list[Any]) -> tuple[Any, list[tuple[Any, int]]]:
    """The fold over every item: no early stop."""
    kept = []
    for x in items:
        acc, n = step(acc, x)
        if n:
            kept.append((x, n))
    return acc, kept


@given(st.lists(_N, max_size=30), _N, st.integers(1, 12))
def test_owed_scan_is_the_whole_fold(lefts: list[int], budget: int, cap: int) -> None:
    def step(acc: PartialTotals, left: int) -> tuple[PartialTotals, int]:
        return owed_chunk(acc, left, cap)

    start = PartialTotals(budget, 0)
    got = scan(step, start, lefts)
    assert got == _full(step, start, lefts)
    assert got[0].run == sum(n for _, n in got[1]) == budget - got[0].budget


@given(
    st.lists(st.tuples(st.integers(1, 30), st.integers(0, 8)), max_size=30),
    st.tuples(_N, _N, _N, st.booleans()),
    st.booleans(),
    st.integers(1, 12),
)
def test_admission_scan_is_the_whole_fold(
    reqs: list[tuple[int, int]], start: tuple[int, int, int, bool], chunked: bool, cap: int
) -> None:
    def step(acc: AdmitTotals, r: tuple[int, int]) -> tuple[AdmitTotals, int]:
        return admit_next(acc, r[0], r[1], chunked, cap)

    slots, budget, spare, stopped = start
    acc = AdmitTotals(slots, budget, spare, 0, stopped)
    got = scan(step, acc, reqs)
    assert got == _full(step, acc, reqs)
    assert len(got[1]) <= slots and got[0].planned == sum(n for _, n in got[1])
    assert [x for x, _ in got[1]] == reqs[: len(got[1])]  # FCFS: a prefix of the queue


def test_scan_stops_reading_once_done() -> None:
    seen: list[int] = []

    def items() -> Any:
        for i in range(10):
            seen.append(i)
            yield 5

    acc, kept = scan(lambda a, x: owed_chunk(a, x, 5), PartialTotals(10, 0), items())
    assert acc == PartialTotals(0, 10) and len(kept) == 2 and seen == [0, 1, 2]
