"""The engine side by sides' hard loads and issue 32's goal verdicts: each load has the shape
its name promises, and every bar is met or missed by the figures it names."""

from __future__ import annotations

import statistics
from typing import Any

import pytest

from densegate.lab.bench.dp_verdict import beaten_by, format_verdicts
from densegate.lab.bench.hard_loads import HOT_SHARE, LOADS, OSC_PERIOD, hard_load
from densegate.lab.bench.side_goal import dominators, finish, front_line, goal, summary

STEP_US = 7000


def _load(name: str, dp: int = 4, n: int = 100) -> Any:
    return hard_load(name, dp, n, 0.2, STEP_US, prompt_median=96, output_median=40,
                     max_model_len=1024)  # fmt: skip


def test_every_load_is_seeded_and_sized() -> None:
    for name in LOADS:
        a, b = _load(name), _load(name)
        assert a == b and len(a.requests) == 400
        assert all(r.at_us >= 0 and r.prompt_len >= 2 and r.output_len >= 1 for r in a.requests)
        mean_gap = max(r.at_us for r in a.requests) / len(a.requests) / STEP_US
        assert mean_gap == pytest.approx(1 / (0.2 * 4), rel=0.3), name  # the mean rate kept
    assert _load("poisson") != hard_load("poisson", 4, 100, 0.2, STEP_US, prompt_median=96,
                                         output_median=40, max_model_len=1024, seed=1)  # fmt: skip


def test_skewed_pins_about_three_quarters_to_rank_zero() -> None:
    reqs = _load("skewed").requests
    assert all(r.rank is not None for r in reqs)
    hot = sum(r.rank == 0 for r in reqs) / len(reqs)
    assert hot == pytest.approx(HOT_SHARE, abs=0.06)
    assert {r.rank for r in reqs} == {0, 1, 2, 3}
    assert all(r.rank is None for r in _load("poisson").requests)


