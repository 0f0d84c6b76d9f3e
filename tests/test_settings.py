"""Each gate setting declared once (``densegate.impl.settings``), and every reader derived.

Parametrized over the declaration itself, so a setting added there is tested here
without a new row: the config dataclasses spell the declared fields with the declared
defaults; a value out of a setting's range is a ``ValueError`` naming the field from
``AlignedGateConfig``, one line and exit 2 from the command line, and a ``ValueError``
naming the key and the variable from the vLLM and SGLang parsers (no engine imported).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

import densegate.cli.dp as cli_dp
from densegate.cli.main import main as cli_main
from densegate.impl.dp.config import DPConfig
from densegate.impl.dp_gate import AlignedGateConfig
from densegate.impl.settings import (
    APPLIES_CAP,
    DP,
    REQUIRED,
    SETTINGS,
    SGLANG,
    VLLM,
    VLLM_DP,
    Setting,
    carried,
    flagged,
    keys,
    read,
    setting,
    table,
)
from densegate.integrations.sglang import config as sglang_config
from densegate.integrations.sglang.config import (
    ENV_VAR,
    PluginSettings,
    busy_of_slots,
    gate_config,
    settings_from_env,
)
from densegate.integrations.vllm.config import gate_config_from
from densegate.integrations.vllm.dp_config import DP_ONLY_KEYS, aligned_config_from

LIMITS = {"max_num_batched_tokens": 256, "max_num_seqs": 16}
DP_KW = {**LIMITS, "prefill_schedule_interval": 1}


def _bad(s: Setting) -> list[object]:
    """Values out of ``s``'s declared range (each kind's, from the declaration)."""
    if s.kind == "int":
        assert s.low is not None
        return [s.low - 1, True, 1.5, "3"]
    if s.kind == "bool":
        return [1, "yes"]
    return [0, 1.5, True, "1", float("nan")]


def _good(s: Setting) -> object:
    """A value in ``s``'s range that is not its default."""
    if s.kind == "int":
        assert s.low is not None
        return s.low + 2
    return (not s.default) if s.kind == "bool" else 0.5


def _beside(s: Setting) -> dict[str, object]:
    """What ``s`` needs set beside it (its ``at_least`` setting, at its lowest), by field."""
    return {s.at_least: setting(s.at_least).low} if s.at_least else {}


def _flags(s: Setting, value: object) -> list[str]:
    """``s``'s flag at ``value``, after the flags of what it needs beside it."""
    out = [f for k, v in _beside(s).items() for f in (setting(k).flag, str(v))]
    return [*out, s.flag, str(value)]


def _ids(settings: tuple[Setting, ...]) -> list[str]:
    return [s.name for s in settings]


BAD = [(s, v) for s in SETTINGS for v in _bad(s)]
BAD_IDS = [f"{s.name}={v!r}" for s, v in BAD]


# -- the dataclasses spell what is declared --------------------------------------------------


def test_aligned_gate_config_has_the_declared_fields_and_defaults() -> None:
    fields = dataclasses.fields(AlignedGateConfig)
    assert [f.name for f in fields] == [s.name for s in SETTINGS]
    for f, s in zip(fields, SETTINGS, strict=True):
        want = dataclasses.MISSING if s.default is REQUIRED else s.default
        assert f.default == want, s.name


OWN_DEFAULTS = {(SGLANG, "pace_tokens"): sglang_config.ROOM,
                (SGLANG, "busy_decodes"): sglang_config.BUSY}  # fmt: skip
"""A carrier's own default, where it differs: SGLang paces at one pass's room, and waits
while busy at three quarters of the group's running slots."""


@pytest.mark.parametrize(("cls", "carrier"), [(DPConfig, DP), (PluginSettings, SGLANG)])
def test_every_carrier_dataclass_has_the_declared_defaults(cls: type, carrier: str) -> None:
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for s in carried(carrier):
        assert s.name in fields, f"{cls.__name__} lacks {s.name}"
        if s.default is not REQUIRED:
            want = OWN_DEFAULTS.get((carrier, s.name), s.default)
            assert fields[s.name].default == want, s.name


