"""The DP policies measured on real gloo rank processes (``densegate bench --dp N --runner
torch --policies``): the schema, every request finished in every round, the peers'
slots carried by the rank's one all-reduce, and the flags that do not apply refused.

One launch each (process start-up costs seconds on two cores), a tiny workload.
"""

from __future__ import annotations

import json

import pytest
import torch.distributed as dist

from densegate.cli.main import main as cli_main
from densegate.lab.bench import WORKLOADS, bench_config
from densegate.lab.bench.dp_measured import measured_rows, run_measured_policies
from densegate.lab.bench.dp_runs import dp_trace

pytestmark = pytest.mark.skipif(
    not (dist.is_available() and dist.is_gloo_available()), reason="needs torch.distributed gloo"
)

_BASE = ["bench", "--dp", "2", "--runner", "torch", "--workload", "steady", "--quiet"]


def test_measured_json_every_policy_finishes_every_round(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = [*_BASE, "--policies", "densegate,gate-off,sglang-delayer", "--requests", "4",
            "--rounds", "2", "--json"]  # fmt: skip
    assert cli_main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["measured"] is True and out["dp"] == 2 and out["rounds"] == 2
    (w,) = out["workloads"]
    assert w["name"] == "steady" and w["requests"] == 8
    names = [p["name"] for p in w["policies"]]
    assert names == ["densegate", "gate-off", "sglang-delayer"]
    for p in w["policies"]:
        assert p["finished"] == p["submitted"] == 8
        assert p["rounds"] == 2 and len(p["ratio_to_gate_off_by_round"]) == 2
        assert p["tokens_per_s"] > 0 and p["ttft_ms_p99"] >= p["ttft_ms_p50"] > 0
    off = next(p for p in w["policies"] if p["name"] == "gate-off")
    assert off["ratio_to_gate_off"] == 1.0
    assert set(w["goal"]) == {"tokens_per_s", "itl_ms_p99", "ttft_ms_p99"}


def test_a_peer_phase_runs_over_the_wrapped_collective() -> None:
    """A peer phase needs the bench's slots in the rank's collective (its hook refuses any
    other), so a run that finishes shows the wrap reached the rank processes."""
    trace = dp_trace(WORKLOADS["steady"], 0, 2, 3)
    runs = run_measured_policies(trace, bench_config(runner="torch"), 2, ["vllm-cadence"], 1)
    (row,) = measured_rows(runs)
    assert row["name"] == "vllm-cadence" and row["finished"] == len(trace) == 6


@pytest.mark.parametrize(
    ("extra", "flag"), [(["--cost", "roofline:H200"], "--cost"), (["--load", "0.5"], "--load")]
)
def test_modeled_only_flags_are_refused(
    extra: list[str], flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_main([*_BASE, "--policies", "densegate", *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and flag in err[0] and "measures" in err[0]


def test_unknown_policy_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main([*_BASE, "--policies", "densegate,nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'nope'" in err[0]


def test_a_failed_rank_is_one_line_and_exit_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import densegate.lab.bench.dp_measured as measured

    def failed(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a measured DP rank failed: exit codes [0, 1]")

    monkeypatch.setattr(measured, "run_measured_policies", failed)
    assert cli_main([*_BASE, "--policies", "densegate", "--requests", "2"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["densegate bench: steady: a measured DP rank failed: exit codes [0, 1]"]