def test_oscillating_alternates_and_bursts_arrive_together() -> None:
    reqs = _load("oscillating-rate").requests
    half = OSC_PERIOD * STEP_US
    high = sum(int(r.at_us // half) % 2 == 0 for r in reqs)
    assert high > 0.8 * len(reqs)  # 1.8x against 0.2x: 90 % in the high halves
    bursts = _load("long-bursts").requests
    sizes = [sum(1 for r in bursts if r.at_us == t) for t in sorted({r.at_us for r in bursts})]
    assert statistics.mean(sizes) >= 15  # bursts of 4 * dp at once


def test_kv_tight_has_longer_requests_and_a_share() -> None:
    tight, base = _load("kv-tight"), _load("poisson")
    assert tight.kv_share < 1.0 == base.kv_share

    def mean_len(load: Any) -> float:
        return statistics.mean(r.prompt_len + r.output_len for r in load.requests)

    assert mean_len(tight) > 1.5 * mean_len(base)


def test_bad_loads_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown load"):
        _load("nope")
    with pytest.raises(ValueError, match="must be > 0"):
        hard_load("poisson", 0, 1, 0.2, STEP_US, prompt_median=9, output_median=9,
                  max_model_len=64)  # fmt: skip


def _row(name: str, steps: int, ttft: float, tok: float, ttft_ms: float, itl_ms: float,
         **kw: Any) -> dict[str, Any]:  # fmt: skip
    modeled = {"tokens_per_s": tok, "ttft_ms_p99": ttft_ms, "itl_ms_p99": itl_ms}
    row = {"scenario": "s", "dp": 2, "name": name, "steps": steps, "ttft_steps_p99": ttft,
           "disagreements": 0, "finished": 10, "submitted": 10, "held_share": 0.0,
           "modeled": modeled}  # fmt: skip
    row.update(kw)
    return row


def test_goal_meets_and_misses_each_bar_on_its_figure() -> None:
    base = [_row("plain", 100, 5, 1000, 30, 8), _row("cadence-2", 100, 4, 990, 40, 8)]
    ok = goal([*base, _row("densegate", 105, 4, 995, 30, 8)], ttft_refs=["cadence-2"])
    assert all(v.met for v in ok) and len(ok) == 7
    bad = goal([*base, _row("densegate", 106, 5, 994, 31, 8.1, disagreements=1,
                            finished=9)], ttft_refs=["cadence-2"])  # fmt: skip
    assert not any(v.met for v in bad)
    assert bad[0].line().startswith("goal: missed s dp=2 steps: 106 vs plain 100")
    held = goal([_row("plain", 1, 1, 1, 1, 1, held_share=0.0),
                 _row("sglang", 1, 1, 1, 1, 1, held_share=0.2),
                 _row("densegate", 1, 1, 1, 1, 1, held_share=0.3)],
                ttft_refs=["sglang"], held_ref="sglang")  # fmt: skip
    assert [v.bar for v in held if not v.met] == ["held-share"]


def test_dominators_are_arms_no_worse_on_every_priced_figure_and_better_on_one() -> None:
    ours = _row("densegate", 100, 2, 1136, 31.4, 7.84)
    same = _row("twin", 100, 2, 1136, 31.4, 7.84)  # equal everywhere: not ahead
    ahead = _row("plain", 100, 2, 1137, 26.9, 7.84)  # plain on today dp 2 (INTEGRATIONS.md)
    trade = _row("cadence-8", 100, 15, 1155, 107.1, 7.83)  # better tokens/s, worse TTFT
    worse_itl = _row("cadence-2", 100, 2, 1137, 26.9, 7.85)  # ahead but one ITL step behind
    got = dominators([ours, same, ahead, trade, worse_itl])
    assert got == {("s", 2): ["plain"]}
    assert front_line("s", 2, got[("s", 2)]) == "front: densegate beaten outright s dp=2 by plain"
    assert dominators([ours, same, trade]) == {("s", 2): []}
    assert front_line("s", 2, []) == "front: densegate not beaten outright s dp=2"
    other = {**_row("plain", 1, 1, 1, 1, 1), "scenario": "t"}  # scenarios apart
    got = dominators([ours, ahead, {**ours, "scenario": "t"}, other])
    assert got == {("s", 2): ["plain"], ("t", 2): []}


def test_the_summary_reads_each_column_from_its_arm() -> None:
    rows = [_row("plain", 100, 5, 1000, 30, 8.5, held_share=0.0),
            _row("sglang", 90, 4, 990, 40, 7.25, held_share=0.25),
            _row("densegate", 104, 6, 995, 31, 8, held_share=0.125),
            {**_row("plain", 7, 1, 3, 2, 1), "scenario": "t"},
            {**_row("sglang", 7, 1, 3, 2, 1), "scenario": "t"},
            {**_row("densegate", 7, 1, 3, 2, 1), "scenario": "t"}]  # fmt: skip
    ver = goal(rows, ttft_refs=["sglang"], held_ref="sglang")
    kw: dict[str, Any] = {"unit": "passes", "ttft_refs": ["sglang"], "ref_label": "sglang"}
    text = summary(rows, ver, dominators(rows), held_ref="sglang", **kw).splitlines()
    assert text[0].startswith("| scenario | dp | passes: densegate / plain | TTFT p99 passes: ")
    assert text[0].count("|") - 1 == text[1].count("---") == 10
    # tokens/s against plain's (best), TTFT against plain's 30, ITL against sglang's 7.25
    assert text[2] == ("| s | 2 | 104 / 100 | 6 / 4 | 12.5% / 25.0% | 995 / 1000 | 31 / 30 | "
                       "8.00 / 7.25 | 3 of 8 | none |")  # fmt: skip
    assert (
        text[3]
        == "| t | 2 | 7 / 7 | 1 / 1 | 0.0% / 0.0% | 3 / 3 | 2 / 2 | 1.00 / 1.00 | 0 of 8 | none |"
    )
    assert text[-2:] == ["goal bars met: 13 of 16", "densegate beaten outright (another arm no "
                         "worse on modeled tokens/s, TTFT p99 and ITL p99, better on one) in 0 "
                         "of 2 scenarios"]  # fmt: skip
    steps = summary(rows[:3], ver[:8], {("s", 2): ["plain"]}, **kw).splitlines()
    assert "held" not in steps[0] and steps[1].count("---") == 9
    assert steps[2].endswith("| 3 of 8 | plain |")


def test_a_side_by_side_fails_on_its_hard_bars_and_on_goal_bars_only_when_asked(
    capsys: pytest.CaptureFixture[str],
) -> None:
    rows = [_row("plain", 100, 5, 1000, 30, 8), _row("densegate", 100, 5, 1000, 31, 8)]
    ver = goal(rows, ttft_refs=["plain"])  # one bar missed: modeled TTFT
    assert finish([], ver, goal_bars=False) == 0
    assert capsys.readouterr().err == ""
    assert finish([], ver, goal_bars=True) == 1
    assert capsys.readouterr().err == f"FAIL: {ver[3].line()}\n"
    tie = goal([rows[0], rows[0] | {"name": "densegate"}], ttft_refs=["plain"])  # all met
    assert finish(["doc drifted"], tie, goal_bars=True) == 1
    assert capsys.readouterr().err == "FAIL: doc drifted\n"


def test_the_dp_verdict_counts_cells_an_engine_rule_beats_outright() -> None:
    def row(name: str, tok: float, ttft: float | None, itl: float) -> dict[str, Any]:
        return {"name": name, "tokens_per_s": tok, "ttft_ms_p99": ttft, "itl_ms_p99": itl}

    ours = row("densegate", 100, 50, 10)
    cell = [ours, row("vllm-cadence-2", 100, 49, 10), row("trtllm-adp-variant", 101, 50, 9),
            row("atom-coalescer", 101, 40, 11), row("sglang-delayer", 100, None, 9)]  # fmt: skip
    bar = ["vllm-cadence-2", "atom-coalescer", "sglang-delayer"]  # the variant is not a bar
    assert beaten_by(cell, bar) == ["vllm-cadence-2"]
    assert beaten_by([ours, row("vllm-cadence-2", 100, 50, 10)], bar) == []  # a tie: twin
    entry = {
        "name": "w",
        "load": 0.3,
        "policies": cell,
        "goal": {"tokens_per_s": True, "itl_ms_p99": True, "ttft_ms_p99": False},
    }
    lines = format_verdicts([entry, {**entry, "load": 0.6, "policies": cell[:1] + cell[2:]}], bar)
    assert lines[-1] == ("an engine rule beats densegate on tokens/s, TTFT p99 and ITL p99 at "
                         "once in 1 of 2 cells (w 0.3 by vllm-cadence-2)")  # fmt: skip
