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
        (["--dp", "2", "--max-hold-passes", "4", "--pace-tokens", "365"], "add 'off' to"),
        (["--dp", "2", "--align-ticks", "0", "--pace-tokens", "365"], "--align-ticks sets"),
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
            "--pace-tokens", "off", "365", "--surge-tokens", "off", "200", "706", "--json",
            "--quiet"]  # fmt: skip
    assert main(argv) == 0
    res = json.loads(capsys.readouterr().out)["results"]["steady"]
    rows = res["candidates"]
    # a surge cap only beside a pace cap at or under it: (off, 200) and (365, 200) are skipped;
    # a paced candidate runs once (K and align_ticks do not apply: None in its row)
    got = [(r["max_hold_passes"], r["align_ticks"], r["pace_tokens"], r["surge_tokens"])
           for r in rows]  # fmt: skip
    want: list[tuple[int | None, ...]] = [(k, a, None, None) for k in (2, 30) for a in (None, 0)]
    want += [(None, None, 365, None), (None, None, 365, 706)]
    assert got == want
    assert all(r["finished"] == res["requests"] for r in rows)
    assert "trtllm-adp-variant" not in res["peers"]  # variants are not the bar
    best = res["best_peer"]
    for r in rows:
        assert r["ttft_ok"] == (r["ttft_ms_p99"] <= best["ttft_ms_p99"])
        whole = (r["tokens_per_s"] >= 0.995 * best["tokens_per_s"]
                 and r["itl_ms_p99"] <= best["itl_ms_p99"])  # fmt: skip
        assert r["goal"] == (r["ttft_ok"] and whole)
    fits = [r for r in rows if r["ttft_ok"]]
    if fits:
        assert res["proposal"]["tokens_per_s"] == max(r["tokens_per_s"] for r in fits)
    else:
        assert res["proposal"] is None and "no candidate" in res["why_none"]
    # paced candidates never hold: their TTFT p99 is at most the held ones' with K = 30
    paced = [r["ttft_ms_p99"] for r in rows if r["pace_tokens"] == 365]
    held = [r["ttft_ms_p99"] for r in rows if r["pace_tokens"] is None and r["align_ticks"] is None
            and r["max_hold_passes"] == 30]  # fmt: skip
    assert max(paced) <= min(held)


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
