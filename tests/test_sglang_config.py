"""The SGLang plugin's pure parts, in the main suite: no SGLang is imported here.

The version range, the settings variable and the gate config built from SGLang's
flags, and the mapping of densegate's reasons onto SGLang's outcome labels. The
plugin itself is tested on SGLang's real code in ``tests/sglang`` (its own venv).
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from densegate.impl.gate import Reason
from densegate.integrations.sglang.config import (
    ENV_VAR,
    PluginSettings,
    UnsupportedSglangVersion,
    check_sglang_version,
    default_dense_tokens,
    gate_config,
    settings_from_env,
    sglang_reason,
)


def _env(**raw: object) -> dict[str, str]:
    return {ENV_VAR: json.dumps(raw)}


@pytest.mark.parametrize("version", ["0.5.23", "0.5.23.post1", "0.5.23+cpu", "0.5.23rc1"])
def test_supported_versions_pass(version: str) -> None:
    check_sglang_version(version)


@pytest.mark.parametrize("version", ["0.5.22", "0.5.24", "0.6.0", "0.5", "nightly"])
def test_other_versions_are_refused_naming_both(version: str) -> None:
    with pytest.raises(UnsupportedSglangVersion, match=rf"sglang>=0\.5\.23,<0\.5\.24.*{version}"):
        check_sglang_version(version)


def test_no_variable_means_the_defaults() -> None:
    assert settings_from_env({}) == PluginSettings()
    assert settings_from_env({ENV_VAR: "  "}) == PluginSettings()


def test_the_variable_sets_every_key() -> None:
    got = settings_from_env(
        _env(
            dense_tokens=512,
            target_fill=0.75,
            stall_ticks=4,
            kv_pressure_valve=True,
            kv_high_watermark=0.8,
            align_ticks=2,
        )
    )
    assert got == PluginSettings(512, 0.75, 4, True, 0.8, 2)


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        ("not json", "JSON object"),
        ("[1, 2]", "JSON object"),
        (json.dumps({"dense": 5}), "unknown keys \\['dense'\\]"),
        (json.dumps({"dense_tokens": 0}), "'dense_tokens'.*0"),
        (json.dumps({"dense_tokens": True}), "'dense_tokens'.*True"),
        (json.dumps({"target_fill": 1.5}), "'target_fill'.*1.5"),
        (json.dumps({"target_fill": 0}), "'target_fill'.*0"),
        (json.dumps({"stall_ticks": -1}), "'stall_ticks'.*-1"),
        (json.dumps({"kv_pressure_valve": 1}), "'kv_pressure_valve'.*1"),
        (json.dumps({"kv_high_watermark": "high"}), "'kv_high_watermark'.*high"),
        (json.dumps({"align_ticks": -1}), "'align_ticks'.*-1"),
        (json.dumps({"align_ticks": 1.5}), "'align_ticks'.*1.5"),
    ],
)
def test_a_bad_value_is_named(raw: str, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        settings_from_env({ENV_VAR: raw})


def test_dense_tokens_default_to_one_passes_room() -> None:
    assert default_dense_tokens(16384, 8192) == 8192
    assert default_dense_tokens(4096, 8192) == 4096
    assert default_dense_tokens(4096, None) == 4096  # chunked prefill off
    assert default_dense_tokens(4096, -1) == 4096


def test_k_is_sglangs_max_delay_passes() -> None:
    cfg = gate_config(
        PluginSettings(stall_ticks=3),
        max_delay_passes=12,
        max_prefill_tokens=16384,
        chunked_prefill_size=2048,
    )
    assert (cfg.dense_tokens, cfg.max_hold_passes, cfg.stall_ticks) == (2048, 12, 3)
    assert (cfg.target_fill, cfg.kv_pressure_valve, cfg.enabled) == (1.0, False, True)
    assert cfg.align_ticks is None
    aligned = gate_config(PluginSettings(align_ticks=0), max_delay_passes=12,
                          max_prefill_tokens=16384, chunked_prefill_size=2048)  # fmt: skip
    assert aligned.align_ticks == 0


@pytest.mark.parametrize("k", [0, -3, 2.5, True, None])
def test_a_bad_k_names_sglangs_flag(k: object) -> None:
    with pytest.raises(ValueError, match=rf"--prefill-delayer-max-delay-passes.*{k}"):
        gate_config(
            PluginSettings(), max_delay_passes=k, max_prefill_tokens=8, chunked_prefill_size=8
        )


def test_dense_tokens_past_the_passes_room_are_refused() -> None:
    with pytest.raises(ValueError, match=r"'dense_tokens'.*room 2048.*4096"):
        gate_config(
            PluginSettings(dense_tokens=4096),
            max_delay_passes=30,
            max_prefill_tokens=16384,
            chunked_prefill_size=2048,
        )


def test_bad_budgets_name_their_flag() -> None:
    with pytest.raises(ValueError, match=r"--max-prefill-tokens.*0"):
        default_dense_tokens(0, 8)
    with pytest.raises(ValueError, match=r"--chunked-prefill-size.*'8'"):
        default_dense_tokens(8, "8")  # type: ignore[arg-type]


def test_reasons_map_onto_sglangs_labels() -> None:
    assert sglang_reason(Reason.HOLD, waited=True) == "delay"
    assert sglang_reason(Reason.BUDGET, waited=True) == "wait_timeout"
    assert sglang_reason(Reason.EMPTY, waited=False) == ""
    for r in (Reason.DENSE, Reason.NO_DECODE, Reason.STALL, Reason.KV_PRESSURE, Reason.DISABLED):
        assert sglang_reason(r, waited=True) == "wait_success"
        assert sglang_reason(r, waited=False) == "no_wait"


def test_the_package_imports_no_sglang(monkeypatch: pytest.MonkeyPatch) -> None:
    """The config and the package's front door load without SGLang; only its names need it."""
    for name in [m for m in sys.modules if m.startswith("densegate.integrations.sglang")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "sglang", None)  # any import of it now fails
    pkg = importlib.import_module("densegate.integrations.sglang")
    assert pkg.settings_from_env({}) == pkg.PluginSettings()
    with pytest.raises(ImportError):
        _ = pkg.DenseGatePrefillDelayer


