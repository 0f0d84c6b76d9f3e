"""The DP gate's pure parts (no vLLM): the opt-in, the config it builds, the agreement check.

The agreement slots are what make a rank with another config or another
``step_counter`` fail loudly inside the one per-step all-reduce; here they are
summed by hand over the ranks, including the case a plain sum cannot see (two
ranks off by +d and -d).
"""

from __future__ import annotations

import pytest

from densegate.impl.dp_gate import AlignedGateConfig
from densegate.integrations.vllm.config import gate_config_from
from densegate.integrations.vllm.dp_config import (
    AGREEMENT_SIZE,
    ENV_VAR,
    DpGateError,
    agreement_slots,
    aligned_config_from,
    check_agreement,
    dp_gate_enabled,
    fingerprint,
)


def _sum(rows: list[list[int]]) -> list[int]:
    return [sum(col) for col in zip(*rows, strict=True)]


def test_the_plugin_is_opt_in_and_a_bad_value_names_itself() -> None:
    assert dp_gate_enabled({}) is False
    assert dp_gate_enabled({ENV_VAR: "0"}) is False
    assert dp_gate_enabled({ENV_VAR: "1"}) is True
    with pytest.raises(ValueError, match=rf"{ENV_VAR} must be .* got 'yes'"):
        dp_gate_enabled({ENV_VAR: "yes"})


def test_the_config_is_the_one_engine_gates_keys_and_defaults() -> None:
    cfg = aligned_config_from(
        {"densegate": {"max_hold_passes": 9, "stall_passes": 4}},
        max_num_batched_tokens=256, max_num_seqs=16, prefill_schedule_interval=1,
    )  # fmt: skip
    assert cfg == AlignedGateConfig(dense_tokens=240, max_hold_passes=9, stall_ticks=4)
    with pytest.raises(ValueError, match=r"additional_config\['densegate'\]\['dense_tokens'\]"):
        aligned_config_from(
            {"densegate": {"dense_tokens": 0}},
            max_num_batched_tokens=256, max_num_seqs=16, prefill_schedule_interval=1,
        )  # fmt: skip


def test_vllms_cadence_beside_an_enabled_gate_is_refused_a_disabled_gate_leaves_it() -> None:
    kw = {"max_num_batched_tokens": 256, "max_num_seqs": 16, "prefill_schedule_interval": 2}
    with pytest.raises(ValueError, match=r"prefill_schedule_interval=2 .* both defer prefills"):
        aligned_config_from({}, **kw)
    assert aligned_config_from({"densegate": {"enabled": False}}, **kw).enabled is False


def test_the_fingerprint_changes_with_every_field_the_dp_size_and_vllms_version() -> None:
    base = AlignedGateConfig(dense_tokens=240)
    fp = fingerprint(base, 2, "0.32.0")
    assert 1 <= fp < 2**20
    assert fp == fingerprint(AlignedGateConfig(dense_tokens=240), 2, "0.32.0")
    variants = [
        AlignedGateConfig(dense_tokens=241),
        AlignedGateConfig(dense_tokens=240, max_hold_passes=29),
        AlignedGateConfig(dense_tokens=240, enabled=False),
        AlignedGateConfig(dense_tokens=240, target_fill=0.5),
        AlignedGateConfig(dense_tokens=240, stall_ticks=3),
        AlignedGateConfig(dense_tokens=240, kv_pressure_valve=True),
    ]
    prints = {fingerprint(v, 2, "0.32.0") for v in variants}
    prints |= {fingerprint(base, 4, "0.32.0"), fingerprint(base, 2, "0.33.0")}
    assert fp not in prints and len(prints) == len(variants) + 2


@pytest.mark.parametrize("world", [2, 3, 8])
def test_agreeing_ranks_pass_the_check(world: int) -> None:
    fp = fingerprint(AlignedGateConfig(dense_tokens=240), world, "0.32.0")
    tail = _sum([agreement_slots(fp, 37) for _ in range(world)])
    assert len(tail) == AGREEMENT_SIZE
    check_agreement(tail, world_size=world, fp=fp, tick=37, rank=0, what="t")


@pytest.mark.parametrize("delta", [1, 5, 1000])
def test_a_rank_with_another_config_fails_even_when_the_plain_sum_matches(delta: int) -> None:
    fp = 50_000
    rows = [agreement_slots(fp, 3), agreement_slots(fp - delta, 3), agreement_slots(fp + delta, 3)]
    tail = _sum(rows)
    assert tail[0] == 3 * fp  # the sum alone cannot tell; the squares can
    with pytest.raises(DpGateError, match=r"rank 0, step 3: DP ranks run different gate configs"):
        check_agreement(tail, world_size=3, fp=fp, tick=3, rank=0, what="step 3")
    with pytest.raises(DpGateError, match="different gate configs"):
        check_agreement(_sum(rows[:2]), world_size=2, fp=fp, tick=3, rank=1, what="x")


def test_a_rank_at_another_step_counter_fails() -> None:
    fp = 123
    tail = _sum([agreement_slots(fp, 10), agreement_slots(fp, 11)])
    with pytest.raises(DpGateError, match=r"different step_counter values \(this rank 10\)"):
        check_agreement(tail, world_size=2, fp=fp, tick=10, rank=0, what="s")
    ok = _sum([agreement_slots(fp, 2**20 + 5), agreement_slots(fp, 2**20 + 5)])
    check_agreement(ok, world_size=2, fp=fp, tick=2**20 + 5, rank=0, what="s")


def test_a_missing_rank_fails_the_check() -> None:
    fp = 999
    tail = _sum([agreement_slots(fp, 4)])  # one of two ranks answered
    with pytest.raises(DpGateError):
        check_agreement(tail, world_size=2, fp=fp, tick=4, rank=0, what="s")


def test_align_ticks_is_read_by_the_dp_gate_only_and_checked() -> None:
    kw = {"max_num_batched_tokens": 256, "max_num_seqs": 16, "prefill_schedule_interval": 1}
    cfg = aligned_config_from({"densegate": {"align_ticks": 2, "max_hold_passes": 9}}, **kw)
    assert cfg == AlignedGateConfig(dense_tokens=240, max_hold_passes=9, align_ticks=2)
    assert aligned_config_from({"densegate": {"align_ticks": None}}, **kw).align_ticks is None
    for bad in (-1, True, "2", 1.5):
        with pytest.raises(ValueError, match=rf"\['align_ticks'\] must be an int >= 0 .* {bad!r}"):
            aligned_config_from({"densegate": {"align_ticks": bad}}, **kw)
    with pytest.raises(ValueError, match=r"unknown keys \['align_ticks'\]"):
        gate_config_from({"densegate": {"align_ticks": 0}}, max_num_batched_tokens=256,
                         max_num_seqs=16)  # fmt: skip
