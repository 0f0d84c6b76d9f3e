"""The policy benchmark's plumbing (``densegate bench``) and the benchmark scripts' smoke runs.

No test here asserts a timing: the figures checked are counts in passes and
tokens, which a seeded workload fixes whatever the machine's speed.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from densegate.cli.main import main as cli_main
from densegate.impl.traces.workload import TraceRequest
from densegate.lab.bench import (
    BENCH_POLICIES,
    ROWS,
    WORKLOADS,
    BenchResult,
    WorkloadRun,
    bench_config,
    format_tables,
    run_bench,
    run_policy,
)

ROOT = Path(__file__).resolve().parents[1]
SMALL = 10  # requests per workload: every policy drains it in well under a second


@pytest.fixture(scope="module")
def small() -> BenchResult:
    return run_bench(requests=SMALL, seed=3)


def test_every_policy_drains_every_request(small: BenchResult) -> None:
    assert list(small.workloads) == list(WORKLOADS)
    for w in small.workloads.values():
        assert list(w.runs) == list(BENCH_POLICIES)
        assert w.requests == SMALL
        for run in w.runs.values():
            f = run.figures
            assert f["requests"] == f["finished"] == SMALL
            assert f["passes"] >= 1
            assert len(run.ttft_passes) == SMALL
    assert small.drained


def test_same_trace_same_output_tokens_across_policies(small: BenchResult) -> None:
    for w in small.workloads.values():
        outs = {r.figures["output_tokens"] for r in w.runs.values()}
        assert len(outs) == 1, w.workload


def test_densegate_underfull_interruptions_come_only_from_the_valves(small: BenchResult) -> None:
    # Density soundness: a DENSE fire admits >= dense_tokens, so an under-full
    # prefill pass beside decodes can only be a BUDGET fire.
    for w in small.workloads.values():
        by_reason = w.runs["densegate"].figures["underfull_interrupting_by_reason"]
        assert set(by_reason) <= {"BUDGET", "NO_DECODE"}, (w.workload, by_reason)


def test_ungated_policies_never_hold(small: BenchResult) -> None:
    for w in small.workloads.values():
        for p in ("legacy", "vllm-v1"):
            assert "HOLD" not in w.runs[p].summary["reasons"], (w.workload, p)


def test_policy_configs_differ_only_as_documented() -> None:
    base = bench_config()
    cfgs = {name: p.config(base) for name, p in BENCH_POLICIES.items()}
    assert cfgs["legacy"].enable_chunked_prefill is False
    for name in ("densegate", "original", "vllm-v1"):
        assert cfgs[name].enable_chunked_prefill is True
        assert cfgs[name].long_prefill_token_threshold is None
    for cfg in cfgs.values():
        assert cfg.max_num_batched_tokens == base.max_num_batched_tokens
        assert cfg.max_num_seqs == base.max_num_seqs
        assert cfg.num_blocks == base.num_blocks
        # A whole prompt fits a pass beside a full set of decodes.
        assert cfg.max_num_batched_tokens - cfg.max_num_seqs >= cfg.max_model_len
    # vllm-v1 is densegate's scheduler with the gate off, and nothing else changed.
    assert dataclasses.replace(cfgs["vllm-v1"], gate_enabled=True) == cfgs["densegate"]
    assert dataclasses.replace(cfgs["legacy"], enable_chunked_prefill=True) == cfgs["vllm-v1"]


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_workloads_are_seeded_and_reproducible(name: str) -> None:
    w = WORKLOADS[name]
    a, b = w.trace(7, 50), w.trace(7, 50)
    assert a == b
    assert len(a) == 50
    assert a != w.trace(8, 50)
    assert len(w.trace(7)) == w.requests
    assert all(r.prompt_len + r.output_len <= bench_config().max_model_len for r in a)
    assert [r.arrival_pass for r in a] == sorted(r.arrival_pass for r in a)


def test_bursty_arrives_in_bursts() -> None:
    trace = WORKLOADS["bursty"].trace(0, 200)
    per_pass: dict[int, int] = {}
    for r in trace:
        per_pass[r.arrival_pass] = per_pass.get(r.arrival_pass, 0) + 1
    assert max(per_pass.values()) >= 6
    assert len(per_pass) < len(trace) / 3


def test_pass_figures_on_a_single_request() -> None:
    # One request alone: pass 0 prefills it (nothing decodes: a tail-escape fire)
    # and samples token 1; passes 1-4 decode tokens 2-5, decode-only.
    run = run_policy([TraceRequest(0, 10, 5)], BENCH_POLICIES["densegate"], bench_config())
    f = run.figures
    assert f["passes"] == 5
    assert f["decode_tokens"] == 4
    assert f["decode_tokens_in_decode_only_share"] == 1.0
    assert f["underfull_interrupting"] == 0
    assert run.fills == [10 / bench_config().dense]
    assert run.ttft_passes == [1]
    assert f["ttft_ms"] is None and f["output_tokens_per_s"] is None


def test_table_has_every_row_and_policy_column(small: BenchResult) -> None:
    text = format_tables(small)
    header = "| figure | " + " | ".join(BENCH_POLICIES) + " |"
    assert text.count(header) == len(WORKLOADS)
    for label, _cell, needs_time in ROWS:
        assert (f"| {label} |" in text) is not needs_time, label
    for name in WORKLOADS:
        assert f"### {name}:" in text
    assert "densegate: every undisturbed head wait within its S6 bound" in text


def test_torch_runner_adds_the_wall_clock_rows() -> None:
    pytest.importorskip("torch")
    base = bench_config("torch")
    trace = [TraceRequest(0, 12, 3), TraceRequest(1, 20, 2), TraceRequest(1, 5, 4)]
    runs = {p: run_policy(trace, BENCH_POLICIES[p], base) for p in ("densegate", "legacy")}
    for r in runs.values():
        assert r.figures["finished"] == 3
        assert r.figures["ttft_ms"]["max"] is not None
        assert r.figures["output_tokens_per_s"] is not None
    result = BenchResult(
        "torch", 0, {**vars(base), "dense_tokens": base.dense},
        {"tiny": WorkloadRun("tiny", "three requests", 3, runs)}, 0.0,
    )  # fmt: skip
    text = format_tables(result)
    for label, _cell, _needs_time in ROWS:
        assert f"| {label} |" in text, label


def test_cli_json_shape(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli_main(
        ["bench", "--requests", "6", "--workloads", "steady,chat", "--policies",
         "densegate", "legacy", "--json", "--quiet"]
    )  # fmt: skip
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert {"runner", "seed", "config", "policies", "workloads", "wall_s", "plots"} <= set(out)
    assert out["runner"] == "null"
    assert list(out["policies"]) == ["densegate", "legacy"]
    assert out["policies"]["legacy"]["enable_chunked_prefill"] is False
    assert list(out["workloads"]) == ["steady", "chat"]
    for w in out["workloads"].values():
        assert w["requests"] == 6
        assert set(w["policies"]) == {"densegate", "legacy"}
        for p in w["policies"].values():
            assert p["figures"]["finished"] == 6
            assert {"p50", "p99", "max"} <= set(p["figures"]["ttft_passes"])
            assert p["summary"]["passes"] == p["figures"]["passes"]
        assert all({"name", "ok", "detail"} == set(c) for c in w["checks"])


def test_cli_rejects_unknown_names(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["bench", "--workloads", "nope", "--quiet"]) == 2
    assert "unknown workload 'nope'" in capsys.readouterr().err
    assert cli_main(["bench", "--policies", "fcfs", "--quiet"]) == 2


def test_cli_plot_writes_pngs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    code = cli_main(
        ["bench", "--requests", "5", "--workloads", "bursty", "--quiet", "--plot", str(tmp_path)]
    )
    assert code == 0
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["prefill_fill_bursty.png", "ttft_cdf_bursty.png"]
    for name in files:
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"wrote {tmp_path / 'ttft_cdf_bursty.png'}" in capsys.readouterr().out


@pytest.mark.parametrize("script", ["scheduler_cost.py", "queue_scaling.py"])
def test_benchmark_scripts_smoke(script: str) -> None:
    # --quick: tiny sizes, only that the script runs end to end and prints its ratios.
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), "--quick"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "ratio" in proc.stdout
