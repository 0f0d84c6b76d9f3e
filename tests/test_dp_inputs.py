"""``densegate run --dp N`` refuses every bad input with one line naming it, exit 2, before
any rank starts.

Each row is a flag, a ``DENSEGATE_DP_CRASH`` or a trace file, and what the line must
say. ``launch`` is replaced by one that fails the test,
so "before any work" is checked, not assumed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import densegate.cli.dp as cli_dp
from densegate.cli.main import main as cli_main

BASE = ["run", "--dp", "2", "--requests", "6", "--runner", "null"]

FLAGS = [  # (argv after BASE, what the one line must say)
    (["--dp-timeout", "inf"], "--dp-timeout: the value must be finite, got inf"),
    (["--dp-timeout", "nan"], "--dp-timeout: the value must be finite, got nan"),
    (["--dp-timeout", "0"], "--dp-timeout: the value must be in [1, 86400] seconds, got 0.0"),
    (["--dp-timeout", "soon"], "--dp-timeout: 'soon' is not a number"),
    (["--dp-startup-timeout", "inf"], "--dp-startup-timeout: the value must be finite, got inf"),
    (["--dp-startup-timeout", "-1"], "must be in [10, 86400] seconds, got -1.0"),
    (["--dp", "0"], "--dp: the value must be >= 1, got 0"),
]
CRASHES = [  # (DENSEGATE_DP_CRASH with --dp 2 and the 3 default phases, what it must say)
    ("5:3", "DENSEGATE_DP_CRASH 5:3:exit:0@0: rank must be <= 1, got 5"),
    ("1:3@3", "DENSEGATE_DP_CRASH 1:3:exit:0@3: phase must be <= 2, got 3"),
    ("1:3:slow:inf", "'1:3:slow:inf': Fault.seconds must be finite and >= 0, got inf"),
    ("1:3:slow:nan", "'1:3:slow:nan': Fault.seconds must be finite and >= 0, got nan"),
    ("1:3:explode", "'1:3:explode': Fault.mode must be one of"),
    ("1:-3", "'1:-3': Fault.tick must be >= 0, got -3"),
    ("1", "'1' is not RANK:TICK[:MODE[:SECONDS]][@PHASE]"),
    ("1:3@", "'1:3@' is not RANK:TICK[:MODE[:SECONDS]][@PHASE]"),
    ("1:3@x", "'1:3@x' has a bad number"),
]
TRACES = [  # (--max-model-len, trace entries as (arrival, prompt, output), what it must say)
    ("4096", [(0, 8, 4), (1, 300_000_000, 5)], "entry 1: prompt_len + output_len must be <= "
     "max_model_len (4096), got 300000000 + 5"),
    ("64", [(0, 60, 5)], "entry 0: prompt_len + output_len must be <= max_model_len (64), "
     "got 60 + 5"),
]  # fmt: skip


@pytest.fixture
def refuse(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[[list[str], str], None]:
    """``refuse(argv, says)``: the command exits 2 with one line containing ``says``, and
    launches nothing."""

    def no_launch(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a rank was launched for a bad input")

    monkeypatch.setattr(cli_dp, "launch", no_launch)

    def check(argv: list[str], says: str) -> None:
        assert cli_main(argv) == 2
        out, err = capsys.readouterr()
        assert out == ""
        lines = err.strip().splitlines()
        assert len(lines) == 1, err
        assert lines[0].startswith("densegate run") and says in lines[0], lines[0]

    return check


@pytest.mark.parametrize(("argv", "says"), FLAGS, ids=[" ".join(a) for a, _ in FLAGS])
def test_a_bad_dp_flag(
    argv: list[str], says: str, refuse: Callable[[list[str], str], None]
) -> None:
    refuse(BASE + argv, says)


@pytest.mark.parametrize(("spec", "says"), CRASHES, ids=[c for c, _ in CRASHES])
def test_a_bad_crash_spec(
    spec: str,
    says: str,
    refuse: Callable[[list[str], str], None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DENSEGATE_DP_CRASH", spec)
    refuse(BASE, says)


@pytest.mark.parametrize(("limit", "entries", "says"), TRACES, ids=[t[2][:7] for t in TRACES])
def test_a_trace_request_no_engine_could_admit(
    limit: str,
    entries: list[tuple[int, int, int]],
    says: str,
    refuse: Callable[[list[str], str], None],
    tmp_path: Path,
) -> None:
    path = tmp_path / "trace.json"
    keys = ("arrival_pass", "prompt_len", "output_len")
    path.write_text(json.dumps([dict(zip(keys, e, strict=True)) for e in entries]))
    argv = ["run", "--dp", "2", "--runner", "null", "--trace", str(path)]
    refuse([*argv, "--max-model-len", limit], f"--trace {path}: {says}")


def test_the_same_inputs_run_when_they_are_good(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The rows' neighbours in range pass the checks and reach ``launch``."""
    seen: list[tuple[int, float, float]] = []

    def record(trace: Any, config: Any, world: int, **kwargs: Any) -> Any:
        seen.append((world, config.timeout_s, config.startup_timeout_s))
        raise SystemExit(0)  # stop here: the checks passed

    monkeypatch.setattr(cli_dp, "launch", record)
    monkeypatch.setenv("DENSEGATE_DP_CRASH", "1:3:slow:0.5@2,0:0,1:999")
    argv = [*BASE, "--dp-timeout", "2.5", "--dp-startup-timeout", "40"]
    with pytest.raises(SystemExit):
        cli_main(argv)
    assert seen == [(2, 2.5, 40.0)]
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("argv", "says"),
    [(["--bogus"], "unrecognized arguments: --bogus"),
     (["--stall-ticks", "x"], "--stall-ticks: invalid int value: 'x'")],
)  # fmt: skip
def test_the_torchrun_entry_point_refuses_a_bad_flag_in_one_line(
    argv: list[str], says: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``python -m densegate.cli.dp`` (one rank under torchrun) answers like ``densegate``."""

    def no_rank(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a rank started despite a bad flag")

    monkeypatch.setattr(cli_dp, "rank_main", no_rank)
    assert cli_dp.main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("python -m densegate.cli.dp:"), lines
    assert says in lines[0]
