"""The pass-time model, its fit and profiles, and the figures on a modeled clock.

Every check here is on counts or on arithmetic the model fixes: no timing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from densegate.impl.engine import Engine
from densegate.impl.sched.batch import ScheduledBatch, SeqChunk
from densegate.impl.traces.replay import run_trace
from densegate.lab.cost import (
    FEATURES,
    LinearPassModel,
    PassTimeline,
    PassWork,
    Profile,
    Sample,
    TimedRunner,
    dp_figures,
    fit,
    fit_error,
    kind_of,
    modeled_figures,
    roofline_profile,
    tick_ms,
)
from tests.support.dp_small import ENGINE, small_trace

TRUE = {
    "prefill": (1.0, 0.01, 0.2, 1e-5, 0.0, 0.0),
    "mixed": (1.5, 0.012, 0.1, 2e-5, 0.05, 1e-4),
    "decode_eager": (0.8, 0.0, 0.0, 0.0, 0.03, 2e-4),
}


def _samples(coefs: dict[str, tuple[float, ...]]) -> list[Sample]:
    out = []
    for kind, cs in coefs.items():
        for i in range(1, 13):
            p = 0 if kind == "decode_eager" else 37 * i
            n = (i % 4 + 1) if p else 0
            d = 0 if kind == "prefill" else 3 * i + (i % 5)
            w = PassWork(p, n, p * (i % 3) * 11 + p * (p + 1) // 2, p, d, d * (40 + 17 * i))
            out.append(Sample(kind, w, sum(c * f for c, f in zip(cs, w.features(), strict=True))))
    return out


def test_work_from_batch_counts_pairs_and_context() -> None:
    b = ScheduledBatch(7)
    b.prefills.append(SeqChunk(0, [1] * 4, 0, [0], True, True))
    b.prefills.append(SeqChunk(1, [1] * 3, 10, [1, 2], True, False))
    b.decodes.append(SeqChunk(2, [5], 20, [3, 4], False, True))
    w = PassWork.from_batch(b)
    assert w == PassWork(7, 2, 4 * 5 // 2 + 3 * 10 + 3 * 4 // 2, 4 + 13, 1, 21)
    assert PassWork.from_list(w.as_list()) == w
    assert kind_of(w, 8) == "mixed"
    assert kind_of(PassWork(decode_seqs=8, decode_context=80), 8) == "decode_graph"
    assert kind_of(PassWork(decode_seqs=9, decode_context=90), 8) == "decode_eager"
    assert kind_of(PassWork(), 8) is None


def test_fit_recovers_linear_coefficients_exactly() -> None:
    samples = _samples(TRUE)
    model = fit(samples)
    for kind, cs in TRUE.items():
        assert model.coefficients[kind] == pytest.approx(cs, rel=1e-6, abs=1e-9)
    err = fit_error(model, samples)
    assert set(err) == set(TRUE)
    assert all(e["max_abs_pct"] < 1e-6 and e["samples"] == 12 for e in err.values())


def test_fit_keeps_coefficients_nonnegative_and_reports_misfit() -> None:
    # Times that fall with work: a least-squares fit would give a negative slope.
    samples = [
        Sample("decode_eager", PassWork(decode_seqs=d, decode_context=10 * d), 10.0 - 0.05 * d)
        for d in range(1, 40)
    ]
    samples += _samples({k: v for k, v in TRUE.items() if k != "decode_eager"})
    model = fit(samples)
    assert all(c >= 0 for cs in model.coefficients.values() for c in cs)
    assert fit_error(model, samples)["decode_eager"]["max_abs_pct"] > 1.0


def test_fit_needs_enough_samples_per_kind() -> None:
    with pytest.raises(ValueError, match="'prefill' has 2 samples"):
        fit(_samples(TRUE)[:2])
    with pytest.raises(ValueError, match="no coefficients for pass kind 'decode_eager'"):
        fit([s for s in _samples(TRUE) if s.kind != "decode_eager"])


def test_linear_model_validates_and_tick_is_slowest_plus_collective() -> None:
    with pytest.raises(ValueError, match="needs 6 coefficients"):
        LinearPassModel({"prefill": (1.0,), "mixed": TRUE["mixed"], "decode_eager": (0.0,) * 6})
    with pytest.raises(ValueError, match="'decode_graph'"):
        LinearPassModel(TRUE, graph_max_rows=4)
    m = LinearPassModel(TRUE, collective_ms=0.25)
    a, b = PassWork(decode_seqs=2, decode_context=20), PassWork(100, 1, 5050, 100, 0, 0)
    assert m.pass_ms(PassWork()) == 0.0
    assert tick_ms(m, [a, b, PassWork()]) == pytest.approx(max(m.pass_ms(a), m.pass_ms(b)) + 0.25)


def test_profile_round_trips_through_json(tmp_path: Path) -> None:
    samples = _samples(TRUE)
    model = fit(samples, collective_ms=0.1)
    prof = Profile("t", "measured", {"device": "cpu"}, model, samples, fit_error(model, samples))
    path = tmp_path / "p.json"
    prof.save(path)
    back = Profile.load(path)
    assert back.to_json() == prof.to_json()
    assert "fit mixed: 12 passes" in "\n".join(back.describe())
    roof = roofline_profile("H100-SXM")
    roof.save(path)
    assert Profile.load(path).to_json() == roof.to_json()
    assert (
        Profile.load("roofline:H200").model.pass_ms(PassWork(decode_seqs=1, decode_context=9)) > 0
    )
    path.write_text(json.dumps({"format": "other"}))
    with pytest.raises(ValueError, match="not a densegate-profile-1"):
        Profile.load(path)
    with pytest.raises(ValueError, match="unknown GPU class 'B9'"):
        roofline_profile("B9")


def test_roofline_decode_is_memory_bound_and_graphs_save_launches() -> None:
    prof = roofline_profile("H100-SXM")
    m = prof.model
    inputs = m.inputs  # type: ignore[union-attr]
    weights_ms = 1e3 * inputs.shape.params * 2 / (3.35e12 * inputs.bandwidth_efficiency)
    small = PassWork(decode_seqs=1, decode_context=100)
    assert m.pass_ms(small) == pytest.approx(
        weights_ms * (1 + 100 * inputs.shape.kv_bytes_per_token / (inputs.shape.params * 2))
        + inputs.graph_replay_us / 1e3,
        rel=1e-3,
    )
    big = PassWork(decode_seqs=129, decode_context=129 * 100)  # past the graph bucket: eager
    assert m.pass_ms(big) - m.pass_ms(PassWork(decode_seqs=128, decode_context=12800)) > 1.0
    prefill = PassWork(2048, 1, 2048 * 2049 // 2, 2048, 0, 0)
    assert m.pass_ms(prefill) > 5 * m.pass_ms(small)  # compute-bound


def test_modeled_figures_follow_the_pass_clock() -> None:
    engine = Engine(ENGINE)
    timeline = PassTimeline()
    engine.runner = TimedRunner(engine.runner, timeline)
    run_trace(engine, small_trace(30, 1))
    unit = LinearPassModel(
        {k: (1.0, 0, 0, 0, 0, 0) for k in ("prefill", "mixed", "decode_eager")}
    )  # every pass costs 1 ms: the modeled clock counts passes run
    f = modeled_figures(engine, timeline, unit)
    reqs = [engine.request(m.request_id) for m in engine.all_metrics()]
    assert f.output_tokens == sum(len(r.output_token_ids) for r in reqs)
    assert f.seconds == pytest.approx(len(timeline.work) / 1e3)
    assert all(t == 1.0 for t in f.tick_ms)
    # With no idle passes TTFT in ms equals TTFT in passes, and each gap is >= 1 pass.
    expected = sorted(float(r.first_token_pass - r.arrival_pass + 1) for r in reqs)
    assert sorted(f.ttft_ms) == pytest.approx(expected)
    assert min(f.itl_ms) >= 1.0 - 1e-9
    assert len(f.itl_ms) == f.output_tokens - len(reqs)


def test_dp_modeled_tick_is_max_over_ranks() -> None:
    unit = LinearPassModel(
        {k: (1.0, 0.01, 0, 0, 0.5, 0) for k in ("prefill", "mixed", "decode_eager")},
        collective_ms=0.5,
    )
    ranks = [
        {"work": [[0, 100, 1, 0, 100, 0, 0], [1, 0, 0, 0, 0, 2, 20]],
         "requests": [[0, [0, 1]]]},
        {"work": [[0, 0, 0, 0, 0, 4, 40], [1, 0, 0, 0, 0, 4, 44]], "requests": [[0, [1]]]},
    ]  # fmt: skip
    f = dp_figures(ranks, unit)
    assert f.tick_ms == pytest.approx([max(2.0, 3.0) + 0.5, 3.0 + 0.5])
    assert f.ttft_ms == pytest.approx([3.5, 7.0])
    assert f.itl_ms == pytest.approx([3.5])
    assert f.output_tokens == 3
    assert FEATURES[0] == "base"


def test_rounds_alternate_and_pool_with_ratio_to_baseline() -> None:
    from densegate.lab.cost.compare import compare_rounds, round_name, round_order, split_round
    from densegate.lab.cost.timeline import TimeFigures

    order = [round_name(n, k) for k, n in round_order(["a", "b", "off"], 2)]
    assert order == ["a", "b", "off", "off@2", "b@2", "a@2"]
    assert split_round("off@2") == ("off", 2) and split_round("a") == ("a", 1)
    with pytest.raises(ValueError, match="rounds must be >= 1"):
        round_order(["a"], 0)

    def f(tokens: int, seconds: float, ttft: float) -> TimeFigures:
        return TimeFigures(tokens, seconds, [ttft], [1.0], [2.0])

    figs = {
        "a": f(100, 1.0, 5),
        "off": f(50, 1.0, 1),
        "a@2": f(300, 1.0, 7),
        "off@2": f(50, 1.0, 3),
    }
    out = compare_rounds(figs, "off")
    assert list(out) == ["a", "off"]
    assert out["a"]["output_tokens_per_s"] == pytest.approx(200.0)
    assert out["a"]["ratio_to_baseline"] == pytest.approx(4.0)
    assert out["a"]["ratio_to_baseline_by_round"] == pytest.approx({1: 2.0, 2: 6.0})
    assert out["a"]["ttft_ms"]["p50"] == pytest.approx(6.0) and out["a"]["rounds"] == 2
    assert out["off"]["ratio_to_baseline"] == pytest.approx(1.0)
