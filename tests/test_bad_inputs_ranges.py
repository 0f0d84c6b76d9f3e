"""Numbers that pass a type check but not a range check (issue 34): each refused where it is
read, in one line naming the value (and the file), exit 2 or a ``ValueError``, before work.

Every row once got past its check: an ``OverflowError`` or ``MemoryError`` from a
huge count, healthy ranks excluding each other under a 1e-9 s timeout, a
``RecursionError`` from a deeply nested JSON file, a raw ``TypeError`` or
``AttributeError`` from an API argument. The bounds are ``densegate.impl.validation``'s
(``MAX_SIZE``, ``MAX_RETRIES``, ``TIMEOUT_S``, ``STARTUP_TIMEOUT_S``, ``MAX_JSON_DEPTH``);
the twins at the bottom are the bounds themselves, which pass.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from densegate.cli.main import build_parser, main
from densegate.impl import Engine, EngineConfig
from densegate.impl.dp.config import DPConfig
from densegate.impl.dp.summary import _failure
from densegate.impl.traces.workload import load_trace
from densegate.impl.validation import MAX_JSON_DEPTH, MAX_RETRIES, MAX_SIZE
from densegate.integrations.sglang.config import settings_from_env
from densegate.lab.cost.profile import Profile

DEEP = "[" * 100_000 + "]" * 100_000
"""Past the interpreter's recursion limit: ``json.loads`` raised ``RecursionError``."""

# (argv, {file under {tmp}: text}, {env var: value}, what the one line must say)
CLI: dict[str, tuple[list[str], dict[str, str], dict[str, str], str]] = {
    "dp-timeout 1e20": (
        ["run", "--dp", "2", "--dp-timeout", "99999999999999999999"],
        {},
        {},
        "--dp-timeout: the value must be in [1, 86400] seconds, got 1e+20",
    ),
    "dp-timeout 1e-9": (
        ["run", "--dp", "2", "--dp-timeout", "1e-9"],
        {},
        {},
        "--dp-timeout: the value must be in [1, 86400] seconds, got 1e-09",
    ),
    "dp-startup-timeout 1e20": (
        ["run", "--dp", "2", "--dp-startup-timeout", "99999999999999999999"],
        {},
        {},
        "--dp-startup-timeout: the value must be in [10, 86400] seconds, got 1e+20",
    ),
    "dp-startup-timeout 0.01": (
        ["run", "--dp", "2", "--dp-startup-timeout", "0.01"],
        {},
        {},
        "--dp-startup-timeout: the value must be in [10, 86400] seconds, got 0.01",
    ),
    "num-blocks 1e23": (
        ["run", "--num-blocks", "99999999999999999999999"],
        {},
        {},
        "--num-blocks: the value must be <= 16777216, got 99999999999999999999999",
    ),
    "num-blocks 4e9": (
        ["run", "--num-blocks", "4000000000"],
        {},
        {},
        "--num-blocks: the value must be <= 16777216, got 4000000000",
    ),
    "max-model-len 4e8 on torch": (
        ["run", "--max-model-len", "400000000", "--runner", "torch"],
        {},
        {},
        "--max-model-len: the value must be <= 16777216, got 400000000",
    ),
    "max-num-batched-tokens 1e12": (
        ["run", "--max-num-batched-tokens", "1000000000000"],
        {},
        {},
        "--max-num-batched-tokens: the value must be <= 16777216",
    ),
    "requests 0": (["run", "--requests", "0"], {}, {}, "--requests: the value must be >= 1, got 0"),
    "a crash spec without --dp": (
        ["run", "--requests", "3", "--runner", "null"],
        {},
        {"DENSEGATE_DP_CRASH": "1:3"},
        "DENSEGATE_DP_CRASH is set, but faults are injected only into a data-parallel run",
    ),
    "a trace nested past the recursion limit": (
        ["run", "--trace", "{tmp}/t.json"],
        {"t.json": DEEP},
        {},
        f"t.json: nested deeper than {MAX_JSON_DEPTH} levels",
    ),
    "a cost profile nested past the recursion limit": (
        ["bench", "--cost", "{tmp}/p.json"],
        {"p.json": DEEP},
        {},
        f"p.json: nested deeper than {MAX_JSON_DEPTH} levels",
    ),
    "a model config nested past the recursion limit": (
        ["run", "--model", "{tmp}", "--requests", "3"],
        {"config.json": '{"a": ' + DEEP + "}"},
        {},
        f"config.json: nested deeper than {MAX_JSON_DEPTH} levels",
    ),
}


