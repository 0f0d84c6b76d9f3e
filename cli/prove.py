"""``densegate prove``: the registry's obligations proved, their mutants refuted, reported.

What is proved lives in ``densegate.proofs.registry``; how the work is split over
processes in ``densegate.proofs.plan`` and ``densegate.proofs.workers``. This module
parses the arguments and prints the result: on a terminal a progress line on stderr
while it runs, then a short summary (per level: obligations proved, mutants refuted;
the time; every obligation not proved, in full). ``--verbose`` prints every
obligation's row; ``--json`` one object, its shape unchanged (tests and CI parse it).
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from densegate.cli.flag_types import count

HELP = (
    "prove every obligation of the default levels (--all: of every level) in its stated "
    "scope (the report's scope column: all parameters, "
    "or which parameters it fixes or the bound it is checked to), show it is not vacuous "
    "(the report's non-vacuity column), and refute each of its broken variants with a trace"
)


def _levels_help() -> str:
    """The levels as the registry lists them (without the ``prove`` extra: where to get it)."""
    try:
        from densegate.proofs.registry import LEVELS
    except ModuleNotFoundError as e:  # no z3: the levels cannot be loaded
        return f"only this level; repeatable ({e})"
    listed = "; ".join(
        f"{lv.name}{'' if lv.default else ' (not in the default run)'}: {lv.summary}"
        for lv in LEVELS
    )
    return f"only this level; repeatable. Levels: {listed}"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print exactly one JSON object")
    p.add_argument(
        "--verbose",
        action="store_true",
        help="print every obligation's row (statement, scope, mutants, non-vacuity), not only "
        "the summary and what was not proved",
    )
    p.add_argument("--level", action="append", metavar="LEVEL", help=_levels_help())
    p.add_argument(
        "--all",
        action="store_true",
        help="every level (without --level or --all: the default levels, a run kept under "
        "10 s on an idle 2-core machine)",
    )
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


def unknown(kind: str, names: Sequence[str], known: Sequence[str]) -> str | None:
    """One line naming each of ``names`` not in ``known`` (with the closest known one), or
    None: ``densegate prove: unknown level 'gates' (did you mean gate?); levels: ...``."""
    bad = [n for n in names if n not in known]
    if not bad:
        return None
    said = []
    for n in bad:
        close = difflib.get_close_matches(n, known, n=1)
        said.append(f"{n!r}" + (f" (did you mean {close[0]}?)" if close else ""))
    return f"densegate prove: unknown {kind} {', '.join(said)}; {kind}s: {', '.join(known)}"


def _progress(start: float) -> Callable[[int, int], None] | None:
    """A progress line on stderr, rewritten in place, only when stderr is a terminal."""
    if not sys.stderr.isatty():
        return None

    def tell(done: int, total: int) -> None:
        end = "\n" if done == total else ""
        secs = time.perf_counter() - start
        print(f"\rdensegate prove: {done}/{total} tasks done, {secs:.1f} s", end=end,
              file=sys.stderr, flush=True)  # fmt: skip

    return tell


def summary_lines(results: Sequence[Any], seconds: float) -> list[str]:
    """Per level: obligations proved and mutants refuted; the total and the time."""
    levels: dict[str, list[Any]] = {}
    for r in results:
        levels.setdefault(r.level, []).append(r)
    width = max((len(n) for n in levels), default=5)
    lines = [f"{'level'.ljust(width)}  proved  mutants refuted"]
    for name, rs in levels.items():
        proved = sum(r.status == "proved" for r in rs)
        mutants = [m for r in rs for m in r.mutants]
        refuted = sum(m.status == "refuted" for m in mutants)
        lines.append(f"{name.ljust(width)}  {proved:>3}/{len(rs):<3} {refuted:>4}/{len(mutants)}")
    proved = sum(r.status == "proved" for r in results)
    mutants = [m for r in results for m in r.mutants]
    refuted = sum(m.status == "refuted" for m in mutants)
    ok = all(r.ok for r in results)
    verdict = "all proved, all mutants refuted" if ok else "NOT all proved"
    lines.append(
        f"{verdict}: {proved}/{len(results)} obligations in {len(levels)} "
        f"level{'s' * (len(levels) != 1)}, "
        f"{refuted}/{len(mutants)} mutants refuted, in {seconds:.1f} s"
    )
    return lines


def main(args: argparse.Namespace) -> int:
    from rich.console import Console

    from densegate.proofs.registry import LEVELS, RegistryError, default_levels, level
    from densegate.proofs.report import print_report, to_json
    from densegate.proofs.workers import prove_all

    if args.all and args.level:
        print("densegate prove: --all and --level exclude each other", file=sys.stderr)
        return 2
    why = unknown("level", args.level or [], [lv.name for lv in LEVELS])
    if args.level and why is None:
        levels = [level(name) for name in args.level]
    else:  # --only picks its ids from every level
        levels = list(LEVELS) if args.all or args.only else default_levels()
    left_out = [lv for lv in LEVELS if lv not in levels] if not args.level else []
    try:
        work = [(lv, ob) for lv in levels for ob in lv.obligations()]
    except RegistryError as e:  # the registry and its modules disagree: a bug, not input
        print(f"densegate prove: {e}", file=sys.stderr)
        return 1
    if why is None and args.only:
        wanted = [s.strip() for s in args.only.split(",") if s.strip()]
        why = unknown("obligation id", wanted, [ob.id for _, ob in work])
        work = [(lv, ob) for lv, ob in work if ob.id in wanted]
    if why is not None:
        print(why, file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    results = prove_all(work, args.jobs, None if args.json else _progress(t0))
    seconds = time.perf_counter() - t0
    if args.json:
        print(json.dumps(to_json(results, seconds)))
        return 0 if all(r.ok for r in results) else 1
    console = Console(width=None if Console().is_terminal else 160)
    failed = [r for r in results if not r.ok]
    if args.verbose or args.traces:
        print_report(results, seconds, console, args.traces)
    elif failed:  # what was not proved, in full: its row, its failed checks, its traces
        print_report(failed, seconds, console, traces=False)
    print("\n".join(summary_lines(results, seconds)))
    for lv in left_out if not args.only else []:
        ids = ", ".join(lv.ids)
        print(f"(not in this run: {lv.name} ({ids}), {lv.summary}: densegate prove --all)")
    if not (args.verbose or args.traces):
        print("(every obligation's row: densegate prove --verbose; as JSON: --json)")
    return 0 if not failed else 1
