"""Real gloo ranks as processes: agreement, greedy tokens, a rank killed mid-run, env://.

Each launch pays process start-up (spawn + import torch, a few seconds on two
cores), so the workloads are tiny and every test launches once.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch.distributed as dist

from densegate.cli.main import main as cli_main
from densegate.impl.dp.config import DPConfig
from densegate.impl.dp.launch import launch
from densegate.impl.dp.readmission import StreamView
from densegate.impl.engine import Engine, EngineConfig
from densegate.impl.traces.replay import run_trace
from densegate.impl.traces.workload import synthetic_trace
from densegate.lab.dp.inject import CRASH_EXIT_CODE, Fault, FaultHooks
from densegate.lab.dp.phases import bench_phases
from tests.support.dp_small import ENGINE, small_trace

pytestmark = pytest.mark.skipif(
    not (dist.is_available() and dist.is_gloo_available()), reason="needs torch.distributed gloo"
)

SMALL = [
    "--max-num-seqs",
    "8",
    "--max-num-batched-tokens",
    "256",
    "--num-blocks",
    "160",
    "--max-model-len",
    "512",
    "--max-hold-passes",
    "6",
]


def test_densegate_run_dp_2_logs_the_same_decisions_on_both_ranks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DENSEGATE_DP_OUT", str(tmp_path))
    argv = ["run", "--dp", "2", "--gen", "12", "--rate", "1.5", "--runner", "null", "--json"]
    assert cli_main(argv + SMALL) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["finished"] == 12 and summary["unaccounted"] == []
    assert summary["decisions_agree"] and summary["alignment_agree"]
    assert set(summary["alignment"]) == {
        "coordinated",
        "uncoordinated_gate_off",
        "uncoordinated_local_gate",
    }
    logs = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert logs[0][0]["decisions"] == logs[1][0]["decisions"]
    assert len(logs[0][0]["decisions"]) == summary["ticks"] > 0


def test_four_gloo_ranks_log_the_same_decisions() -> None:
    trace = small_trace(24, seed=4)
    result = launch(trace, DPConfig(ENGINE, router="least-loaded"), 4)
    assert result.exitcodes == [0, 0, 0, 0]
    reps = result.phase("coordinated")
    assert sorted(reps) == [0, 1, 2, 3]
    assert all(rep.decisions == reps[0].decisions for rep in reps.values())
    assert all(rep.alignment == reps[0].alignment for rep in reps.values())
    done = sorted((rid for rep in reps.values() for rid in rep.finished), key=int)
    assert done == [str(i) for i in range(24)]
    assert all(rep.assigned for rep in reps.values())  # least-loaded spread the work


def test_greedy_tokens_match_a_single_rank_run() -> None:
    """float64 on the CPU: batching changes sums by ~1e-15, so greedy tokens are exact."""
    engine = EngineConfig(
        max_num_seqs=6,
        max_num_batched_tokens=96,
        block_size=8,
        num_blocks=96,
        max_model_len=96,
        max_hold_passes=4,
        runner="torch",
        dtype="float64",
    )
    trace = synthetic_trace(8, 2, rate=1.0, prompt_median=20, output_median=8, max_model_len=96)
    result = launch(trace, DPConfig(engine, keep_outputs=True), 2)
    assert result.exitcodes == [0, 0]
    outputs: dict[str, list[int]] = {}
    for rep in result.phase("coordinated").values():
        assert rep.outputs is not None
        outputs.update(rep.outputs)
    single = Engine(engine)
    run_trace(single, trace, seed=0)
    expected = {str(i): single.request(str(i)).output_token_ids for i in range(len(trace))}
    assert outputs == expected
    assert len({t for toks in outputs.values() for t in toks}) > 3  # not a constant stream


def test_a_killed_rank_s_requests_finish_on_the_survivors() -> None:
    n, timeout = 30, 5.0
    trace = small_trace(n, seed=9, rate=1.0)
    config = DPConfig(ENGINE, timeout_s=timeout)
    result = launch(trace, config, 3, hooks=FaultHooks((Fault(1, 6),)))
    assert result.exitcodes == [0, CRASH_EXIT_CODE, 0]
    reps = result.phase("coordinated")
    assert sorted(reps) == [0, 2]
    assert reps[0].decisions == reps[2].decisions
    for rep in reps.values():
        f = rep.faults[0]
        assert f["tick"] == 6 and f["dead_ranks"] == [1]
        # noticed from the dead mark or the closed socket, not by waiting out the timeout
        assert "did not complete within" not in f["error"], f
        assert rep.unfinished == [] and rep.kv_blocks == [ENGINE.num_blocks] * 2
    moved = reps[0].readmitted
    assert moved and all(src == 1 for src, _ in moved.values())
    summary = result.summary()
    assert summary["finished"] == n and summary["lost"] == 0
    assert summary["unaccounted"] == [] and summary["duplicated"] == []
    assert summary["readmitted"] == len(moved) and not summary["healthy"]
    # what the caller was streamed: every output position of every request exactly once
    view = StreamView()
    for r in (1, 0, 2):
        view.add(r, result.streams["coordinated"][r])
    assert {rid: len(t) for rid, t in view.tokens.items()} == {
        str(i): req.output_len for i, req in enumerate(sorted(trace, key=lambda q: q.arrival_pass))
    }


def test_a_rank_killed_in_a_baseline_phase_loses_nothing_of_any_phase() -> None:
    """Issue 26's reproducer, as the CLI runs it (baselines on): rank 1 dies at tick 5 of
    the gate-off baseline. It reported the coordinated phase as that phase ended; the
    survivors take over its gate-off requests from that phase's stream alone."""
    n = 30
    trace = small_trace(n, seed=9, rate=1.0)
    config = DPConfig(ENGINE, timeout_s=5.0, phases=bench_phases(ENGINE))
    result = launch(trace, config, 3, hooks=FaultHooks((Fault(1, 5, phase=1),)))
    assert result.exitcodes == [0, CRASH_EXIT_CODE, 0]
    assert [len(result.reports[r]) for r in range(3)] == [2, 1, 2]
    s = result.summary()
    assert s["unaccounted"] == [] and s["duplicated"] == [] and s["lost"] == 0
    assert [a["finished"] for a in s["accounting"].values()] == [n, n]
    f = s["failure"]
    assert f["phase"] == "uncoordinated_gate_off" and f["dead_ranks"] == [1]
    assert f["readmitted"] == f["readmitted_finished"] > 0
    view = StreamView()  # the caller's view of the gate-off phase
    for r in (1, 0, 2):
        view.add(r, result.streams["uncoordinated_gate_off"][r])
    ordered = sorted(trace, key=lambda q: q.arrival_pass)
    assert {rid: len(t) for rid, t in view.tokens.items()} == {
        str(i): req.output_len for i, req in enumerate(ordered)
    }


