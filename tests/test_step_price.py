"""The engine side by sides' modeled clock: a step costs the slowest rank's pass for what it
scheduled plus the collective, arrivals are released as the clock passes them, idle time
jumps to the next arrival, and the figures follow from the steps tokens came out in."""

from __future__ import annotations

import pytest

from densegate.impl.sched.batch import ScheduledBatch, SeqChunk
from densegate.lab.bench.step_price import (
    DEFAULT_PROFILE,
    DUMMY_PASS,
    StepClock,
    load_profile,
    pass_work,
)
from densegate.lab.cost.model import LinearPassModel, PassWork

PROFILE = load_profile()
MODEL = PROFILE.model


def _chunk(start: int, n: int, prefill: bool) -> SeqChunk:
    return SeqChunk(0, [1] * n, start, [], prefill, True)


def test_pass_work_counts_what_from_batch_counts() -> None:
    batch = ScheduledBatch(
        3,
        prefills=[_chunk(0, 100, True), _chunk(64, 40, True)],
        decodes=[_chunk(s, 1, False) for s in (5, 17, 300)],
    )
    got = pass_work([(0, 100), (64, 40)], [5, 17, 300])
    assert got == PassWork.from_batch(batch)
    assert got.prefill_pairs == 100 * 101 // 2 + 40 * 64 + 40 * 41 // 2
    assert pass_work([], []).empty


def test_the_default_profile_is_the_h100_roofline() -> None:
    assert DEFAULT_PROFILE == "roofline:H100-SXM"
    assert PROFILE.name.startswith("roofline-H100-SXM")
    assert PROFILE.source == "modeled"


def test_a_step_costs_the_slowest_rank_plus_the_collective() -> None:
    clock = StepClock(MODEL, [], PROFILE.name)
    big, small = pass_work([(0, 256)], [10] * 15), pass_work([], [10] * 4)
    assert MODEL.pass_ms(big) > MODEL.pass_ms(small)
    coll = round(1e3 * MODEL.collective_ms)
    assert coll > 0
    clock.close([small, big, None])
    assert clock.ends_us == [round(1e3 * MODEL.pass_ms(big)) + coll]
    clock.close([small, DUMMY_PASS])
    assert clock.ends_us[1] - clock.ends_us[0] == round(1e3 * MODEL.pass_ms(small)) + coll
    clock.close([None, None])  # nobody ran a pass: the collective alone
    assert clock.ends_us[2] - clock.ends_us[1] == coll
    assert clock.starts_us == [0, *clock.ends_us[:2]]


def test_arrivals_are_due_once_the_clock_passes_them() -> None:
    model = LinearPassModel({k: [1.0, 0, 0, 0, 0, 0] for k in ("prefill", "mixed",
                            "decode_eager")}, collective_ms=0.5)  # fmt: skip
    clock = StepClock(model, [4000, 0, 1500, 1500])
    assert clock.due() == [1]
    work = PassWork(decode_seqs=1, decode_context=1)
    clock.close([work])  # 1 ms + 0.5 ms: ends at 1500 us
    assert clock.now_us == 1500
    assert clock.due() == [2, 3]
    assert clock.due() == []
    clock.close([work])
    assert clock.due() == []  # 3000 < 4000
    assert clock.idle() and clock.now_us == 4000
    assert clock.due() == [0] and clock.pending == 0
    assert not clock.idle()
    assert clock.step_at(1500) == 0 and clock.step_at(1501) == 1 and clock.step_at(10**9) == 2


def test_figures_from_the_steps_tokens_came_out_in() -> None:
    model = LinearPassModel({k: [2.0, 0, 0, 0, 0, 0] for k in ("prefill", "mixed",
                            "decode_eager")})  # fmt: skip
    clock = StepClock(model, [0, 1000], "linear-2ms")
    work = PassWork(1, 1, 1, 1)
    for _ in range(5):
        clock.close([work])  # ends at 2, 4, 6, 8, 10 ms
    figs = clock.figures([(0, [0, 1, 4]), (1000, [2, 3])])
    assert figs["profile"] == "linear-2ms"
    assert figs["output_tokens"] == 5
    assert figs["seconds"] == pytest.approx(0.010)
    assert figs["tokens_per_s"] == pytest.approx(500.0)
    # TTFT 2 ms and 5 ms; ITL gaps 2, 6 and 2 ms
    assert figs["ttft_ms_p99"] == pytest.approx(2 + 0.99 * 3)
    assert figs["itl_ms_p99"] == pytest.approx(2 + 0.98 * 4)


def test_bad_arrivals_are_refused() -> None:
    with pytest.raises(ValueError, match=">= 0"):
        StepClock(MODEL, [-1])
