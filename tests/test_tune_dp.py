"""``densegate tune --dp N``: bad input refused before any run; a small run proposes from
its own candidates by the goal's TTFT rule (modeled figures; no timing asserted)."""

from __future__ import annotations

import json

import pytest

from densegate.cli.main import main


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--align-ticks", "0"], "--align-ticks is for --dp N"),
        (["--load", "0.5"], "--load is for --dp N"),
        (["--dp", "2", "--align-ticks", "x"], "got 'x'"),
        (["--dp", "2", "--ttft-ms", "50"], "not with --dense-tokens, --ttft-ms"),
    ],
)
def test_bad_input_is_one_line_exit_2(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["tune", "--cost", "roofline:H100-SXM", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1, err


def test_small_run_proposes_a_candidate_within_the_ttft_allowance(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["tune", "--cost", "roofline:H100-SXM", "--dp", "2", "--workload", "steady",
            "--requests", "4", "--max-hold-passes", "2", "30", "--align-ticks", "off", "0",
            "--json", "--quiet"]  # fmt: skip
    assert main(argv) == 0
    res = json.loads(capsys.readouterr().out)["results"]["steady"]
    rows = res["candidates"]
    assert [(r["max_hold_passes"], r["align_ticks"]) for r in rows] == [
        (2, None), (2, 0), (30, None), (30, 0)
    ]  # fmt: skip
    assert all(r["finished"] == res["requests"] for r in rows)
    best = res["best_peer"]
    for r in rows:
        assert r["ttft_ok"] == (r["ttft_ms_p99"] <= 1.25 * best["ttft_ms_p99"])
        whole = r["tokens_per_s"] >= best["tokens_per_s"] and r["itl_ms_p99"] <= best["itl_ms_p99"]
        assert r["goal"] == (r["ttft_ok"] and whole)
    # Modeled, so fixed: K = 30 without the release holds far past the allowance, with it
    # (A = 0) it fires as soon as both ranks wait and is the proposal.
    assert [r["ttft_ok"] for r in rows] == [True, True, False, True]
    fits = [r for r in rows if r["ttft_ok"]]
    assert res["proposal"]["tokens_per_s"] == max(r["tokens_per_s"] for r in fits)
    assert (res["proposal"]["max_hold_passes"], res["proposal"]["align_ticks"]) == (30, 0)


def test_the_densegate_phase_runs_the_aligned_release_only_when_asked() -> None:
    """run_dp_policies hands align_ticks to every rank's gate (DPConfig -> AlignedGateConfig):
    ALIGNED decisions appear with it on, never with it off; every request finishes."""
    from densegate.lab.bench import WORKLOADS, bench_config
    from densegate.lab.bench.dp_policies import run_dp_policies
    from densegate.lab.bench.dp_runs import dp_trace
    from densegate.lab.cost.profile import Profile

    model = Profile.load("roofline:H100-SXM").model
    trace = dp_trace(WORKLOADS["steady"], 0, 2, 6)
    for align, expect in ((0, True), (None, False)):
        run = run_dp_policies(trace, bench_config(), 2, model, ["densegate"], align_ticks=align)
        reps = run["densegate"]["reports"]
        reasons = {why for rep in reps for _, _, why in rep.decisions}
        assert ("ALIGNED" in reasons) is expect, (align, reasons)
        assert run["densegate"]["finished"] == len(trace)
