"""The command line's habits: one spelling per flag, shared defaults, one-line errors,
``--version``, quiet pipes, a light parser, no files left where it was called."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from densegate.cli.bench_names import BENCH_STALL_DEFAULT, POLICY_NAMES, WORKLOAD_NAMES
from densegate.cli.main import BROKEN_PIPE, COMMANDS, INTERRUPTED, build_parser, main
from densegate.cli.options import engine_config

CLI = [sys.executable, "-m", "densegate.cli.main"]

RENAMED = [
    # (command, flag, its old spelling, dest, a value or None for a switch)
    ("run", "--requests", "--gen", "gen", "7"),
    ("run", "--quiet", "--no-progress", "no_progress", None),
    ("run", "--rounds", "--timed-rounds", "timed_rounds", "3"),
    ("bench", "--workload", "--workloads", "workloads", "steady"),
    ("tune", "--workload", "--workloads", "workload", "steady"),
    ("tune", "--max-hold-passes", "--max-hold", "max_hold", "4"),
    ("profile", "--rounds", "--repeats", "repeats", "3"),
]
"""Every renamed flag: the old spelling still works, sets the same dest, and is not shown."""

TUNE = ["--cost", "roofline:H200"]


def _parse(command: str, *argv: str) -> argparse.Namespace:
    extra = TUNE if command == "tune" else []
    return build_parser([command]).parse_args([command, *extra, *argv])


def _subparser(command: str) -> argparse.ArgumentParser:
    parser = build_parser([command])
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    chosen: argparse.ArgumentParser = sub.choices[command]
    return chosen


def _help(command: str) -> str:
    return _subparser(command).format_help()


@pytest.mark.parametrize(("command", "flag", "old", "dest", "value"), RENAMED)
def test_an_old_spelling_is_a_hidden_alias_with_the_same_dest(
    command: str, flag: str, old: str, dest: str, value: str | None
) -> None:
    given = [value] if value is not None else []
    new = getattr(_parse(command, flag, *given), dest)
    assert new == getattr(_parse(command, old, *given), dest)
    assert new != getattr(_parse(command), dest)  # the flag does set the dest
    text = _help(command)
    assert re.search(rf"{re.escape(flag)}\b(?!-)", text)
    assert not re.search(rf"{re.escape(old)}\b(?!-)", text), f"{old} shows in {command} --help"


def test_the_torchrun_entry_point_reads_the_same_dests() -> None:
    """``densegate.cli.dp`` reads ``args.gen``, ``args.timed_rounds``, ... from these flags."""
    from densegate.cli.dp import build_parser as dp_parser

    args = dp_parser().parse_args(["--requests", "9", "--rounds", "2", "--quiet", "--dp", "2"])
    assert (args.gen, args.timed_rounds, args.no_progress, args.dp) == (9, 2, True, 2)
    old = dp_parser().parse_args(["--gen", "9", "--timed-rounds", "2", "--no-progress"])
    assert (old.gen, old.timed_rounds, old.no_progress) == (9, 2, True)


@pytest.mark.parametrize("command", ["run", "bench", "tune", "profile"])
def test_every_command_with_progress_output_says_quiet_one_way(command: str) -> None:
    text = _help(command)
    assert "--quiet" in text and "--no-progress" not in text


@pytest.mark.parametrize("command", sorted(set(COMMANDS) - {"prove"}))
def test_every_flag_has_help(command: str) -> None:
    missing = [a.option_strings for a in _subparser(command)._actions if a.help is None]
    assert missing == []


def test_run_defaults_are_the_bench_scheduler() -> None:
    from densegate.lab.bench import bench_config

    ran, bench = engine_config(_parse("run"), "null"), bench_config()
    for field in ("max_num_seqs", "max_num_batched_tokens", "block_size", "num_blocks"):
        assert getattr(ran, field) == getattr(bench, field), field
    assert (ran.max_model_len, ran.max_hold_passes, ran.dense) == (
        bench.max_model_len,
        bench.max_hold_passes,
        bench.dense,
    )


def test_the_parser_copies_of_the_bench_names_agree_with_the_bench() -> None:
    from densegate.lab.bench import BENCH_POLICIES, BENCH_STALL_PASSES, WORKLOADS

    assert tuple(WORKLOADS) == WORKLOAD_NAMES
    assert tuple(BENCH_POLICIES) == POLICY_NAMES
    assert BENCH_STALL_DEFAULT == BENCH_STALL_PASSES


_HEAVY = (
    "import sys\n{setup}\n"
    "from densegate.cli.main import build_parser\n"
    "build_parser({full!r})\n"
    "heavy = ('numpy', 'torch', 'z3', 'rich', 'hypothesis', 'matplotlib', 'crosshair')\n"
    "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy\n"
    "             or m.startswith('densegate.lab') or m.startswith('densegate.proofs')))\n"
)


@pytest.mark.parametrize(
    "full", [[], ["run"], ["bench"], ["tune"], ["profile"], ["conform"]], ids=str
)
def test_building_the_parser_imports_nothing_heavy(full: list[str]) -> None:
    code = _HEAVY.format(setup="", full=full)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_the_heavy_import_check_can_fail() -> None:
    code = _HEAVY.format(setup="import densegate.lab.bench", full=[])
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert "'numpy'" in proc.stdout and "'densegate.lab.bench'" in proc.stdout


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out == f"densegate {version('densegate')}\n"


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["run", "--requests", "-1"], "--requests: the value must be >= 1, got -1"),
        (["run", "--rate", "abc"], "--rate: 'abc' is not a number"),
        (["run", "--rate", "0"], "--rate: the value must be > 0, got 0"),
        (["run", "--trace", "missing.json"], "--trace missing.json: No such file"),
        (["run", "--max-num-seqs", "0"], "--max-num-seqs: the value must be >= 1, got 0"),
        (["run", "--threads", "x"], "--threads: 'x' is not an int"),
        (["run", "--bogus"], "unrecognized arguments: --bogus"),
        (["bench", "--workload", "nope"], "unknown workload 'nope'"),
        (["bench", "--policies", "fcfs"], "unknown policy 'fcfs'"),
        (["bench", "--rounds", "0"], "--rounds: the value must be >= 1, got 0"),
        (["conform", "--max-examples", "0"], "--max-examples: the value must be >= 1, got 0"),
        (["profile", "--rounds", "0"], "--rounds: the value must be >= 1, got 0"),
        (["profile", "--collective-ms", "-1"], "--collective-ms: the value must be >= 0"),
    ],
)
def test_bad_input_is_one_line_naming_it_and_exit_2(
    argv: list[str], named: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dump = tmp_path / "trace.json"
    extra = ["--dump-trace", str(dump)] if argv[0] == "run" else []
    assert main([*argv, *extra, "--quiet"] if argv[0] != "conform" else argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and named in captured.err, captured.err
    assert not dump.exists()  # refused before any work


def test_run_prints_gate_reasons_as_text_not_a_dict(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["run", "--requests", "20", "--runner", "null", "--quiet"]
    assert main([*argv, "--json"]) == 0
    by_reason = json.loads(capsys.readouterr().out)["underfull_interrupting_by_reason"]
    assert by_reason  # this workload has some, so the cell has something to show
    assert main(argv) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if "of which under-full" in line)
    assert "{" not in row and "'" not in row
    for reason, n in by_reason.items():
        assert f"{reason} {n}" in row


_BLOCK = "import sys\nfor m in {blocked!r}:\n    sys.modules[m] = None\n"


def test_run_prints_plain_text_without_rich() -> None:
    code = (
        _BLOCK.format(blocked=["rich"])
        + "from densegate.cli.main import main\n"
        + "sys.exit(main(['run', '--requests', '8', '--runner', 'null']))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("densegate run (gate on, runner null)\n")
    assert re.search(r"^requests finished +8 / 8$", proc.stdout, re.M)
    assert "┃" not in proc.stdout and "│" not in proc.stdout


def _closed_stdout(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` with a stdout whose reader is already gone, like ``| head`` once done."""
    r, w = os.pipe()
    os.close(r)
    try:
        return subprocess.run(argv, stdout=w, stderr=subprocess.PIPE, text=True, timeout=300)
    finally:
        os.close(w)


