"""``densegate conform``: check a gate, or the shipped policies, against the machine.

``densegate conform module:factory`` prints one report with a shrunk run per
violated property; ``densegate conform --policies legacy,original,densegate``
(the default without a target) prints which property each shipped policy
violates, as one table, then the runs. Exit status 1 on any violation, 2 on a
usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from densegate.testing.conformance import ConformanceReport

HELP = "check a gate (module:factory) or the shipped policies against the proved machine"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "target",
        nargs="?",
        metavar="MODULE:FACTORY",
        help="a callable taking a GateConfig and returning a fresh gate, e.g. mypkg.sched:MyGate",
    )
    p.add_argument(
        "--policies",
        metavar="NAMES",
        help="comma-separated shipped policies (legacy, original, densegate) or 'all'; "
        "the default when no target is given",
    )
    p.add_argument("--json", action="store_true", help="print exactly one JSON object")
    p.add_argument(
        "--max-examples", type=int, metavar="N", help="runs generated per search (default 200)"
    )
    p.add_argument(
        "--seed",
        type=int,
        metavar="S",
        help="draw runs from this seed instead of the fixed derandomized set",
    )


def _load(target: str) -> Callable[..., Any]:
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"target must look like module:factory, got {target!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # so local modules resolve, as with python -m
    obj: Any = import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"{target} is not callable")
    return obj  # type: ignore[no-any-return]


def _table(reports: list[ConformanceReport]) -> str:
    from densegate.testing.conformance import PROPERTIES

    head = ["property", *(r.target for r in reports)]
    rows = [head]
    for prop in PROPERTIES:
        cells = ["held" if r[prop.id].held else "VIOLATED" for r in reports]
        rows.append([prop.label, *cells])
    widths = [max(len(row[c]) for row in rows) for c in range(len(head))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def main(args: argparse.Namespace) -> int:
    from densegate.impl.baselines.policies import POLICIES
    from densegate.testing.conformance import (
        DEFAULT_MAX_EXAMPLES,
        check_gate,
        format_violation,
    )

    def usage(message: str) -> int:
        print(f"densegate conform: {message}", file=sys.stderr)
        return 2

    n = DEFAULT_MAX_EXAMPLES if args.max_examples is None else args.max_examples
    if n < 1:
        return usage(f"--max-examples must be >= 1, got {n}")
    kw: dict[str, Any] = {"max_examples": n, "seed": args.seed}

    if args.target is not None:
        if args.policies is not None:
            return usage("give a target or --policies, not both")
        try:
            factory = _load(args.target)
        except (ImportError, AttributeError, ValueError) as e:
            return usage(f"cannot load {args.target}: {e}")
        try:
            report = check_gate(factory, name=args.target, **kw)
        except TypeError as e:
            return usage(str(e))
        print(json.dumps(report.to_json()) if args.json else report.format())
        return 0 if report.conforms else 1

    names = [s.strip() for s in (args.policies or "all").split(",") if s.strip()]
    if names == ["all"]:
        names = list(POLICIES)
    unknown = [name for name in names if name not in POLICIES]
    if unknown or not names:
        return usage(f"unknown policies {unknown}; shipped: {', '.join(POLICIES)}")
    reports = [check_gate(POLICIES[name], name=name, **kw) for name in names]
    ok = all(r.conforms for r in reports)
    if args.json:
        print(json.dumps({"conforms": ok, "policies": [r.to_json() for r in reports]}))
        return 0 if ok else 1
    first = reports[0]
    mode = "derandomized" if first.seed is None else f"seed={first.seed}"
    print(f"densegate conform: shipped policies (max_examples={n}, {mode})\n")
    print(_table(reports))
    for r in reports:
        for res in r.results:
            if res.violation is not None:
                print(f"\n[{r.target}] " + "\n".join(format_violation(res.prop, res.violation)))
    return 0 if ok else 1
