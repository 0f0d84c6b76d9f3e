"""A subcommand that meets a missing optional package prints one line naming the extra
to install and exits 2; the runtime's own commands need none.

A subprocess blocks packages the way a missing install does (``sys.modules[name] =
None`` makes ``import name`` raise ``ModuleNotFoundError``), so this holds on a
machine where every extra is installed.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from densegate.cli import main as cli
from densegate.cli.extras import missing_extra_line
from densegate.impl.extras import MissingExtra
from tests.support.blocked import OPTIONAL, run_blocked

_CODE = "from densegate.cli.main import main\nsys.exit(main({argv!r}))\n"


def _run(argv: list[str], blocked: tuple[str, ...], cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_blocked(_CODE.format(argv=argv), blocked, cwd)


BENCH = ["bench", "--runner", "null", "--workload", "steady", "--requests", "5", "--quiet"]
TUNE = ["tune", "--cost", "roofline:H200", "--workload", "steady", "--requests", "5", "--quiet"]
CONFORM = ["conform", "--policies", "densegate", "--max-examples", "2"]


@pytest.mark.parametrize(
    ("argv", "blocked", "extra"),
    [
        (["prove", "--only", "P1"], ("z3",), "prove"),
        (CONFORM, ("hypothesis",), "testing"),
        (CONFORM, ("z3",), "testing"),  # conform needs z3 through [testing], which has it
        (BENCH, ("numpy",), "bench"),
        ([*BENCH, "--plot", "plots"], ("matplotlib",), "bench"),
        (TUNE, ("numpy",), "bench"),
        (["run", "--requests", "3", "--runner", "torch", "--quiet"], ("torch",), "torch"),
        (["profile", "--grid", "small", "--rounds", "1", "--quiet"], ("torch",), "torch"),
    ],
    ids=lambda v: v if isinstance(v, str) else "-".join(v)[:40],
)
def test_a_missing_package_is_one_line_naming_the_extra(
    argv: list[str], blocked: tuple[str, ...], extra: str, tmp_path: Path
) -> None:
    proc = _run(argv, blocked, tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"densegate {argv[0]} needs the '{extra}' extra")
    assert f"({blocked[0]} is not installed)" in lines[0]
    assert f"pip install '.[{extra}]' (densegate is not on the package index)" in lines[0]
    assert list(tmp_path.iterdir()) == []  # refused before any work (no --plot directory)


def test_the_blocker_blocks() -> None:
    """The checks above can fail: a blocked package raises in the subprocess."""
    code = "import sys\nsys.modules['numpy'] = None\nimport numpy\n"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 1 and "ModuleNotFoundError" in proc.stderr


def test_run_on_the_null_runner_needs_no_optional_package(tmp_path: Path) -> None:
    """The bare install's own command: plain text without rich, no extra at all."""
    proc = _run(["run", "--requests", "5", "--runner", "null"], OPTIONAL, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "requests finished" in proc.stdout and "5 / 5" in proc.stdout


@pytest.mark.parametrize(
    ("command", "module", "extra"),
    [
        ("run", "rich", "cli"),
        ("prove", "rich", "prove"),
        ("bench", "rich", "bench"),
        ("run", "tokenizers", "text"),
        ("run", "safetensors", "hf"),
        ("run", "vllm", "vllm"),
        ("run", "sglang", "sglang"),
        ("conform", "crosshair", "testing"),
        ("prove", "crosshair.core", "prove"),  # a submodule is judged by its top level
    ],
)
def test_the_extra_for_each_package(command: str, module: str, extra: str) -> None:
    line = missing_extra_line(command, ModuleNotFoundError(f"no {module}", name=module))
    assert line is not None
    assert f"needs the '{extra}' extra ({module.partition('.')[0]} is not installed)" in line


def test_a_missing_extra_raised_deeper_keeps_its_extra_unless_the_command_says() -> None:
    raised = MissingExtra("densegate.spec", "z3", "prove")
    assert "'prove' extra" in (missing_extra_line("prove", raised) or "")
    assert "'testing' extra" in (missing_extra_line("conform", raised) or "")


def test_an_unknown_missing_module_is_not_dressed_up_as_an_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A missing module no extra brings is a bug: main lets it propagate."""
    assert missing_extra_line("run", ModuleNotFoundError("x", name="densegate.nope")) is None
    assert missing_extra_line("run", ModuleNotFoundError("x")) is None

    def broken(args: argparse.Namespace) -> int:
        import densegate.no_such_module  # type: ignore[import-not-found]  # noqa: F401

        return 0

    monkeypatch.setattr("densegate.cli.run.main", broken)
    with pytest.raises(ModuleNotFoundError, match=r"densegate\.no_such_module"):
        cli.main(["run", "--requests", "1"])