def test_the_carriers_keys() -> None:
    assert keys(VLLM) == ("dense_tokens", "max_hold_passes", "enabled", "stall_passes",
                          "pace_tokens")  # fmt: skip
    assert set(keys(VLLM)) < set(keys(VLLM_DP))
    assert tuple(k for k in keys(VLLM_DP) if k not in keys(VLLM)) == DP_ONLY_KEYS
    assert {s.name for s in flagged()} <= {s.name for s in carried(DP)}
    with pytest.raises(ValueError, match="carrier must be one of"):
        carried("trtllm")
    with pytest.raises(KeyError, match="no gate setting 'align'"):
        setting("align")


# -- AlignedGateConfig ---------------------------------------------------------------------


@pytest.mark.parametrize(("s", "bad"), BAD, ids=BAD_IDS)
def test_the_config_refuses_a_value_out_of_range_naming_the_field(s: Setting, bad: object) -> None:
    with pytest.raises(ValueError, match=rf"^AlignedGateConfig\.{s.name} must be "):
        AlignedGateConfig(**{"dense_tokens": 8, **_beside(s), s.name: bad})


@pytest.mark.parametrize("s", SETTINGS, ids=_ids(SETTINGS))
def test_the_config_takes_a_value_in_range_and_none_only_where_declared(s: Setting) -> None:
    got = AlignedGateConfig(**{"dense_tokens": 8, **_beside(s), s.name: _good(s)})
    assert getattr(got, s.name) == _good(s)
    if s.optional:
        assert getattr(AlignedGateConfig(8, **{s.name: None}), s.name) is None
    else:
        with pytest.raises(ValueError, match=rf"AlignedGateConfig\.{s.name}"):
            AlignedGateConfig(**{"dense_tokens": 8, s.name: None})


# -- the command line ----------------------------------------------------------------------

RUN = ["run", "--dp", "2", "--requests", "6", "--runner", "null", "--quiet"]
FLAGGED = flagged()


