"""End to end in a real vLLM engine on CPU: a tiny random-weight Llama, plain and gated.

The engine runs in a subprocess (``tests/support/vllm_e2e.py``; vLLM's CPU platform spawns
workers, which need the script's ``__main__`` guard and the import guard on
``PYTHONPATH``). More prompts than ``max_num_seqs`` make prefills wait beside
running decodes, so the gate has something to hold.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from typing import Any

import pytest

from tests.vllm.conftest import HAS_VLLM, SKIP_REASON

pytestmark = pytest.mark.skipif(not HAS_VLLM, reason=SKIP_REASON)

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    model = tmp_path_factory.mktemp("tiny-llama")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), str(ROOT)) if p)
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "support" / "vllm_e2e.py"), str(model)],
        capture_output=True,
        text=True,
        env=env,
        timeout=1200,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("DENSEGATE-E2E ")]
    assert proc.returncode == 0 and lines, proc.stdout[-4000:] + proc.stderr[-8000:]
    result: dict[str, Any] = json.loads(lines[-1].split(" ", 1)[1])
    return result


def test_greedy_tokens_are_identical_with_the_gated_scheduler(runs: dict[str, Any]) -> None:
    plain, gated = runs["plain"], runs["gated"]
    assert plain["scheduler"] == "Scheduler" and gated["scheduler"] == "GatedScheduler"
    assert len(plain["tokens"]) == 12 and all(len(t) == 12 for t in plain["tokens"])
    assert gated["tokens"] == plain["tokens"]


def test_the_gate_held_and_no_hold_step_carried_prefill(runs: dict[str, Any]) -> None:
    gated = runs["gated"]
    counts = gated["counts"]
    assert counts.get("HOLD", 0) > 0, counts
    steps = gated["steps"]
    assert sum(counts.values()) == len(steps) == len(gated["log"])
    holds = [s for s in steps if not s[0]]
    assert len(holds) == counts["HOLD"]
    assert [s for s in holds if s[1]] == []
    assert all(s[2] > 0 for s in holds)  # a HOLD step still decodes
    assert 0 <= gated["hold_passes"] < 4
    # vLLM's own scheduler mixed prefill into decode steps on the same prompts.
    assert any(prefill and decodes for _, prefill, decodes in runs["plain"]["steps"])


def test_the_one_engine_benchmark_runs_and_its_arms_agree() -> None:
    """``benchmarks/vllm_e2e.py --json`` on a small load: both engines, the same greedy tokens."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), str(ROOT)) if p)
    cmd = [sys.executable, str(ROOT / "benchmarks" / "vllm_e2e.py"), "--json"]
    proc = subprocess.run(
        [*cmd, "--prompts", "24", "--rounds", "1"],
        capture_output=True, text=True, env=env, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-8000:]
    report = json.loads(proc.stdout)
    plain, gated = report["arms"]
    assert (plain["scheduler"], gated["scheduler"]) == ("Scheduler", "GatedScheduler")
    assert report["identical_sequences"] == report["sequences"] == 24
    assert plain["held_steps"] == 0 < gated["held_steps"]
    assert gated["held_steps_with_prefill"] == 0
    ratio = gated["wall_s_median"] / plain["wall_s_median"]
    assert report["wall_ratio_gated_over_plain"] == ratio