def test_a_hang_before_a_later_phase_s_first_collective_takes_the_timeout() -> None:
    """Not the startup timeout (300 s here): the first collective of phase 1 counts the
    timeout from when every rank had built that phase's engine."""
    n, timeout = 12, 1.5
    trace = small_trace(n, seed=2, rate=1.0)
    config = DPConfig(ENGINE, timeout_s=timeout, phases=bench_phases(ENGINE))
    result = launch(trace, config, 2, hooks=FaultHooks((Fault(0, 0, "hang", phase=1),)))
    assert result.exitcodes[0] != 0 and result.exitcodes[1] == 0
    f = result.reports[1][1].faults[0]
    assert f["dead_ranks"] == [0] and f["tick"] == 0
    assert f"within {timeout}s after every rank had built phase 1's engine" in f["error"], f
    s = result.summary()
    assert s["unaccounted"] == [] and s["duplicated"] == [] and s["lost"] == 0
    assert s["failure"]["phase"] == "uncoordinated_gate_off"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_the_env_rendezvous_entry_point_runs_without_the_launcher(tmp_path: Path) -> None:
    """What torchrun does, by hand: two processes, RANK / WORLD_SIZE / MASTER_* set."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHELASTIC")}
    env.update(WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    argv = [sys.executable, "-m", "densegate.cli.dp", "--gen", "8", "--rate", "1.5"]
    argv += ["--runner", "null", "--json", "--no-baselines", "--dp-out", str(tmp_path), *SMALL]
    procs = [
        subprocess.Popen(
            argv,
            env={**env, "RANK": str(r), "LOCAL_RANK": str(r)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    summary = json.loads(outs[0][0])
    assert outs[1][0] == ""  # only rank 0 prints the merged summary
    assert summary["finished"] == 8 and summary["decisions_agree"]
    assert summary["healthy"] and summary["unaccounted"] == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank0.json", "rank1.json"]


def test_a_hung_rank_times_out_and_the_launcher_kills_it() -> None:
    n, timeout = 16, 1.5
    trace = small_trace(n, seed=2, rate=1.0)
    config = DPConfig(ENGINE, timeout_s=timeout)
    result = launch(trace, config, 2, hooks=FaultHooks((Fault(0, 5, "hang"),)))
    assert result.exitcodes[0] != 0 and result.exitcodes[1] == 0  # rank 0 killed, 1 finished
    (rep,) = result.reports[1]
    f = rep.faults[0]
    assert f["dead_ranks"] == [0]
    assert f"did not complete within {timeout}s" in f["error"], f  # noticed by the timeout
    assert rep.unfinished == []
    summary = result.summary()
    assert summary["finished"] == n and summary["unaccounted"] == []
    assert summary["lost"] == 0 and summary["duplicated"] == []


def test_under_torchrun_a_dead_worker_stops_the_group_and_a_restart_reruns_it() -> None:
    """torchrun's agent SIGTERMs every worker when one fails, so survivors cannot carry on
    there; with --max-restarts the whole group runs again from the start (the injected
    fault is one-time, so attempt 1 is clean) and finishes every request."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHELASTIC", "MASTER"))}
    env["DENSEGATE_DP_CRASH"] = "1:5"
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node"]
    argv += ["3", "--max-restarts", "1", "-m", "densegate.cli.dp", "--gen", "12", "--rate"]
    argv += ["1.5", "--runner", "null", "--json", "--no-baselines", *SMALL]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"exitcode: {CRASH_EXIT_CODE}" in proc.stderr  # attempt 0: rank 1 died ...
    assert "SIGTERM" in proc.stderr  # ... and the agent stopped the others
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["finished"] == 12 and summary["healthy"] and summary["failure"] is None