def _script(monkeypatch: pytest.MonkeyPatch) -> Any:
    """``benchmarks/sglang_side_by_side.py`` as a module (its parsing needs no SGLang)."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "benchmarks"))
    return importlib.import_module("sglang_side_by_side")


class _Ran(Exception):
    """Raised by the stand-in for a scenario's run: the settings got that far."""


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ('{"pace_tokens": 5}', "got 5"),
        ("nope", "'nope'"),
        ('{"align_ticks": -1}', "got -1"),
        ('{"bogus": 1}', "['bogus']"),
    ],
)
def test_the_side_by_sides_settings_are_checked_before_any_run(
    value: str, named: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``benchmarks/sglang_side_by_side.py --settings`` reads them as the plugin does, and a
    bad value is one line naming it, exit 2, before any scenario runs."""
    sbs = _script(monkeypatch)

    def no_run(*_: object) -> None:
        raise _Ran

    monkeypatch.setattr(sbs, "run", no_run)
    assert sbs.main(["--settings", value, "--scenarios", "lopsided"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("--settings: ") and named in err[0], err


def test_good_side_by_side_settings_reach_the_densegate_arm(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The twin: a good value passes the check and is what the arms run with."""
    sbs = _script(monkeypatch)
    seen: list[object] = []

    def record(*args: object) -> None:
        seen.append(args[-1])
        raise _Ran  # one scenario's first arm is enough

    monkeypatch.setattr(sbs, "run", record)
    with pytest.raises(_Ran):
        sbs.main(["--settings", '{"pace_tokens": null, "align_ticks": 0}', "--scenarios", "chat"])
    assert seen == [PluginSettings(pace_tokens=None, align_ticks=0)]
