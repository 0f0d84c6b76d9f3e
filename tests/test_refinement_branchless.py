"""The branch-free ``min``/``max`` the R checks run under: the builtins' values, on fewer paths.

R3's verdict rests on ``symbolic_min`` being ``min``; these tests prove the
``If`` chain it builds is the least of its arguments (and the greatest for
``max``), refute a wrong chain, and run one symbolic check both ways.
"""

from __future__ import annotations

from typing import Any

import z3
from hypothesis import given
from hypothesis import strategies as st

from densegate.proofs.refinement import branchless
from densegate.proofs.refinement.branchless import (
    installed,
    max_term,
    min_term,
    symbolic_max,
    symbolic_min,
)
from densegate.proofs.refinement.symbolic import explore, fail, keyword_signature


def _least(chain: z3.ArithRef, xs: list[z3.ArithRef], better: Any) -> z3.BoolRef:
    """``chain`` is one of ``xs`` and none of ``xs`` is ``better`` than it."""
    return z3.And(z3.Or([chain == x for x in xs]), *[z3.Not(better(x, chain)) for x in xs])


def _valid(claim: z3.BoolRef) -> z3.CheckSatResult:
    s = z3.Solver()
    s.add(z3.Not(claim))
    return s.check()


def test_the_chain_is_the_least_and_the_greatest_of_its_arguments() -> None:
    for n in (2, 3, 4):
        xs = [z3.Int(f"x{i}") for i in range(n)]
        low, high = min_term(xs), max_term(xs)
        assert _valid(_least(low, xs, lambda a, b: a < b)) == z3.unsat
        assert _valid(_least(high, xs, lambda a, b: a > b)) == z3.unsat


def test_a_wrong_chain_is_refuted() -> None:
    xs = [z3.Int(f"x{i}") for i in range(3)]
    assert _valid(_least(max_term(xs), xs, lambda a, b: a < b)) == z3.sat
    assert _valid(_least(min_term(xs[:2]), xs, lambda a, b: a < b)) == z3.sat


@given(st.lists(st.integers(), min_size=2, max_size=5))
def test_concrete_ints_take_the_builtins(xs: list[int]) -> None:
    assert symbolic_min(*xs) == min(xs)
    assert symbolic_max(*xs) == max(xs)
    assert symbolic_min(xs) == min(xs)  # one iterable: the builtin itself
    assert symbolic_min(*xs, key=lambda x: -x) == max(xs)


def _check(**v: Any) -> None:
    """min and max of three symbolic ints, against what comparisons say they are."""
    assert v["a"] == v["a"]  # CrossHair's asserts mode checks functions that open with one
    a, b, c = v["a"], v["b"], v["c"]
    lo, hi = min(a, b, c), max(a, b, c)
    want_lo = a if a <= b and a <= c else (b if b <= c else c)
    want_hi = a if a >= b and a >= c else (b if b >= c else c)
    if lo != want_lo or hi != want_hi:
        fail(v, f"min {lo} max {hi}")


_check.__signature__ = keyword_signature({"a": int, "b": int, "c": int})  # type: ignore[attr-defined]


def test_a_symbolic_check_of_min_and_max_is_proved_under_the_patch() -> None:
    out = explore(_check)  # explore installs the patch, then restores CrossHair's table
    assert out.status == "proved", out.detail
    assert min not in branchless.core._PATCH_REGISTRATIONS


def test_installed_restores_the_table() -> None:
    table = branchless.core._PATCH_REGISTRATIONS
    with installed():
        assert table[min] is symbolic_min and table[max] is symbolic_max
    assert min not in table and max not in table


def _broken(**v: Any) -> None:
    assert v["a"] == v["a"]
    if min(v["a"], v["b"]) != v["a"]:
        fail(v, "min is not a")


_broken.__signature__ = keyword_signature({"a": int, "b": int})  # type: ignore[attr-defined]


def test_a_false_claim_about_min_is_still_refuted() -> None:
    out = explore(_broken)
    assert out.status == "refuted"
    assert out.witness is not None and out.witness["b"] < out.witness["a"]


def _flat(**v: Any) -> None:
    """No branch but min and max: one path under the patch (three or more without it)."""
    assert v["a"] == v["a"]
    m = min(v["a"], v["b"], v["c"]) + max(v["a"], 0)
    if m != m:  # one feasible side: no fork
        fail(v, "m != m")


_flat.__signature__ = keyword_signature({"a": int, "b": int, "c": int})  # type: ignore[attr-defined]


def test_the_patch_is_in_effect_one_path_for_min_and_max() -> None:
    out = explore(_flat)
    assert out.status == "proved", out.detail
    assert out.paths == 1, out.detail  # CrossHair forks on every comparison in the builtin


def _mixed(**v: Any) -> None:
    """A symbolic bool beside an int goes to the builtin, which still gets it right."""
    assert v["a"] == v["a"]
    flag, a = v["flag"], v["a"]
    want = flag if flag <= a else a
    if min(flag, a) != want or min(a, 0) != (a if a < 0 else 0):
        fail(v, "min of a bool and an int")


_mixed.__signature__ = keyword_signature({"flag": bool, "a": int})  # type: ignore[attr-defined]


def test_bools_and_plain_ints_beside_symbolic_ones() -> None:
    out = explore(_mixed)
    assert out.status == "proved", out.detail


def test_installed_restores_an_earlier_entry_even_after_an_error() -> None:
    table = branchless.core._PATCH_REGISTRATIONS

    def earlier(*args: Any, **kwargs: Any) -> Any:
        return None

    table[min] = earlier
    try:
        try:
            with installed():
                raise RuntimeError("inside the check")
        except RuntimeError:
            pass
        assert table[min] is earlier and max not in table
    finally:
        table.pop(min, None)
