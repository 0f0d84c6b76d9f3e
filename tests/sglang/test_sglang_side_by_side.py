"""The side-by-side benchmark on a small run: ``--json`` keeps its schema and gains the priced
figures and the goal's verdicts; densegate never holds K passes in a row, never disagrees
across ranks, finishes every request; plain never holds; the exit follows the bars.

The benchmark exits 1 when densegate misses today's bar (and, with ``--goal``, issue 32's
goal); here the figures are checked directly.
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
from tests.support.front import check_front

pytestmark = pytest.mark.skipif(not HAS_SGLANG, reason=SKIP_REASON)

KEYS = {
    "name",
    "dp",
    "policy",
    "passes",
    "max_consecutive_holds",
    "held_share",
    "mixed_passes",
    "ttft_passes_p99",
    "disagreements",
    "finished",
    "submitted",
    "max_delay_passes",
    "modeled",
}
ARGS = ["--json", "--requests", "40", "--requests-per-rank", "8"]
Bench = tuple[int, dict[str, Any], Any]


@pytest.fixture(scope="module")
def bench() -> Bench:
    """One run of the benchmark's ``main`` (bench workloads cut to 40 requests, hard loads
    to 8 per rank): (exit, document, module)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import sglang_side_by_side as sbs

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = sbs.main(ARGS)
    return code, json.loads(out.getvalue()), sbs


def test_the_json_has_the_schema_and_the_priced_figures(bench: Bench) -> None:
    code, doc, _ = bench
    rows = doc["scenarios"]
    assert code == 0
    assert rows and all(set(r) == KEYS for r in rows)
    assert {r["policy"] for r in rows} == {"plain", "sglang", "densegate"}
    assert {r["dp"] for r in rows} == {2, 4, 8}
    assert {"skewed", "oscillating-rate", "long-bursts", "kv-tight"} <= {r["name"] for r in rows}
    assert doc["profile"].startswith("roofline-H100-SXM")
    for r in rows:
        m = r["modeled"]
        assert m["profile"] == doc["profile"], r
        assert m["tokens_per_s"] > 0 and m["ttft_ms_p99"] > 0 and m["output_tokens"] > 0, r
    check_front(rows, doc["dominated_by"], "name", "policy")


def test_densegate_meets_todays_bar_everywhere(bench: Bench) -> None:
    _, doc, _ = bench
    ours = [r for r in doc["scenarios"] if r["policy"] == "densegate"]
    assert len(ours) == 4 + 4 * 3 + 4 * 3
    for r in ours:
        assert r["max_consecutive_holds"] <= r["max_delay_passes"] - 1, r
        assert r["disagreements"] == 0, r
        assert r["finished"] == r["submitted"] > 0, r


def test_plain_never_holds_and_the_policies_differ(bench: Bench) -> None:
    _, doc, _ = bench
    pairs: dict[tuple[str, int], dict[str, dict[str, Any]]] = {}
    for r in doc["scenarios"]:
        pairs.setdefault((r["name"], r["dp"]), {})[r["policy"]] = r
    for pair in pairs.values():
        assert pair["plain"]["held_share"] == 0 == pair["plain"]["max_consecutive_holds"]
        assert pair["sglang"]["submitted"] == pair["densegate"]["submitted"]
    assert any(p["sglang"]["held_share"] != p["densegate"]["held_share"] for p in pairs.values())


def test_every_scenario_gets_the_goals_verdicts_and_goal_exits_on_a_miss(bench: Bench) -> None:
    code, doc, sbs = bench
    bars = {"steps", "ttft-steps", "held-share", "modeled-tokens/s", "modeled-ttft-p99",
            "modeled-itl-p99", "disagreements", "finished"}  # fmt: skip
    per: dict[tuple[str, int], set[str]] = {}
    for v in doc["goal"]:
        per.setdefault((v["scenario"], v["dp"]), set()).add(v["bar"])
    assert per and all(b == bars for b in per.values())
    assert len(per) == len({(r["name"], r["dp"]) for r in doc["scenarios"]})
    missed = any(not v["met"] for v in doc["goal"])
    with contextlib.redirect_stdout(io.StringIO()):
        code_goal = sbs.main([*ARGS, "--goal", "--scenarios", "hard", "--dps", "2"])
    hard = [v for v in doc["goal"] if v["dp"] == 2 and v["scenario"] in sbs.HARD]
    assert code_goal == (1 if code or any(not v["met"] for v in hard) else 0)
    assert missed or code_goal == 0
