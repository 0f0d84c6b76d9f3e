"""The DP router: deterministic, so every rank computes the same assignment alone."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from densegate.impl.dp.router import ROUTERS, Router, fallback_route


def test_round_robin_cycles_and_ignores_loads() -> None:
    r = Router("round-robin", 3)
    r.observe([0, 100, 100])
    assert [r.route() for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]


def test_least_loaded_picks_the_minimum_and_counts_what_it_routed() -> None:
    r = Router("least-loaded", 3)
    r.observe([5, 1, 3])
    # rank 1 takes arrivals until it ties with rank 2; ties rotate with the cursor.
    assert [r.route() for _ in range(4)] == [1, 1, 2, 1]
    assert r.loads == [5, 4, 4]


def test_least_loaded_rotates_ties_instead_of_piling_on_rank_0() -> None:
    r = Router("least-loaded", 4)
    picks = []
    for _ in range(4):
        r.observe([0, 0, 0, 0])  # every tick reports equal loads
        picks.append(r.route())
    assert picks == [0, 1, 2, 3]


@given(
    kind=st.sampled_from(ROUTERS),
    world=st.integers(1, 6),
    ticks=st.lists(
        st.tuples(st.lists(st.integers(0, 50), min_size=6, max_size=6), st.integers(0, 4))
    ),
)
@settings(max_examples=60)
def test_two_routers_fed_alike_assign_alike(
    kind: str, world: int, ticks: list[tuple[list[int], int]]
) -> None:
    a, b = Router(kind, world), Router(kind, world)
    for loads, arrivals in ticks:
        a.observe(loads[:world])
        b.observe(loads[:world])
        got = [a.route() for _ in range(arrivals)]
        assert got == [b.route() for _ in range(arrivals)]
        assert all(0 <= x < world for x in got)


def test_fallback_route_uses_only_survivors() -> None:
    assert [fallback_route(i, [3, 0]) for i in range(4)] == [0, 3, 0, 3]
    with pytest.raises(ValueError):
        fallback_route(0, [])


def test_bad_arguments_raise() -> None:
    with pytest.raises(ValueError):
        Router("random", 2)
    with pytest.raises(ValueError):
        Router("round-robin", 0)
    with pytest.raises(ValueError):
        Router("least-loaded", 2).observe([1, 2, 3])


def test_least_loaded_charges_the_cost_it_is_given() -> None:
    r = Router("least-loaded", 2)
    r.observe([0, 0])
    assert [r.route(100), r.route(10), r.route(10)] == [0, 1, 1]
    assert r.loads == [100, 20]
