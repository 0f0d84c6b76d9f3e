"""``densegate tune``: the proposal is the best candidate that meets the target, or none.

Replays are the bench's own (null runner, a small workload), memoized so that
one grid is judged against several targets without replaying it again.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

from densegate.cli.main import main as cli_main
from densegate.cli.tune import bench_replay
from densegate.lab.bench import bench_config
from densegate.lab.cost import roofline_profile
from densegate.lab.cost.tune import (
    Candidate,
    Replayed,
    Row,
    Target,
    TuneError,
    check_workloads,
    grid,
    tune,
)

ROOT = pathlib.Path(__file__).resolve().parent.parent
BUDGET = bench_config().max_num_batched_tokens
GRID = grid([BUDGET // 4, BUDGET - 128], [2, 8, 32], BUDGET)


@pytest.fixture(scope="module")
def replay() -> Any:
    """The bursty workload, 60 requests, priced by the H200 roofline; each replay once."""
    inner = bench_replay("bursty", 0, 60, roofline_profile("H200").model)
    seen: dict[Candidate | None, Replayed] = {}

    def memo(c: Candidate | None) -> Replayed:
        if c not in seen:
            seen[c] = inner(c)
        return seen[c]

    return memo


def _meets(r: Row, t: Target) -> bool:
    """The target test, written again from the row's raw figures."""
    if r.finished != r.requests or r.violations or r.bound_passes is None:
        return False
    if t.unit == "passes":
        worst = max(r.bound_passes, r.ttft_passes_max or 0)
    else:
        worst = max(r.bound_ms or float("inf"), r.ttft_ms["max"] or float("inf"))
    return worst <= t.value


def _worst(r: Row, unit: str) -> float:
    if unit == "passes":
        return float(max(r.bound_passes or 0, r.ttft_passes_max or 0))
    return max(r.bound_ms or 0.0, r.ttft_ms["max"] or 0.0)


@pytest.mark.parametrize("unit", ["passes", "ms"])
def test_proposal_is_the_argmax_over_the_candidates_that_meet_the_target(
    replay: Any, unit: str
) -> None:
    loose = tune("bursty", GRID, replay)
    worst = sorted({_worst(r, unit) for r in loose.rows})
    assert len(worst) >= 2, "the grid's candidates must differ for the target to split them"
    # A target between the smallest and largest worst figure: some meet it, some do not.
    target = Target(unit, (worst[0] + worst[-1]) / 2)
    t = tune("bursty", GRID, replay, target)
    ok = [r for r in t.rows if _meets(r, target)]
    assert 0 < len(ok) < len(t.rows)
    assert [r.meets for r in t.rows] == [_meets(r, target) for r in t.rows]
    best = max(r.tokens_per_s or 0.0 for r in ok)
    assert t.proposal is not None and t.proposal.meets
    assert t.proposal.tokens_per_s == best
    assert "highest modeled tokens/s" in t.reason
    for r in t.rows:
        rp = replay(r.candidate)
        scale = 1.0 if unit == "passes" else max(rp.modeled.tick_ms)
        bounds = [b for _, _, b in rp.s6["per_request"]]
        assert r.over_target == sum(b * scale > target.value for b in bounds)


def test_ratio_is_to_the_gate_off_replay_of_the_same_run(replay: Any) -> None:
    t = tune("bursty", GRID[:2], replay)
    off = replay(None).modeled.tokens_per_s
    assert t.baseline.candidate is None and t.baseline.tokens_per_s == off
    assert t.baseline.bound_passes is None, "S6 is the gate's: gate off gets no bound"
    for r in t.rows:
        assert r.ratio_to_gate_off == pytest.approx(r.tokens_per_s / off)
        assert r.bound_ms == pytest.approx(
            r.bound_passes * max(replay(r.candidate).modeled.tick_ms)
        )


def test_a_target_nobody_meets_gives_none_and_says_why(replay: Any) -> None:
    t = tune("bursty", GRID, replay, Target("passes", 1))
    assert t.proposal is None
    assert not any(r.meets for r in t.rows)
    assert "none of the 6 candidates meets the target 1 passes" in t.reason
    smallest = min(r.bound_passes or 0 for r in t.rows)
    assert f"S6 bound {smallest} passes > target 1" in t.reason


@pytest.mark.parametrize(
    ("call", "named"),
    [
        (lambda: grid([], [2], BUDGET), "empty grid"),
        (lambda: grid([512], [], BUDGET), "empty grid"),
        (lambda: grid([BUDGET + 1], [2], BUDGET), f"dense_tokens {BUDGET + 1} is over"),
        (lambda: grid([0], [2], BUDGET), "got 0"),
        (lambda: grid([512], [-3], BUDGET), "got -3"),
        (lambda: Target("passes", 0), "got 0"),
        (lambda: Target("ms", -2.5), "got -2.5"),
        (lambda: Target("ms", float("nan")), "got nan"),
        (lambda: check_workloads(["nope"], ["steady"]), "unknown workload 'nope'"),
        (lambda: tune("steady", [], lambda c: None), "empty grid"),
    ],
)
def test_bad_inputs_are_named(call: Any, named: str) -> None:
    with pytest.raises(TuneError, match=named):
        call()


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--workload", "nope"], "unknown workload 'nope'"),
        (["--dense-tokens", str(BUDGET + 1)], f"dense_tokens {BUDGET + 1} is over"),
        (["--max-hold-passes", "x"], "--max-hold-passes: 'x' is not an int"),
        (["--ttft-ms", "0"], "--ttft-ms: the value must be > 0, got 0"),
        (["--ttft-passes", "-1"], "--ttft-passes: the value must be > 0, got -1"),
    ],
)
def test_cli_names_bad_inputs(
    extra: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["tune", "--cost", "roofline:H200", "--workload", "steady", "--quiet", *extra]
    assert cli_main(argv) == 2
    err = capsys.readouterr().err
    assert named in err and err.count("\n") == 1


def test_cli_end_to_end_on_the_cpu_profile(capsys: pytest.CaptureFixture[str]) -> None:
    profile = str(ROOT / "benchmarks" / "profiles" / "cpu.json")
    argv = ["tune", "--cost", profile, "--workload", "steady", "--requests", "30",
            "--dense-tokens", "544,2048", "--max-hold", "2", "8", "--ttft-passes", "500",
            "--quiet"]  # fmt: skip
    assert cli_main(argv) == 0
    out = capsys.readouterr().out
    assert "profile measured-cpu" in out and "every time below is modeled" in out
    table = [ln for ln in out.splitlines() if ln.startswith("| ")]
    assert len(table) == 1 + 1 + 4  # header, gate off, four candidates
    assert "modeled tokens/s" in table[0] and "gate off" in table[1]
    assert out.count("<- proposed") == (0 if "proposal: none" in out else 1)
    assert cli_main([*argv, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (res,) = doc["results"]
    assert len(res["candidates"]) == 4 and res["workload"] == "steady"