@pytest.mark.parametrize("case", list(CLI))
def test_a_number_out_of_range_is_one_line_and_exit_2(
    case: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    argv, files, env, needle = CLI[case]
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    dump = tmp_path / "dumped.json"
    args = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    if args[0] == "run":
        args += ["--dump-trace", str(dump)]
    assert main(args) == 2
    out = capsys.readouterr()
    assert out.out == "", out.out
    assert out.err.count("\n") == 1 and needle in out.err, out.err
    assert not dump.exists()  # refused before any work


def _summary_failure(waits: list[float]) -> Any:
    """``merge_reports``' failure entry for one phase whose survivors waited ``waits``."""
    faults = [{"tick": 4, "error": "gone", "detected_after_s": w} for w in waits]
    reps = {0: SimpleNamespace(ticks=9, faults=faults)}
    acc = {"readmitted": 0, "readmitted_finished": 0, "ended_on_dead": 0}
    return _failure({"c": reps}, {"c": faults}, {"c": set()}, {"c": acc}, [1], None)  # type: ignore[dict-item]


def _engine_execute(plan: Any, decision: Any) -> None:
    Engine(EngineConfig()).execute(plan, decision)


# (a call with one bad value, the error it must raise, what its message must say)
API: dict[str, tuple[Callable[[], object], type[Exception], str]] = {
    "runner_retries 1e30": (
        lambda: EngineConfig(runner_retries=10**30),
        ValueError,
        f"EngineConfig.runner_retries must be <= {MAX_RETRIES}, got {10**30}",
    ),
    "num_blocks 4e9": (
        lambda: EngineConfig(num_blocks=4_000_000_000),
        ValueError,
        f"EngineConfig.num_blocks must be <= {MAX_SIZE}, got 4000000000",
    ),
    "timeout_s 1e-9": (
        lambda: DPConfig(EngineConfig(), timeout_s=1e-9),
        ValueError,
        "DPConfig.timeout_s must be in [1, 86400] seconds, got 1e-09",
    ),
    "timeout_s 1e20": (
        lambda: DPConfig(EngineConfig(), timeout_s=1e20),
        ValueError,
        "DPConfig.timeout_s must be in [1, 86400] seconds, got 1e+20",
    ),
    "startup_timeout_s 0.01": (
        lambda: DPConfig(EngineConfig(), startup_timeout_s=0.01),
        ValueError,
        "DPConfig.startup_timeout_s must be in [10, 86400] seconds, got 0.01",
    ),
    "grace_s 1e-9": (
        lambda: DPConfig(EngineConfig(), grace_s=1e-9),
        ValueError,
        "DPConfig.grace_s must be in [1, 86400] seconds",
    ),
    "stop_token_ids 5": (
        lambda: Engine(EngineConfig()).add_request([1, 2], 3, stop_token_ids=5),  # type: ignore[arg-type]
        ValueError,
        "stop_token_ids must be a list of ints, got 5",
    ),
    "stop_token_ids a string": (
        lambda: Engine(EngineConfig()).add_request([1, 2], 3, stop_token_ids="12"),  # type: ignore[arg-type]
        ValueError,
        "stop_token_ids must be a list of ints, got '12'",
    ),
    "DENSEGATE_SGLANG nested past the recursion limit": (
        lambda: settings_from_env({"DENSEGATE_SGLANG": DEEP}),
        ValueError,
        f"DENSEGATE_SGLANG: nested deeper than {MAX_JSON_DEPTH} levels",
    ),
    "execute(None, None)": (
        lambda: _engine_execute(None, None),
        TypeError,
        "Engine.execute.plan must be a PassPlan, got None",
    ),
}


@pytest.mark.parametrize("case", list(API))
def test_a_bad_api_value_is_named(case: str) -> None:
    call, kind, needle = API[case]
    with pytest.raises(kind) as caught:
        call()
    assert needle in str(caught.value)


@pytest.mark.parametrize("name", ["trace", "profile"])
def test_json_one_level_past_the_limit_is_refused_and_at_it_is_read(
    name: str, tmp_path: Path
) -> None:
    """One level past ``MAX_JSON_DEPTH`` is refused by name (a trace, a profile); at the
    limit the file is read, and refused by the loader's own check (not a list of requests,
    not a profile)."""
    path = tmp_path / f"{name}.json"
    load = load_trace if name == "trace" else Profile.load
    for depth, deep in ((MAX_JSON_DEPTH + 1, True), (MAX_JSON_DEPTH, False)):
        path.write_text("[" * depth + "]" * depth)
        with pytest.raises(ValueError) as caught:
            load(path)
        assert (f"nested deeper than {MAX_JSON_DEPTH}" in str(caught.value)) is deep


def test_detection_is_the_first_survivor_s_not_a_frozen_rank_s_wait() -> None:
    """A rank stopped (SIGSTOP) for 5.6 s counts its freeze in its own wait; the survivors
    noticed after 3.1 s, the figure the summary reports."""
    assert _summary_failure([5.6, 3.1, 3.2])["detected_after_s"] == 3.1
    assert _summary_failure([])["detected_after_s"] == 0.0


# -- the twins: the bounds themselves pass -----------------------------------------------
@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--dp", "2", "--dp-timeout", "1", "--dp-startup-timeout", "10"],
        ["run", "--dp", "2", "--dp-timeout", "86400", "--dp-startup-timeout", "86400"],
        ["run", "--num-blocks", str(MAX_SIZE), "--max-model-len", str(MAX_SIZE)],
        ["run", "--requests", "1"],
    ],
)
def test_the_bounds_themselves_parse(argv: list[str]) -> None:
    build_parser([argv[0]]).parse_args(argv)


def test_the_bounds_themselves_build() -> None:
    EngineConfig(runner_retries=MAX_RETRIES, num_blocks=MAX_SIZE // 64, max_model_len=MAX_SIZE)
    DPConfig(EngineConfig(), timeout_s=1.0, startup_timeout_s=10.0, grace_s=86_400.0)
    Engine(EngineConfig()).add_request([1, 2], 3, stop_token_ids=(5,))
