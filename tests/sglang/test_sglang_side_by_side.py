"""The side-by-side benchmark's bar, on a small run: ``--json`` keeps the issue's schema, and
densegate never holds K passes in a row, never disagrees across ranks, finishes every request.

The benchmark exits 1 when densegate misses that bar; here the figures are checked directly.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.sglang.conftest import HAS_SGLANG, SKIP_REASON

pytestmark = pytest.mark.skipif(not HAS_SGLANG, reason=SKIP_REASON)

KEYS = {
    "name",
    "dp",
    "policy",
    "max_consecutive_holds",
    "held_share",
    "mixed_passes",
    "disagreements",
    "finished",
    "submitted",
    "max_delay_passes",
}


@pytest.fixture(scope="module")
def bench() -> tuple[int, list[dict[str, Any]]]:
    """One run of the benchmark's ``main`` (bench workloads cut to 40 requests): (exit, rows)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import sglang_side_by_side as sbs

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = sbs.main(["--json", "--requests", "40"])
    rows: list[dict[str, Any]] = json.loads(out.getvalue())["scenarios"]
    return code, rows


def test_the_json_has_the_issues_schema(bench: tuple[int, list[dict[str, Any]]]) -> None:
    code, rows = bench
    assert code == 0
    assert rows and all(set(r) == KEYS for r in rows)
    assert {r["policy"] for r in rows} == {"sglang", "densegate"}
    assert {r["dp"] for r in rows} == {2, 4, 8}


def test_densegate_meets_its_bar_everywhere(bench: tuple[int, list[dict[str, Any]]]) -> None:
    _, rows = bench
    ours = [r for r in rows if r["policy"] == "densegate"]
    assert len(ours) == 4 + 4 * 3
    for r in ours:
        assert r["max_consecutive_holds"] <= r["max_delay_passes"] - 1, r
        assert r["disagreements"] == 0, r
        assert r["finished"] == r["submitted"] > 0, r


def test_the_policies_differ_on_the_same_loads(bench: tuple[int, list[dict[str, Any]]]) -> None:
    """Same loads, different delayers: the runs are not copies of each other."""
    _, rows = bench
    pairs: dict[tuple[str, int], dict[str, dict[str, Any]]] = {}
    for r in rows:
        pairs.setdefault((r["name"], r["dp"]), {})[r["policy"]] = r
    for pair in pairs.values():
        assert pair["sglang"]["submitted"] == pair["densegate"]["submitted"]
    assert any(p["sglang"]["held_share"] != p["densegate"]["held_share"] for p in pairs.values())
