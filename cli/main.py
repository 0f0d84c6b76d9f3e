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
from collections.abc import Iterable, Sequence
from importlib import import_module
from typing import Any, NoReturn

from densegate.cli.extras import missing_extra_line

__all__ = ["COMMANDS", "OneLineParser", "UsageError", "build_parser", "main"]

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
INTERRUPTED = 130
"""Exit status after a Ctrl-C (128 + SIGINT, as a shell reports it)."""


class UsageError(Exception):
    """A bad command line: ``main`` prints it as one line and returns 2."""


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (argparse prints the whole usage first) and
    comes back from ``main`` as 2, like every other bad input, instead of ``SystemExit``."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message} (see {self.prog} --help)")


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
        print(f"densegate {v}")  # on stdout, as argparse's own version action prints
        parser.exit()


def build_parser(full: Iterable[str] = ()) -> argparse.ArgumentParser:
    """Every subcommand, listed; only those in ``full`` get their flags (an
    ``add_arguments`` may import what its help needs, ``prove``'s the registry)."""
    parser = OneLineParser(
        prog="densegate",
        description="A verified dense prefill gate and the scheduler around it.",
    )
    parser.add_argument("--version", action=_Version, help="print the version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    chosen = set(full)
    for name, module in COMMANDS.items():
        mod = import_module(module)
        p = sub.add_parser(name, help=mod.HELP, description=mod.HELP)
        if name in chosen:
            mod.add_arguments(p)
        p.set_defaults(_main=mod.main)
    return parser


def _command(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` names: its first word (the top level's flags take no value)."""
    return next((a for a in argv if not a.startswith("-")), None)


def _parse(words: list[str]) -> argparse.Namespace:
    """``words`` parsed; a flag the subcommand does not know points to that subcommand's
    help (argparse's own top level would point to ``densegate --help``)."""
    command = _command(words)
    args, extra = build_parser([command] if command else []).parse_known_args(words)
    if extra:
        where = f"densegate {args.command}"
        raise UsageError(f"{where}: unrecognized arguments: {' '.join(extra)} (see {where} --help)")
    return args


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        words = sys.argv[1:] if argv is None else list(argv)
        try:  # --help and --version still leave through SystemExit(0), as argparse's do
            args = _parse(words)
        except UsageError as e:
            print(e, file=sys.stderr)
            return 2
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
    except KeyboardInterrupt:  # run --dp prints its own line and partial summary first
        cmd = _command(words)
        print(f"densegate{' ' + cmd if cmd else ''}: interrupted (Ctrl-C)", file=sys.stderr)
        return INTERRUPTED
    return code


if __name__ == "__main__":
    sys.exit(main())