def test_a_closed_pipe_exits_quietly() -> None:
    argv = ["bench", "--runner", "null", "--workload", "steady", "--requests", "5", "--quiet"]
    proc = _closed_stdout([*CLI, *argv])
    assert proc.stderr == ""
    assert proc.returncode == BROKEN_PIPE


def test_help_into_a_closed_pipe_is_quiet() -> None:
    assert _closed_stdout([*CLI, "run", "--help"]).stderr == ""


def test_the_closed_pipe_does_break_a_plain_writer() -> None:
    """The check above can fail: the same pipe makes an unguarded print raise."""
    proc = _closed_stdout([sys.executable, "-c", "print('x')"])
    assert "BrokenPipeError" in proc.stderr


def test_conform_keeps_hypothesis_files_out_of_the_working_directory(tmp_path: Path) -> None:
    work, cache = tmp_path / "work", tmp_path / "cache"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "HYPOTHESIS_STORAGE_DIRECTORY"}
    env["XDG_CACHE_HOME"] = str(cache)
    argv = [*CLI, "conform", "--policies", "densegate", "--max-examples", "5"]
    proc = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert list(work.iterdir()) == []
    assert (cache / "densegate" / "hypothesis").is_dir()  # Hypothesis did write: there


def test_ctrl_c_is_one_line_and_exit_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Ctrl-C in any command (run --dp prints its partial summary itself first) leaves one
    line on stderr, no traceback, and the shell's 130."""
    import densegate.cli.run as run

    def interrupted(args: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(run, "main", interrupted)
    assert main(["run", "--requests", "3"]) == INTERRUPTED == 130
    err = capsys.readouterr().err
    assert err == "densegate run: interrupted (Ctrl-C)\n"
