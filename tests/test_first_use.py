"""A new user's first commands (issue 34): the gate at work on the lean install, a prove
that says where it is and ends in a summary, and each first-use stumble said in one line.

``densegate run --explain`` is the README's first minute: its lines must agree with
the run's own figures (``--json`` of the same run). The other rows are the stumbles a
first user met, each now one line naming what to do, exit 2.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from densegate.cli.main import build_parser, main
from tests.support.blocked import run_blocked

EXPLAIN = ["run", "--requests", "12", "--runner", "null", "--explain"]


def test_explain_tells_each_run_of_decisions_as_the_run_counted_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(EXPLAIN) == 0
    text = capsys.readouterr().out
    assert main([*EXPLAIN[:-1], "--json"]) == 0
    figures = json.loads(capsys.readouterr().out)
    rows = re.findall(r"^  pass (\d+)(?:-(\d+))?\s+(?:FIRE|hold|-) (\w+)(?: x(\d+))?", text, re.M)
    assert rows, text
    held = 0
    for first, last, reason, n in rows:
        span = int(last or first) - int(first) + 1
        assert span == int(n or 1), (first, last, n)  # a run's count is its passes
        held += span * (reason == "HOLD")
    assert "more runs of decisions" not in text  # every run shown: the holds add up
    assert held == figures["reasons"]["HOLD"]
    assert f"Held {held} passes decode-only (HOLD)" in text
    assert f"{figures['finished']} / {figures['requests']} requests finished" in text
    assert " ms" not in text  # no wall-clock figure: the README carries it generated


def test_a_long_run_is_cut_to_the_first_runs_and_counted(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["run", "--requests", "200", "--runner", "null", "--explain"]) == 0
    text = capsys.readouterr().out
    m = re.search(r"\.\.\. (\d+) more runs of decisions \((\d+) passes\)", text)
    assert m is not None, text
    shown = re.findall(r"^  pass (\d+)(?:-(\d+))?", text, re.M)
    last = int(shown[-1][1] or shown[-1][0])
    total = int(re.search(r"finished in (\d+) passes", text)[1])  # type: ignore[index]
    assert last + 1 + int(m[2]) == total  # the passes shown and the passes counted: all of them


# (argv, {env var: value}, what the one line must say)
STUMBLES: dict[str, tuple[list[str], str]] = {
    "explain with json": ([*EXPLAIN, "--json"], "--explain tells one engine's gate decisions"),
    "explain with dp": ([*EXPLAIN, "--dp", "2"], "not with --dp"),
    "an unknown run flag": (
        ["run", "--requests", "3", "--no-such-flag"],
        "densegate run: unrecognized arguments: --no-such-flag (see densegate run --help)",
    ),
    "a GPU name as a cost profile": (
        ["bench", "--cost", "H100"],
        "no profile file 'H100'; did you mean roofline:H100-SXM?",
    ),
    "no-baselines without dp": (["run", "--no-baselines"], "--no-baselines is for a data-parallel"),
    "an unknown proof level": (
        ["prove", "--level", "gates"],
        "unknown level 'gates' (did you mean gate?); levels: gate, scheduler",
    ),
}


@pytest.mark.parametrize("case", list(STUMBLES))
def test_a_first_use_stumble_is_one_line_and_exit_2(
    case: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv, needle = STUMBLES[case]
    assert main(argv) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.count("\n") == 1 and needle in out.err, out.err


def test_no_baselines_is_a_run_dp_flag() -> None:
    """Documented for ``densegate run --dp N``, and taken there."""
    args = build_parser(["run"]).parse_args(["run", "--dp", "2", "--no-baselines"])
    assert args.no_baselines is True


def test_cuda_without_a_gpu_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: the line is for a machine without one")
    assert main(["run", "--device", "cuda", "--requests", "3", "--runner", "torch"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "torch sees no CUDA GPU here" in err, err


def test_auto_runs_the_null_runner_without_torch(tmp_path: Path) -> None:
    """The lean install (``pip install .``) has no torch: ``--runner auto`` says so and runs
    the null runner instead of asking for the ``torch`` extra."""
    code = (
        "import json, sys\nfrom densegate.cli.main import main\n"
        "sys.exit(main(['run', '--requests', '5', '--json']))\n"
    )
    proc = run_blocked(code, ("torch",), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["runner_kind"] == "null"
    assert "torch is not installed, so --runner auto runs the null runner" not in proc.stderr
    proc = run_blocked(code.replace(", '--json'", ""), ("torch",), tmp_path)
    assert proc.returncode == 0 and "runner null" in proc.stdout, proc.stderr
    assert proc.stderr.count("so --runner auto runs the null runner") == 1, proc.stderr


def test_prove_ends_in_a_summary_and_shows_progress_on_a_terminal(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("z3")
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert main(["prove", "--level", "gate", "--jobs", "1"]) == 0
    out = capsys.readouterr()
    assert "all proved, all mutants refuted: 11/11 obligations in 1 level," in out.out
    assert re.search(r"^gate\s+11/11\s+\d+/\d+$", out.out, re.M), out.out
    assert "P1" not in out.out  # no row per obligation without --verbose
    assert "densegate prove: 11/11 tasks done" in out.err, out.err
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)
    assert main(["prove", "--only", "P1", "--jobs", "1", "--verbose"]) == 0
    out = capsys.readouterr()
    assert "counter bound" in out.out and out.err == ""  # the row; no progress off a terminal
