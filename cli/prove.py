"""``densegate prove``: the registry's obligations proved, their mutants refuted, reported.

What is proved lives in ``densegate.proofs.registry``; how the work is split over
processes in ``densegate.proofs.plan`` and ``densegate.proofs.workers``. This module
parses the arguments and prints the result.
"""

from __future__ import annotations

import argparse
import json
import time

from densegate.cli.flag_types import count

HELP = (
    "prove every obligation in its stated scope (the report's scope column: all parameters, "
    "or which parameters it fixes or the bound it is checked to), show it is not vacuous "
    "(the report's non-vacuity column), and refute each of its broken variants with a trace"
)


def _levels_help() -> str:
    """The levels as the registry lists them (without the ``prove`` extra: where to get it)."""
    try:
        from densegate.proofs.registry import LEVELS
    except ModuleNotFoundError as e:  # no z3: the levels cannot be loaded
        return f"only this level; repeatable ({e})"
    listed = "; ".join(f"{lv.name}: {lv.summary}" for lv in LEVELS)
    return f"only this level; repeatable. Levels: {listed}"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print exactly one JSON object")
    p.add_argument("--level", action="append", metavar="LEVEL", help=_levels_help())
    p.add_argument("--only", metavar="IDS", help="comma-separated obligation ids, e.g. P1,P3")
    p.add_argument(
        "--traces", action="store_true", help="print every mutant's counterexample trace"
    )
    p.add_argument(
        "--jobs",
        type=count(0),
        default=0,
        metavar="N",
        help="worker processes (default 0: one per CPU, at most 8; 1: no workers); "
        "obligations sharing a machine stay in one process so they share its proved "
        "invariant, and each model obligation's mutants are a task of their own",
    )


def main(args: argparse.Namespace) -> int:
    from rich.console import Console

    from densegate.proofs.registry import LEVELS, RegistryError, level
    from densegate.proofs.report import print_report, to_json
    from densegate.proofs.workers import prove_all

    try:
        levels = [level(name) for name in args.level] if args.level else list(LEVELS)
        work = [(lv, ob) for lv in levels for ob in lv.obligations()]
    except RegistryError as e:
        raise SystemExit(f"densegate prove: {e}") from None
    if args.only:
        wanted = {s.strip() for s in args.only.split(",") if s.strip()}
        missing = wanted - {ob.id for _, ob in work}
        if missing:
            raise SystemExit(f"densegate prove: unknown obligation id(s) {sorted(missing)}")
        work = [(lv, ob) for lv, ob in work if ob.id in wanted]
    t0 = time.perf_counter()
    results = prove_all(work, args.jobs)
    seconds = time.perf_counter() - t0
    if args.json:
        print(json.dumps(to_json(results, seconds)))
    else:
        console = Console(width=None if Console().is_terminal else 160)
        print_report(results, seconds, console, args.traces)
    return 0 if all(r.ok for r in results) else 1
