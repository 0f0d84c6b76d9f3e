"""The integration's config and version checks: no vLLM needed, so these run everywhere."""

from __future__ import annotations

import pytest

from densegate.impl.gate import GateConfig
from densegate.integrations.vllm.config import (
    UnsupportedVllmVersion,
    check_no_cadence,
    check_vllm_version,
    deployment_case,
    gate_config_from,
    gate_on_by_default,
)


def _cfg(extra: object) -> GateConfig:
    return gate_config_from({"densegate": extra}, max_num_batched_tokens=2048, max_num_seqs=128)


def test_defaults_follow_vllm_budgets_like_our_scheduler() -> None:
    got = gate_config_from(None, max_num_batched_tokens=2048, max_num_seqs=128)
    assert got == GateConfig(2048 - 128, 30, True)
    assert gate_config_from({}, max_num_batched_tokens=8, max_num_seqs=8).dense_tokens == 1


def test_values_are_read() -> None:
    got = _cfg({"dense_tokens": 700, "max_hold_passes": 4, "enabled": False})
    assert got == GateConfig(700, 4, False)
    assert _cfg({}).stall_passes == 0  # the STALL valve stays off unless asked for
    assert _cfg({"stall_passes": 3}) == GateConfig(2048 - 128, 30, True, 3)


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        ({"dense_tokens": 0}, "dense_tokens"),
        ({"dense_tokens": 4096}, "dense_tokens"),
        ({"dense_tokens": "512"}, "dense_tokens"),
        ({"dense_tokens": True}, "dense_tokens"),
        ({"max_hold_passes": 0}, "max_hold_passes"),
        ({"max_hold_passes": 2.5}, "max_hold_passes"),
        ({"enabled": "yes"}, "enabled"),
        ({"stall_passes": -1}, "stall_passes"),
        ({"stall_passes": 1.5}, "stall_passes"),
        ({"stall_passes": "3"}, "stall_passes"),
        ({"stall_passes": True}, "stall_passes"),
    ],
)
def test_a_bad_value_names_its_key(extra: dict[str, object], key: str) -> None:
    with pytest.raises(ValueError, match=rf"additional_config\['densegate'\]\['{key}'\]"):
        _cfg(extra)


def test_unknown_keys_and_a_non_mapping_are_errors() -> None:
    with pytest.raises(ValueError, match=r"unknown keys \['dense'\]"):
        _cfg({"dense": 5})
    with pytest.raises(ValueError, match=r"additional_config\['densegate'\] must be a mapping"):
        _cfg(5)


@pytest.mark.parametrize(
    "version", ["0.32.0", "0.32.3", "0.32.0+cpu", "0.32.1rc1", "0.33.0", "0.33.2rc1"]
)
def test_supported_versions_pass(version: str) -> None:
    check_vllm_version(version)


@pytest.mark.parametrize("version", ["0.31.9", "0.34.0", "1.0.0", "0.3", "dev"])
def test_unsupported_versions_name_the_range(version: str) -> None:
    with pytest.raises(UnsupportedVllmVersion, match=r"vllm>=0\.32\.0,<0\.34") as e:
        check_vllm_version(version)
    assert repr(version) in str(e.value)


def test_the_cadence_beside_an_enabled_gate_is_refused_naming_both_ways_out() -> None:
    gate = _cfg({})
    check_no_cadence(1, gate)  # vLLM's default: no cadence
    check_no_cadence(4, _cfg({"enabled": False}))  # the gate always fires: nothing stacks
    with pytest.raises(ValueError, match=r"prefill_schedule_interval=2") as e:
        check_no_cadence(2, gate)
    assert "--prefill-schedule-interval" in str(e.value) and "'enabled'" in str(e.value)


def test_the_start_up_line_names_the_case() -> None:
    dp = deployment_case(data_parallel_size=4, cuda_graphs=True)
    graphs = deployment_case(data_parallel_size=1, cuda_graphs=True)
    eager = deployment_case(data_parallel_size=1, cuda_graphs=False, enabled=False)
    forced = deployment_case(data_parallel_size=1, cuda_graphs=False, enabled=True)
    assert "data_parallel_size=4" in dp and "not aligned" in dp
    assert "CUDA graphs" in graphs and "gains nothing" not in graphs
    assert "gains nothing" in eager and "benchmarks/vllm_e2e.py" in eager
    assert "off by default here" in eager and "off by default" not in forced
    assert gate_on_by_default(cuda_graphs=True) and not gate_on_by_default(cuda_graphs=False)
