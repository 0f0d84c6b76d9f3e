"""The ``densegate`` command: one subcommand per module, each imported lightly.

A subcommand module defines ``HELP``, ``add_arguments(parser)`` and
``main(args) -> int`` and keeps heavy imports (z3, torch, numpy, rich, the lab)
inside ``main``, so building the parser loads none of them and ``densegate
run`` never loads z3. Whatever goes wrong, the caller gets one line and an
exit status, never a traceback: a bad flag (2), a missing optional package (2,
naming the extra to install), a closed stdout (``| head``: quiet, 141).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from importlib import import_module
from typing import Any, NoReturn

from densegate.cli.extras import missing_extra_line

__all__ = ["COMMANDS", "build_parser", "main"]

COMMANDS: dict[str, str] = {
    "prove": "densegate.cli.prove",
    "run": "densegate.cli.run",
    "conform": "densegate.cli.conform",
    "bench": "densegate.cli.bench",
    "profile": "densegate.cli.profile",
    "tune": "densegate.cli.tune",
}
"""subcommand -> module; later subcommands register here."""

BROKEN_PIPE = 141
"""Exit status when stdout closes early (128 + SIGPIPE, as a shell reports ``head``'s writer)."""


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (argparse prints the whole usage first)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


class _Version(argparse.Action):
    """``--version``: the installed distribution's, read only when asked."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kw: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kw)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            v = version("densegate")
        except PackageNotFoundError:
            v = "(not installed as a distribution)"
        parser.exit(0, f"densegate {v}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="densegate",
        description="A verified dense prefill gate and the scheduler around it.",
    )
    parser.add_argument("--version", action=_Version, help="print the version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module in COMMANDS.items():
        mod = import_module(module)
        p = sub.add_parser(name, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(p)
        p.set_defaults(_main=mod.main)
    return parser


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        # --help, --version and a usage error leave through SystemExit, as argparse's do.
        args = build_parser().parse_args(argv)
        try:
            code: int = args._main(args)
        except ModuleNotFoundError as e:
            line = missing_extra_line(args.command, e)
            if line is None:
                raise
            print(line, file=sys.stderr)
            return 2
        sys.stdout.flush()
    except BrokenPipeError:
        _quiet_stdout()
        return BROKEN_PIPE
    return code


if __name__ == "__main__":
    sys.exit(main())
