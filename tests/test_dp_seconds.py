"""The DP side by side's seconds clock: arrivals in modeled seconds, a tick the slowest
rank's priced pass plus the collective, idle time jumping to the next arrival."""

from __future__ import annotations

import itertools
import json
import statistics

import pytest

from densegate.cli.main import main as cli_main
from densegate.impl.traces.workload import TraceRequest
from densegate.lab.bench import WORKLOADS, bench_config
from densegate.lab.bench.dp_clock import US
from densegate.lab.bench.dp_policies import run_dp_policies
from densegate.lab.bench.dp_seconds import arrival_rate, seconds_trace
from densegate.lab.cost.model import PassWork
from densegate.lab.cost.profile import roofline_profile

MODEL = roofline_profile("H100-SXM").model


def test_seconds_trace_keeps_lengths_and_draws_the_rate() -> None:
    w = WORKLOADS["chat"]
    trace = seconds_trace(w, 0, 4, 100, 50.0)
    assert [(r.prompt_len, r.output_len) for r in trace] == [
        (r.prompt_len, r.output_len) for r in w.make(400, 0)
    ]
    gaps = [(b.arrival_pass - a.arrival_pass) / US for a, b in itertools.pairwise(trace)]
    assert statistics.mean(gaps) == pytest.approx(1 / 50.0, rel=0.15)
    bursty = seconds_trace(WORKLOADS["bursty"], 0, 4, 100, 50.0)
    same = sum(a.arrival_pass == b.arrival_pass for a, b in itertools.pairwise(bursty))
    assert same > len(bursty) // 2  # arrivals come in bursts
    assert arrival_rate(trace, 0.5, 1000.0) == pytest.approx(
        0.5 * 1000.0 / statistics.mean(r.output_len for r in trace)
    )


def _run(trace: list[TraceRequest], policies: list[str]) -> dict[str, dict[str, object]]:
    return run_dp_policies(trace, bench_config(), 2, MODEL, policies, clock="seconds")


def test_a_tick_costs_the_slowest_ranks_pass_plus_the_collective() -> None:
    trace = seconds_trace(WORKLOADS["steady"], 0, 2, 8, 40.0)
    runs = _run(trace, ["densegate", "gate-off"])
    for r in runs.values():
        reps = r["reports"]  # type: ignore[index]
        works: dict[int, list[float]] = {}
        for x in reps:  # type: ignore[attr-defined]
            for row in x.timing["work"]:
                works.setdefault(row[0], []).append(MODEL.pass_ms(PassWork.from_list(row[1:])))
        ticks = sorted(works)
        modeled = r["modeled"]["tick_ms"]  # type: ignore[index]
        assert len(works) > 10
        # every tick that ran a pass costs its slowest rank's pass plus the collective
        costs = [max(works[t]) + MODEL.collective_ms for t in ticks]
        assert modeled["p50"] == pytest.approx(statistics.median_low(costs), abs=2e-3) or (
            modeled["p50"] == pytest.approx(statistics.median(costs), abs=2e-3)
        )


def test_idle_time_jumps_to_the_next_arrival() -> None:
    late = 5 * US  # five modeled seconds after the first request: the group idles between
    trace = [TraceRequest(0, 64, 4), TraceRequest(late, 64, 4)]
    r = _run(trace, ["densegate"])["densegate"]
    ttft = r["modeled"]["ttft_ms"]  # type: ignore[index]
    # each request's first token comes one prefill tick after it arrives, not 5 s later
    assert ttft["max"] < 100
    assert r["modeled"]["seconds"] > 5.0  # type: ignore[index]


def test_the_same_arrivals_for_every_policy() -> None:
    trace = seconds_trace(WORKLOADS["long-prompt"], 0, 2, 6, 20.0)
    runs = _run(trace, ["densegate", "gate-off", "atom-coalescer"])
    first = {n: min(r["modeled"]["ttft_ms"].values()) for n, r in runs.items()}  # type: ignore[index]
    assert all(v > 0 for v in first.values())
    # on the seconds clock a policy that holds pays in TTFT, not in arrivals coming later
    assert first["atom-coalescer"] >= first["gate-off"] - 1e-9


def test_bench_json_says_seconds_and_ticks_stays_available(
    capsys: pytest.CaptureFixture[str],
) -> None:
    base = ["bench", "--dp", "2", "--cost", "roofline:H100-SXM", "--workload", "steady",
            "--requests", "5", "--policies", "densegate,gate-off,sglang-delayer", "--json",
            "--quiet"]  # fmt: skip
    assert cli_main([*base, "--load", "0.5"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["clock"] == "seconds" and d["densegate"]["mode"] == "paced"
    assert d["workloads"][0]["capacity_tokens_per_s"] > 0
    assert cli_main([*base, "--clock", "ticks"]) == 0
    assert json.loads(capsys.readouterr().out)["clock"] == "ticks"
    assert cli_main(["bench", "--clock", "seconds"]) == 2


def test_the_cells_in_worker_processes_give_the_same_tables(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--jobs``: each (workload, load) cell is a seeded run, so where it runs changes no
    figure; bad or misplaced values are one line, exit 2."""
    base = ["bench", "--dp", "2", "--cost", "roofline:H100-SXM", "--workload", "steady,chat",
            "--requests", "4", "--policies", "densegate,gate-off,vllm-cadence-2", "--load",
            "0.3,0.9", "--json", "--quiet"]  # fmt: skip
    assert cli_main([*base, "--jobs", "1"]) == 0
    one = json.loads(capsys.readouterr().out)
    assert cli_main([*base, "--jobs", "3"]) == 0
    three = json.loads(capsys.readouterr().out)
    assert one == three
    assert [(w["name"], w["load"]) for w in one["workloads"]] == [
        (n, load) for n in ("steady", "chat") for load in (0.3, 0.9)
    ]
    for argv, says in (
        ([*base, "--jobs", "0"], "--jobs"),
        (["bench", "--jobs", "2"], "--jobs needs --dp N"),
        (
            ["bench", "--dp", "2", "--runner", "torch", "--policies", "densegate", "--jobs", "2"],
            "--jobs is for the modeled side by side",
        ),
    ):
        assert cli_main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and says in err, err
