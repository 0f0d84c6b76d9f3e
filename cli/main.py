"""The ``densegate`` command: one subcommand per module, each imported lightly.

A subcommand module defines ``HELP``, ``add_arguments(parser)`` and
``main(args) -> int`` and keeps heavy imports (z3, torch) inside ``main`` so
that ``densegate run`` never loads z3 and ``densegate prove`` never loads torch.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib import import_module

__all__ = ["COMMANDS", "main"]

COMMANDS: dict[str, str] = {
    "prove": "densegate.cli.prove",
    "run": "densegate.cli.run",
    "conform": "densegate.cli.conform",
    "bench": "densegate.cli.bench",
    "profile": "densegate.cli.profile",
    "tune": "densegate.cli.tune",
}
"""subcommand -> module; later subcommands register here."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="densegate",
        description="A verified dense prefill gate and the scheduler around it.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module in COMMANDS.items():
        mod = import_module(module)
        p = sub.add_parser(name, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(p)
        p.set_defaults(_main=mod.main)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args._main(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
