"""The Python API's bad inputs of issue 26: a ``ValueError`` naming the value, before any work.

Each row builds one thing from a bad value (an ``EngineConfig``, a request, a
trace replay, a cost profile); the error must name the value and come before
anything is computed (a 3e8-token prompt is never built). The twin of each
table is the same call with a good value, which must succeed.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from densegate.impl import Engine, EngineConfig, NullRunner, TraceRequest
from densegate.impl.traces.replay import run_trace
from densegate.impl.traces.workload import check_fits, load_trace
from densegate.lab.cost.model import LinearPassModel, PassWork
from densegate.lab.cost.profile import Profile
from densegate.lab.cost.roofline import GPUS, SHAPES, GPUSpec, ModelShape, RooflineInputs

PROFILE = Path(__file__).resolve().parent.parent / "benchmarks" / "profiles" / "cpu.json"
ZERO = (0.0,) * 6
SMALL = {"max_num_seqs": 2, "max_num_batched_tokens": 16, "num_blocks": 8, "max_model_len": 32}


class Vocab16(NullRunner):
    config = type("Vocab", (), {"vocab_size": 16})()


CONFIGS: dict[str, tuple[dict[str, Any], str]] = {
    "device tpu": ({"device": "tpu"}, "EngineConfig.device must be cpu, cuda or cuda:N, got 'tpu'"),
    "device cuda:x": ({"device": "cuda:x"}, "got 'cuda:x'"),
    "max_model_len 1": ({"max_model_len": 1}, "EngineConfig.max_model_len must be >= 2, got 1"),
    "negative retries": ({"runner_retries": -1}, "runner_retries must be >= 0, got -1"),
    "check_weights not a bool": ({"check_weights": "yes"}, "check_weights must be a bool"),
}


@pytest.mark.parametrize("case", list(CONFIGS))
def test_a_bad_engine_config_is_named(case: str) -> None:
    fields, needle = CONFIGS[case]
    with pytest.raises(ValueError) as caught:
        EngineConfig(**fields)
    assert needle in str(caught.value)


@pytest.mark.parametrize(
    "fields",
    [{"device": "cuda:0"}, {"max_model_len": 2}, {"runner_retries": 3}, {"check_weights": False}],
)
def test_the_good_values_next_to_them_build(fields: dict[str, Any]) -> None:
    EngineConfig(**fields)


def test_a_stop_token_outside_the_vocabulary_is_refused_before_it_is_queued() -> None:
    eng = Engine(EngineConfig(**SMALL), runner=Vocab16())
    with pytest.raises(ValueError, match=r"in \[0, 16\), the vocabulary, got 99999"):
        eng.add_request([1, 2], 3, stop_token_ids=[99999])
    assert not eng.has_unfinished() and eng.all_metrics() == []
    eng.add_request([1, 2], 3, stop_token_ids=[15])  # the twin: the last id in the vocabulary


TRACES: dict[str, tuple[list[TraceRequest], str]] = {
    "prompt_len 3e8": (
        [TraceRequest(0, 300_000_000, 5)],
        "trace entry 0: prompt_len + output_len must be <= max_model_len (32), got 300000000 + 5",
    ),
    "over the kv cache": (
        [TraceRequest(0, 8, 1), TraceRequest(1, 30, 2)],
        "entry 1: needs 16 KV blocks, the whole cache has 8",
    ),
    "a float length": ([TraceRequest(0, 3e8, 5)], "prompt_len must be an int, got 300000000.0"),  # type: ignore[arg-type]
    "a zero output": ([TraceRequest(0, 3, 0)], "output_len must be >= 1, got 0"),
}


@pytest.mark.parametrize("case", list(TRACES))
def test_a_trace_that_cannot_fit_is_refused_before_any_prompt_is_built(case: str) -> None:
    trace, needle = TRACES[case]
    eng = Engine(EngineConfig(**SMALL, block_size=2))
    with pytest.raises(ValueError) as caught:
        run_trace(eng, trace)
    assert needle in str(caught.value)
    assert eng.all_metrics() == [] and eng.scheduler.pass_index == 0  # nothing was added or run


def test_a_trace_that_fits_runs() -> None:
    """The twin: the longest trace entry the engine allows is replayed to the end."""
    eng = Engine(EngineConfig(**SMALL, block_size=4))
    trace = [TraceRequest(0, 30, 2), TraceRequest(1, 3, 3)]
    check_fits(trace, eng.config)
    run_trace(eng, trace)
    assert [m.status.name for m in eng.all_metrics()] == ["FINISHED", "FINISHED"]


def test_a_trace_that_is_not_utf8_names_its_file(tmp_path: Path) -> None:
    path = tmp_path / "latin.json"
    path.write_bytes(b'[{"arrival_pass": 0, "prompt_len": 2, "output_len": 1, "\xe9": 1}]')
    with pytest.raises(ValueError, match=r"latin\.json: not UTF-8 text"):
        load_trace(path)
    path.write_text('[{"arrival_pass": 0, "prompt_len": 2, "output_len": 1}]')  # the twin
    assert load_trace(path) == [TraceRequest(0, 2, 1)]


def _profile(edit: Callable[[dict[str, Any]], object]) -> dict[str, Any]:
    d: dict[str, Any] = json.loads(PROFILE.read_text())
    edit(d)
    return d


def _coef(i: int, value: object) -> Callable[[dict[str, Any]], object]:
    return lambda d: d["model"]["coefficients_ms"]["prefill"].__setitem__(i, value)


PROFILES: dict[str, tuple[object, str]] = {
    "a list": ([1, 2], "a profile is a JSON object, got a list"),
    "a string coefficient": (_profile(_coef(1, "fast")), "prefill_tokens must be a number"),
    "a negative coefficient": (_profile(_coef(0, -1e6)), "base must be >= 0.0, got -1000000.0"),
    "a nan coefficient": (_profile(_coef(0, math.nan)), "base must be finite, got nan"),
    "an inf coefficient": (_profile(_coef(2, math.inf)), "prefill_chunks must be finite"),
    "coefficients not a list": (
        _profile(lambda d: d["model"]["coefficients_ms"].__setitem__("mixed", "0 1")),
        "mixed must be a list",
    ),
    "model not an object": (_profile(lambda d: d.__setitem__("model", [])), "model must be an"),
    "negative collective": (
        _profile(lambda d: d["model"].__setitem__("collective_ms", -1)),
        "model.collective_ms must be >= 0.0",
    ),
    "a negative sample count": (
        _profile(lambda d: d["samples"][0][1].__setitem__(0, -5)),
        "a PassWork count must be >= 0, got -5",
    ),
    "a sample time of nan": (
        _profile(lambda d: d["samples"][0].__setitem__(2, math.nan)),
        "Sample.ms must be finite and > 0, got nan",
    ),
}


@pytest.mark.parametrize("case", list(PROFILES))
def test_a_bad_cost_profile_is_named(case: str) -> None:
    doc, needle = PROFILES[case]
    with pytest.raises(ValueError) as caught:
        Profile.from_json(doc)
    assert needle in str(caught.value)


def test_the_shipped_profile_loads_and_prices_every_pass_at_zero_or_more() -> None:
    """The twin: the unedited profile passes the same checks."""
    model = Profile.from_json(json.loads(PROFILE.read_text())).model
    assert model.pass_ms(PassWork(prefill_tokens=64, prefill_chunks=1, prefill_pairs=2080)) > 0


@pytest.mark.parametrize(
    ("build", "needle"),
    [
        (lambda: LinearPassModel({"prefill": ZERO, "mixed": ZERO, "decode_eager": (-1,) * 6}),
         "'decode_eager' coefficient base must be >= 0.0"),
        (lambda: PassWork.from_list([0, 0, 0, 0, 0, 1.5]), "count must be an int, got 1.5"),
        (lambda: GPUSpec("x", math.nan, 3.0, "made up"), "GPUSpec.peak_tflops must be finite"),
        (lambda: ModelShape("m", 0, 1, 1, 1, 1, 1, 1), "ModelShape.hidden must be >= 1, got 0"),
        (lambda: RooflineInputs(GPUS["H200"], SHAPES["llama-3.1-8b"], graph_max_rows=-1),
         "graph_max_rows must be >= 0"),
        (lambda: RooflineInputs.from_dict({"gpu": "H200"}), "need gpu and shape objects"),
    ],
)  # fmt: skip
def test_the_cost_model_parts_check_their_own_fields(
    build: Callable[[], object], needle: str
) -> None:
    with pytest.raises(ValueError) as caught:
        build()
    assert needle in str(caught.value)
