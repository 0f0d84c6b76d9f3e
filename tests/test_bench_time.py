"""``densegate bench --cost`` (modeled, one rank and DP) and the measured time tables.

Modeled figures are deterministic (null runner, a fixed profile), so they are
checked exactly against the model; measured ones only for being present.
"""

from __future__ import annotations

import json

import pytest

from densegate.cli.main import main as cli_main
from densegate.lab.bench import WORKLOADS, bench_config, run_bench
from densegate.lab.bench.dp_runs import DP_PHASES, dp_trace, run_dp_phases
from densegate.lab.cost import LinearPassModel, PassWork, roofline_profile

UNIT = LinearPassModel({k: (1.0, 0, 0, 0, 0, 0) for k in ("prefill", "mixed", "decode_eager")})
"""Every pass 1 ms: modeled seconds count passes that ran."""


def test_modeled_bench_prices_every_pass() -> None:
    r = run_bench(["steady"], ["densegate", "vllm-v1"], requests=20, model=UNIT)
    for run in r.workloads["steady"].runs.values():
        m = run.modeled
        assert m is not None and run.measured is None
        assert m.output_tokens == run.figures["output_tokens"]
        assert m.seconds * 1e3 == pytest.approx(len(m.tick_ms))
        assert len(m.tick_ms) <= run.figures["passes"]
        assert run.figures["modeled_time"]["output_tokens_per_s"] == pytest.approx(
            m.output_tokens / m.seconds
        )
    with pytest.raises(ValueError, match="rounds must be 1"):
        run_bench(["steady"], requests=5, rounds=2)


def test_dp_phases_model_ticks_as_slowest_rank() -> None:
    trace = dp_trace(WORKLOADS["bursty"], 0, 2, 12)
    assert len(trace) == 24
    model = roofline_profile("H100-SXM").model
    runs = run_dp_phases(trace, bench_config(), 2, model)
    assert list(runs) == list(DP_PHASES)
    for run in runs.values():
        assert run.finished == len(trace)
        works: dict[int, list[PassWork]] = {}
        for rep in run.reports:
            for row in rep.timing["work"]:
                works.setdefault(row[0], []).append(PassWork.from_list(row[1:]))
        expected = [
            max(model.pass_ms(w) for w in works[t]) + model.collective_ms for t in sorted(works)
        ]
        assert run.modeled.tick_ms == pytest.approx(expected)
    assert (
        runs["coordinated"].alignment["mixed_ticks"] <= runs[DP_PHASES[2]].alignment["mixed_ticks"]
    )


def test_bench_cost_cli_one_rank_and_dp(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["bench", "--cost", "roofline:H200", "--workloads", "steady", "--requests", "15"]
    assert cli_main([*argv, "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "modeled output tokens/s" in out and "GPU H200" in out
    assert cli_main([*argv, "--dp", "2", "--quiet", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    phases = d["workloads"]["steady"]["phases"]
    assert set(phases) == set(DP_PHASES) and d["dp"] == 2
    assert all(p["finished"] == 30 for p in phases.values())
    assert cli_main(["bench", "--dp", "2", "--quiet"]) == 2
    assert cli_main(["bench", "--cost", "roofline:B1", "--quiet"]) == 2


def test_measured_bench_pools_rounds(
    one_torch_thread: None, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["bench", "--runner", "torch", "--workloads", "steady", "--requests", "4"]
    assert cli_main([*argv, "--policies", "densegate,vllm-v1", "--quiet", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    t = d["workloads"]["steady"]["time"]
    assert set(t) == {"densegate", "vllm-v1"} and d["config"]["rounds"] == 2
    assert t["vllm-v1"]["ratio_to_baseline"] == pytest.approx(1.0)
    assert all(x["rounds"] == 2 and x["ttft_ms"]["p50"] is not None for x in t.values())


def test_dp_timing_table_only_for_a_timed_runner() -> None:
    from densegate.impl.dp.report import RankReport
    from densegate.lab.dp.timing import phase_timing

    def rep(phase: str, runner: str, tokens: int) -> RankReport:
        r = RankReport(0, 1, phase, "aligned", "on", runner, "round-robin")
        r.timing = {"output_tokens": tokens, "seconds": 1.0, "ttft_ms": [1.0], "itl_ms": [],
                    "tick_ms": [1.0], "work": [], "requests": []}  # fmt: skip
        return r

    by_phase = {
        "coordinated": {0: rep("coordinated", "torch", 30)},
        "uncoordinated_gate_off": {0: rep("uncoordinated_gate_off", "torch", 20)},
        "uncoordinated_local_gate": {0: rep("uncoordinated_local_gate", "null", 99)},
    }
    t = phase_timing(by_phase)
    assert t is not None and set(t["phases"]) == {"coordinated", "uncoordinated_gate_off"}
    assert t["phases"]["coordinated"]["ratio_to_baseline"] == pytest.approx(1.5)
    null = {"coordinated": {0: rep("coordinated", "null", 30)}}
    assert phase_timing(null) is None
