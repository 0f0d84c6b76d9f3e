"""``densegate run``: the default workload meets the gate's promises; traces round-trip."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from densegate.cli.main import main


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["run", "--json", "--runner", "null", *args]) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


def test_default_workload_gate_on(capsys: pytest.CaptureFixture[str]) -> None:
    s = _run(capsys, "--gen", "500")
    assert s["finished"] == s["requests"] == 500
    assert s["gate"] == "on" and s["reasons"].get("HOLD", 0) > 0
    # Under-full prefill passes that interrupt decode come only from the valves.
    assert set(s["underfull_interrupting_by_reason"]) <= {"BUDGET", "NO_DECODE"}
    assert s["head_ttft_passes_max"] <= s["head_ttft_bound_passes"]
    assert s["mean_prefill_fill"] > 0.9


def test_gate_off_is_prefill_first(capsys: pytest.CaptureFixture[str]) -> None:
    s = _run(capsys, "--gen", "300", "--gate", "off")
    assert s["finished"] == 300
    assert set(s["reasons"]) <= {"DISABLED", "EMPTY"}
    assert s["underfull_interrupting"] > 0


def test_trace_round_trip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "trace.json"
    a = _run(capsys, "--gen", "60", "--seed", "3", "--dump-trace", str(path))
    entries = json.loads(path.read_text())
    assert len(entries) == 60 and set(entries[0]) == {"arrival_pass", "prompt_len", "output_len"}
    b = _run(capsys, "--trace", str(path), "--seed", "3")
    for key in ("passes", "prompt_tokens", "output_tokens", "reasons", "preemptions"):
        assert a[key] == b[key], key


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("not json", "not valid JSON"),
        ('{"a": 1}', "expected a JSON list"),
        ('[{"arrival_pass": 0, "prompt_len": 0, "output_len": 3}]', "entry 0: prompt_len"),
        ('[{"arrival_pass": 0, "prompt_len": 2, "output_len": 3, "x": 1}]', "unknown field"),
    ],
)
def test_bad_trace_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, needle: str
) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    assert main(["run", "--trace", str(path)]) == 2
    assert needle in capsys.readouterr().err


def test_bad_numbers_are_clear_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--gen", "-1"]) == 2  # the parser refuses it: the flag, the value
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--gen: the value must be >= 1, got -1" in err
    # A value only the config can judge (the budget against the sequences) is named by it.
    assert main(["run", "--gen", "5", "--max-num-batched-tokens", "64"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "max_num_batched_tokens (64)" in err
