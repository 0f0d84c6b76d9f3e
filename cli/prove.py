"""``densegate prove``: prove every obligation, refute every mutant, report."""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import multiprocessing
import os
import time
from typing import Any

HELP = "prove the spec's obligations for all parameters and refute every broken variant"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print exactly one JSON object")
    p.add_argument(
        "--level",
        action="append",
        metavar="LEVEL",
        help="only this level (gate, scheduler, dp, refinement, refinement-scheduler); repeatable",
    )
    p.add_argument("--only", metavar="IDS", help="comma-separated obligation ids, e.g. P1,P3")
    p.add_argument(
        "--traces", action="store_true", help="print every mutant's counterexample trace"
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=1,
        metavar="N",
        help="worker processes (default 1; 0: one per CPU); obligations sharing a machine "
        "stay in one process so they share its proved invariant",
    )


def _prove_ids(level: str, ids: list[str]) -> list[Any]:
    """Worker: rebuild ``level``'s obligations in this process and prove ``ids``."""
    from densegate.proofs.registry import obligations, prove

    return [prove(o) for o in obligations([level]) if o.id in ids]


def _groups(obs: list[Any], levels: dict[int, str]) -> list[tuple[str, list[str]]]:
    """Obligations grouped by level and machine, costliest (scheduler) first."""
    groups: dict[tuple[str, int], list[str]] = {}
    for o in obs:
        machine = getattr(o, "machine", None)
        groups.setdefault((levels[id(o)], id(machine)), []).append(o.id)
    order = sorted(groups, key=lambda k: k[0] != "scheduler")
    return [(k[0], groups[k]) for k in order]


def _prove_all(obs: list[Any], levels: dict[int, str], jobs: int) -> list[Any]:
    """Every obligation's result, in ``obs`` order; groups spread over ``jobs`` processes."""
    from densegate.proofs.registry import prove

    groups = _groups(obs, levels)
    workers = min(jobs if jobs > 0 else (os.cpu_count() or 1), len(groups))
    if workers <= 1:
        return [prove(o) for o in obs]
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=ctx) as pool:
        futures = [pool.submit(_prove_ids, level, ids) for level, ids in groups]
        by_id = {r.id: r for f in futures for r in f.result()}
    return [by_id[o.id] for o in obs]


def main(args: argparse.Namespace) -> int:
    from rich.console import Console

    from densegate.proofs.registry import LEVELS, obligations
    from densegate.proofs.report import print_report, to_json

    try:
        obs = obligations(args.level)
    except ValueError as e:
        raise SystemExit(f"densegate prove: {e}") from None
    levels = {id(o): lv for lv in (args.level or list(LEVELS)) for o in obligations([lv])}
    if args.only:
        wanted = {s.strip() for s in args.only.split(",") if s.strip()}
        missing = wanted - {o.id for o in obs}
        if missing:
            raise SystemExit(f"densegate prove: unknown obligation id(s) {sorted(missing)}")
        obs = [o for o in obs if o.id in wanted]
    t0 = time.perf_counter()
    results = _prove_all(obs, levels, args.jobs)
    seconds = time.perf_counter() - t0
    if args.json:
        print(json.dumps(to_json(results, seconds)))
    else:
        console = Console(width=None if Console().is_terminal else 160)
        print_report(results, seconds, console, args.traces)
    return 0 if all(r.ok for r in results) else 1
