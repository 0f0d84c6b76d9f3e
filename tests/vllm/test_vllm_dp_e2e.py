"""vLLM's own DP engine cores end to end on CPU: ``benchmarks/vllm_dp_e2e.py`` on a small load.

Real ``AsyncLLM`` deployments with ``data_parallel_size=2`` on a tiny Mixtral: two
``DPEngineCoreProc`` processes with their workers, vLLM's DP coordinator and wave logic, the
MoE dispatch over the DP group (``all_gatherv`` from the test-only plugin
``tests/support/vllm_cpu_dp.py``). Arms: plain, vLLM's cadence 4, and densegate's DP gate
holding (``pace_tokens: null``: the default on CPU, the paced release, never holds, so this
arm is the one whose decisions reach vLLM's throttle). About 3 minutes on 2 cores, nearly
all of it starting engines. vLLM's CPU build only (``.ci/run`` leaves it out of 0.33's group).
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
PROMPTS = 24


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), str(ROOT)) if p)
    cmd = [sys.executable, str(ROOT / "benchmarks" / "vllm_dp_e2e.py"), "--json"]
    args = ["--arms", "plain,cadence-4,densegate-hold", "--rounds", "1"]
    proc = subprocess.run(
        [*cmd, *args, "--prompts", str(PROMPTS)],
        capture_output=True, text=True, env=env, timeout=1200,
    )  # fmt: skip
    assert proc.stdout.strip(), proc.stderr[-8000:]
    result: dict[str, Any] = json.loads(proc.stdout)
    result["returncode"] = proc.returncode
    return result


def _arm(report: dict[str, Any], name: str) -> dict[str, Any]:
    arm: dict[str, Any] = next(a for a in report["arms"] if a["name"] == name)
    return arm


def test_greedy_tokens_are_identical_in_every_arm(report: dict[str, Any]) -> None:
    assert report["sequences"] == PROMPTS
    assert report["identical_sequences"] == dict.fromkeys(
        ("plain", "cadence-4", "densegate-hold"), PROMPTS
    )
    assert report["ok"] and report["returncode"] == 0


def test_both_engine_cores_step_together_through_vllms_waves(report: dict[str, Any]) -> None:
    for arm in report["arms"]:
        per_rank = arm["steps_per_rank"]
        assert len(per_rank) == 2 and per_rank[0] == per_rank[1] == arm["steps"] > 0
        assert arm["waves"] >= 1  # vLLM's coordinator started and ended each burst's wave
        assert 0 <= arm["mixed_steps"] <= arm["steps"]


def test_the_gate_decided_every_step_alike_on_both_cores(report: dict[str, Any]) -> None:
    gated = _arm(report, "densegate-hold")
    assert gated["decisions_per_rank"] == gated["steps_per_rank"]
    assert gated["decisions_identical"]
    assert sum(gated["decisions_by_reason"].values()) == gated["steps"]
    assert gated["decisions_by_reason"].get("HOLD", 0) > 0
    assert gated["held_steps_with_prefill"] == 0
    for name in ("plain", "cadence-4"):  # the plugin is off there
        assert _arm(report, name)["decisions_per_rank"] == [0, 0]
