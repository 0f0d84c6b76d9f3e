"""The plugin through SGLang's own loading path: ``load_plugins`` finds densegate's entry point,
and SGLang's scheduler then constructs densegate's delayer and runs its passes through it.

Each case is a fresh interpreter (``tests.support.sglang_plugin_probe``): SGLang
patches itself once per process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.sglang.conftest import HAS_SGLANG, SKIP_REASON
from tests.support.sglang_ranks import model_dir

pytestmark = pytest.mark.skipif(not HAS_SGLANG, reason=SKIP_REASON)

ROOT = Path(__file__).resolve().parents[2]
OURS = "densegate.integrations.sglang.delayer.DenseGatePrefillDelayer"
PROBE_TIMEOUT_S = 240


def _probe(tmp_path: Path, **env: str) -> dict[str, Any]:
    full = {**os.environ, **env}
    out = subprocess.run(
        [sys.executable, "-m", "tests.support.sglang_plugin_probe", str(model_dir(tmp_path))],
        cwd=ROOT,
        env=full,
        capture_output=True,
        text=True,
        timeout=PROBE_TIMEOUT_S,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    report: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return report


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _probe(tmp_path_factory.mktemp("model"))


def test_the_installed_entry_point_is_densegates(loaded: dict[str, Any]) -> None:
    assert "densegate=densegate.integrations.sglang.plugin:register" in loaded["entry_points"]


def test_sglang_constructs_the_replacement(loaded: dict[str, Any]) -> None:
    assert loaded["delayer_class"] == OURS
    assert loaded["scheduler_binding"] == OURS  # the name scheduler.py constructs
    assert loaded["constructed"] == OURS  # Scheduler.init_schedule_policy's own call


def test_sglang_flags_reach_the_gate(loaded: dict[str, Any]) -> None:
    # --prefill-delayer-max-delay-passes 7 is K; dense_tokens defaults to the pass's room
    # min(--max-prefill-tokens 4096, --chunked-prefill-size 1024); no DP attention: 1 rank;
    # --max-running-requests left to SGLang: the busy wait sized at the first pass from the
    # scheduler's run-time 16 slots, ceil(3/4 * 16).
    assert loaded["gate"] == [1024, 7, 1, 12]


def test_every_pass_goes_through_the_hook_and_sglangs_executor(loaded: dict[str, Any]) -> None:
    # Four real get_new_batch_prefill calls with an empty queue: SGLang's executor negotiates
    # in finalize (nobody asked), with the hook's observation: nothing waits, 3 decode.
    assert [p[0] for p in loaded["passes"]] == [0, 1, 2, 3]
    for _, fire, reason, reduced in loaded["passes"]:
        assert (fire, reason) == (True, "EMPTY")
        # Nothing filled, no rank idle; then SGLang's local_prefillable and the run-time slots.
        assert reduced == [1, 0, 0, 3, 0, 0, 0, 0, 0, 0, 16]
    assert loaded["batches"] == [True] * 4


def test_without_the_plugin_sglang_keeps_its_own_delayer(tmp_path: Path) -> None:
    """SGLang's whitelist names another plugin: the same probe then builds SGLang's class."""
    report = _probe(tmp_path, SGLANG_PLUGINS="someone-else")
    own = "sglang.srt.managers.prefill_delayer.PrefillDelayer"
    assert report["delayer_class"] == own
    assert report["constructed"] == own
    assert "passes" not in report


def test_an_unsupported_sglang_is_refused_with_the_supported_range() -> None:
    import sglang

    from densegate.integrations.sglang import UnsupportedSglangVersion
    from densegate.integrations.sglang.plugin import register

    real = sglang.__version__
    sglang.__version__ = "0.5.24"
    try:
        with pytest.raises(UnsupportedSglangVersion, match=r"sglang>=0\.5\.23,<0\.5\.24.*0\.5\.24"):
            register()
    finally:
        sglang.__version__ = real