@pytest.mark.parametrize("s", FLAGGED, ids=_ids(FLAGGED))
def test_a_flag_out_of_range_is_one_line_exit_2(
    s: Setting, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli_dp, "launch", lambda *a, **k: pytest.fail("launched"))
    assert s.low is not None
    assert cli_main([*RUN, *_flags(s, s.low - 1)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert f"argument {s.flag}: the value must be >= {s.low}, got {s.low - 1}" in err
    assert cli_main(["run", *RUN[3:], s.flag, str(s.low)]) == 2  # no --dp
    assert f"{s.flag} is for a data-parallel run" in capsys.readouterr().err
    tune = ["tune", "--cost", "roofline:H100-SXM", "--dp", "2", s.flag, str(s.low - 1)]
    assert cli_main(tune) == 2
    err = capsys.readouterr().err
    assert (
        err.count("\n") == 1 and f"{s.flag}: each value must be 'off' or an int >= {s.low}" in err
    )


@pytest.mark.parametrize("s", FLAGGED, ids=_ids(FLAGGED))
def test_a_flag_in_range_reaches_the_dp_config_and_the_gate(
    s: Setting, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[DPConfig] = []

    def record(trace: Any, config: DPConfig, world: int, **kwargs: Any) -> Any:
        seen.append(config)
        raise SystemExit(0)

    monkeypatch.setattr(cli_dp, "launch", record)
    with pytest.raises(SystemExit):
        cli_main([*RUN, *_flags(s, s.low)])
    (config,) = seen
    assert getattr(config, s.name) == s.low
    assert getattr(config.gate_config(config.engine), s.name) == s.low
    others = [o for o in FLAGGED if o is not s and o.name not in _beside(s)]
    assert all(getattr(config, o.name) is None for o in others)  # absent: off
    torchrun = cli_dp.build_parser().parse_args(_flags(s, s.low))  # the torchrun entry
    assert getattr(cli_dp._dp_config(torchrun, "null"), s.name) == s.low


def test_the_flags_help_is_the_declaration() -> None:
    helps = {a.dest: str(a.help) for a in cli_dp.build_parser()._actions}
    for s in FLAGGED:
        assert s.help in helps[s.name] and s.requirement(spelled="absent") in helps[s.name]


# -- the integrations' parsers ---------------------------------------------------------------


def _vllm_where(key: str) -> str:
    return rf"additional_config\['densegate'\]\['{key}'\] must be "


VLLM_DP_BAD = [(s, v) for s in carried(VLLM_DP) for v in _bad(s)]
SGLANG_BAD = [(s, v) for s in carried(SGLANG) for v in _bad(s)]


@pytest.mark.parametrize(("s", "bad"), VLLM_DP_BAD, ids=[f"{s.name}={v!r}" for s, v in VLLM_DP_BAD])
def test_vllm_refuses_a_value_out_of_range_naming_the_key(s: Setting, bad: object) -> None:
    key = s.key(VLLM_DP)
    with pytest.raises(ValueError, match=_vllm_where(str(key))):
        aligned_config_from({"densegate": {key: bad, **_beside(s)}}, **DP_KW)
    if s.key(VLLM) is not None:
        with pytest.raises(ValueError, match=_vllm_where(str(key))):
            gate_config_from({"densegate": {key: bad, **_beside(s)}}, **LIMITS)


@pytest.mark.parametrize(("s", "bad"), SGLANG_BAD, ids=[f"{s.name}={v!r}" for s, v in SGLANG_BAD])
def test_sglang_refuses_a_value_out_of_range_naming_the_key(s: Setting, bad: object) -> None:
    key = str(s.key(SGLANG))
    with pytest.raises(ValueError, match=rf"^{ENV_VAR}\['{key}'\] must be .*, got {bad!r}"):
        settings_from_env({ENV_VAR: json.dumps({key: bad})})


@pytest.mark.parametrize("key", DP_ONLY_KEYS)
def test_one_vllm_engine_refuses_the_dp_only_keys(key: str) -> None:
    with pytest.raises(ValueError, match=rf"unknown keys \['{key}'\]"):
        gate_config_from({"densegate": {key: 1}}, **LIMITS)


CAPS = tuple(s for s in SETTINGS if s.caps)
ROOM = {"max_delay_passes": 30, "max_prefill_tokens": 4096, "chunked_prefill_size": 2048}
"""SGLang flags whose pass room is 2048."""


@pytest.mark.parametrize("s", CAPS, ids=_ids(CAPS))
def test_vllm_applies_every_cap_setting(s: Setting) -> None:
    assert VLLM in APPLIES_CAP and VLLM_DP in APPLIES_CAP
    key = str(s.key(VLLM_DP))
    assert aligned_config_from({"densegate": {key: None}}, **DP_KW) == AlignedGateConfig(240)
    got = aligned_config_from({"densegate": {key: _good(s), **_beside(s)}}, **DP_KW)
    assert getattr(got, s.name) == _good(s)


def test_sglang_takes_a_cap_only_at_or_above_one_passes_room() -> None:
    """SGLang's PrefillAdder sizes a pass before the delayer is asked, so a cap below the
    pass's room would not be applied: the config refuses it, naming the room. Absent, the
    cap is the room (the paced release); null is the hold mode; the surge is not read."""
    assert SGLANG not in APPLIES_CAP
    assert [s.name for s in carried(SGLANG) if s.caps] == ["pace_tokens"]
    assert "surge_tokens" not in keys(SGLANG)

    def cfg(raw: dict[str, object]) -> AlignedGateConfig:
        return gate_config(settings_from_env({ENV_VAR: json.dumps(raw)}), **ROOM)

    assert cfg({}).pace_tokens == 2048 == cfg({"pace_tokens": 2048}).pace_tokens
    assert cfg({"pace_tokens": 5000}).pace_tokens == 5000  # above the room: the room binds
    assert cfg({"pace_tokens": None}).pace_tokens is None
    with pytest.raises(ValueError, match=rf"{ENV_VAR}\['pace_tokens'\] must be null .* room "
                       r"2048 .* would not be applied, got 2047$"):  # fmt: skip
        cfg({"pace_tokens": 2047})


def test_sglang_sizes_the_busy_wait_from_its_running_slots() -> None:
    """Absent, ``busy_decodes`` is ceil(3/4 * ranks * --max-running-requests); with that flag
    left to SGLang (None or 0) it is not sized here (the delayer sizes it at its first pass,
    ``busy_of_slots`` of the ranks' run-time slots: tests/sglang/test_sglang_ranks.py); null
    is off, an int is kept; a bad flag or group size is named."""

    def cfg(raw: dict[str, object], **kw: object) -> AlignedGateConfig:
        return gate_config(settings_from_env({ENV_VAR: json.dumps(raw)}), **ROOM, **kw)  # type: ignore[arg-type]

    assert cfg({}, max_running_requests=128, ranks=2).busy_decodes == 192
    assert cfg({}, max_running_requests=5, ranks=3).busy_decodes == 12  # ceil(11.25)
    assert cfg({}).busy_decodes is None
    assert cfg({}, max_running_requests=0, ranks=4).busy_decodes is None
    assert cfg({"busy_decodes": None}, max_running_requests=128, ranks=2).busy_decodes is None
    assert cfg({"busy_decodes": 7}, max_running_requests=128).busy_decodes == 7
    with pytest.raises(ValueError, match=r"^--max-running-requests must be an int >= 1, got -1$"):
        cfg({}, max_running_requests=-1)
    with pytest.raises(ValueError, match=r"ranks must be an int >= 1, got 0$"):
        cfg({}, max_running_requests=8, ranks=0)
    with pytest.raises(ValueError, match=rf"{ENV_VAR}\['busy_decodes'\] must be an int >= 1"):
        settings_from_env({ENV_VAR: '{"busy_decodes": 0}'})
    assert [busy_of_slots(n) for n in (0, 1, 4, 15, 256)] == [None, 1, 3, 12, 192]


VLLM_DP_OK = tuple(s for s in carried(VLLM_DP) if not s.caps)
SGLANG_OK = carried(SGLANG)


@pytest.mark.parametrize("s", VLLM_DP_OK, ids=_ids(VLLM_DP_OK))
def test_every_vllm_dp_key_in_range_reaches_the_aligned_config(s: Setting) -> None:
    cfg = aligned_config_from({"densegate": {s.key(VLLM_DP): _good(s)}}, **DP_KW)
    assert getattr(cfg, s.name) == _good(s)


@pytest.mark.parametrize("s", SGLANG_OK, ids=_ids(SGLANG_OK))
def test_every_sglang_key_in_range_reaches_the_settings(s: Setting) -> None:
    got = settings_from_env({ENV_VAR: json.dumps({s.key(SGLANG): _good(s)})})
    assert getattr(got, s.name) == _good(s)


def test_read_takes_defaults_and_nulls_and_names_the_key() -> None:
    def where(k: str) -> str:
        return f"X[{k}]"

    got = read(SGLANG, {}, where, defaults={"dense_tokens": None}, nulls={"dense_tokens": "room"})
    assert got["dense_tokens"] is None and got["stall_ticks"] == 0
    with pytest.raises(ValueError, match=r"^X\[dense_tokens\] must be an int >= 1 or null \(room"):
        read(SGLANG, {"dense_tokens": 0}, where, nulls={"dense_tokens": "room"})
    with pytest.raises(ValueError, match=r"^X\[dense_tokens\] must be an int >= 1, got None"):
        read(SGLANG, {"dense_tokens": None}, where)


PAIRED = tuple(s for s in SETTINGS if s.at_least)


@pytest.mark.parametrize("s", PAIRED, ids=_ids(PAIRED))
def test_a_setting_below_or_without_the_one_it_needs_is_refused_by_every_reader(
    s: Setting, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``surge_tokens`` needs ``pace_tokens`` on and at least it: a config, each engine's
    keys and the command line refuse it alone or below, naming both."""
    base = setting(s.at_least)
    assert base.low is not None
    for extra, why in (({}, "needs"), ({base.name: base.low + 1}, "must be >=")):
        with pytest.raises(ValueError, match=rf"AlignedGateConfig\.{s.name}.* {why} "):
            AlignedGateConfig(8, **{s.name: base.low, **extra})
        given = {str(base.key(VLLM_DP)): v for v in extra.values()}
        keys_ = {str(s.key(VLLM_DP)): base.low, **given}
        where = _vllm_where(str(s.key(VLLM_DP))).removesuffix(" must be ")
        with pytest.raises(ValueError, match=rf"{where}.* {why} "):
            aligned_config_from({"densegate": keys_}, **DP_KW)
        if s.key(VLLM) is not None:
            with pytest.raises(ValueError, match=rf"{where}.* {why} "):
                gate_config_from({"densegate": keys_}, **LIMITS)
    monkeypatch.setattr(cli_dp, "launch", lambda *a, **k: pytest.fail("launched"))
    assert cli_main([*RUN, s.flag, str(base.low)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and s.flag in err and base.flag in err, err


def test_the_docs_table_has_a_row_per_setting() -> None:
    header, rows = table()
    assert [r[0] for r in rows] == [f"`{s.name}`" for s in SETTINGS]
    assert all(len(r) == len(header) for r in rows)
    with pytest.raises(ValueError, match="no arguments"):
        table(["x"])
