"""``pip install densegate`` is the runtime alone: no third-party requirement, and it runs.

The runtime (gate, aligned gate, scheduler, engine on the null runner, the DP
rank runtime's pure parts, the integrations' pure parts) must import and work
with every optional package absent. A subprocess blocks them the way a
missing install does (``import numpy`` raises ``ModuleNotFoundError``), so this
holds on a machine where the test extras are installed.
"""

from __future__ import annotations

import json
import pathlib
import subprocess

import pytest
import tomllib

import densegate.impl
from tests.support.blocked import OPTIONAL, run_blocked

ROOT = pathlib.Path(__file__).resolve().parents[1]
IMPL = pathlib.Path(densegate.impl.__file__).parent


TORCH_MODULES = {
    "densegate.impl.runners.attention",
    "densegate.impl.runners.checkpoint",
    "densegate.impl.runners.cuda_graphs",
    "densegate.impl.runners.forward_inputs",
    "densegate.impl.runners.model",
    "densegate.impl.runners.paged_kv",
    "densegate.impl.runners.rope",
    "densegate.impl.runners.torch_runner",
    "densegate.impl.runners.weights",
}
"""The torch model runner: the only runtime modules that need an extra (``[torch]``)."""

EXTRAS = {"prove", "testing", "cli", "torch", "hf", "text", "bench", "vllm", "sglang", "test"}

_RUNTIME = """
import importlib, json, pathlib, pkgutil
import densegate.impl as impl
from densegate.impl import AlignedGate, AlignedGateConfig, Engine, EngineConfig, PrefillGate
import densegate.integrations.vllm as vllm_pure

failed = {}
for info in pkgutil.walk_packages(impl.__path__, "densegate.impl."):
    try:
        importlib.import_module(info.name)
    except ModuleNotFoundError as e:
        failed[info.name] = e.name
engine = Engine(EngineConfig(max_num_seqs=4, max_num_batched_tokens=64, num_blocks=64))
out = engine.generate([[1, 2, 3], [4, 5, 6, 7]], max_tokens=[3, 5])
vllm_pure.gate_config_from({}, max_num_batched_tokens=64, max_num_seqs=4)
print(json.dumps({"failed": failed, "lengths": [len(o) for o in out]}))
"""


def _run(code: str, blocked: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    return run_blocked(code, blocked, ROOT)


def test_the_runtime_has_no_third_party_requirement() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["dependencies"] == []
    assert set(project["optional-dependencies"]) >= EXTRAS


def test_the_runtime_imports_and_generates_with_every_optional_package_absent() -> None:
    proc = _run(_RUNTIME, OPTIONAL)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.splitlines()[-1])
    assert got["lengths"] == [3, 5]
    # Exactly the torch runner's modules need torch; nothing else needs anything.
    assert got["failed"] == {m: "torch" for m in sorted(TORCH_MODULES)}


@pytest.mark.parametrize("module", ["numpy", "torch", "z3"])
def test_the_blocker_blocks(module: str) -> None:
    """The check above can fail: a blocked package cannot be imported in the subprocess."""
    proc = _run(f"import {module}", (module,))
    assert proc.returncode != 0
    assert "ModuleNotFoundError" in proc.stderr


@pytest.mark.parametrize(
    ("code", "blocked", "extra"),
    [
        ("from densegate.impl import TorchRunner", ("torch",), "torch"),
        ("import densegate.spec", ("z3",), "prove"),
        ("import densegate.proofs", ("z3",), "prove"),
        ("from densegate.integrations.vllm import GatedScheduler", ("vllm",), "vllm"),
        ("from densegate.integrations.sglang import GatePass", ("sglang",), "sglang"),
    ],
)
def test_a_missing_extra_is_named(code: str, blocked: tuple[str, ...], extra: str) -> None:
    proc = _run(code, blocked)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("densegate.impl.extras.MissingExtra: densegate."), last
    assert f"pip install '.[{extra}]' (densegate is not on the package index)" in last
    assert f"({blocked[0]} is not installed)" in last
