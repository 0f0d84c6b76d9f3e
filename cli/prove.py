"""``densegate prove``: prove every obligation, refute every mutant, report."""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import multiprocessing
import os
import sys
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
        default=0,
        metavar="N",
        help="worker processes (default 0: one per CPU, at most 8; 1: no workers); "
        "obligations sharing a machine stay in one process so they share its proved "
        "invariant, and each model obligation's mutants are a task of their own",
    )


Task = tuple[str, tuple[str, ...], bool]
"""(level, obligation ids, mutants only): prove the ids (a model obligation's mutants left
to a task of their own), or refute one model obligation's mutants."""


def _run(level: str, ids: tuple[str, ...], mutants_only: bool) -> list[Any]:
    """Worker: rebuild ``level``'s obligations in this process and run one task."""
    from densegate.proofs.registry import obligations, prove, refute

    obs = [o for o in obligations([level]) if o.id in ids]
    if mutants_only:
        return [refute(o) for o in obs]
    return [prove(o, mutants=False) for o in obs]


def _size(ob: Any) -> int:
    """A cost guess, for ordering tasks only: a model obligation's machine variables; a code
    obligation's inputs, weighed more (CrossHair runs the code once per path, and paths
    multiply with inputs), plus its mutants, which run with it."""
    from densegate.proofs.obligation import Obligation

    if not isinstance(ob, Obligation):
        return 8 * len(getattr(ob, "params", ())) + 2 * len(ob.mutants)
    return len(ob.machine.param_sorts) + len(ob.machine.state_sorts)


def _tasks(obs: list[Any], levels: dict[int, str]) -> list[Task]:
    """Obligations sharing a machine in one task (they share its proved invariant), each
    model obligation's mutants in another; the likely costliest first."""
    from densegate.proofs.obligation import Obligation

    groups: dict[tuple[str, int], list[Any]] = {}
    for o in obs:
        groups.setdefault((levels[id(o)], id(getattr(o, "machine", None))), []).append(o)
    weighed: list[tuple[int, Task]] = []
    for (level, _), members in groups.items():
        weighed.append((max(map(_size, members)), (level, tuple(o.id for o in members), False)))
        for o in members:
            if isinstance(o, Obligation) and o.mutants:
                weighed.append((_size(o) * len(o.mutants) // 4, (level, (o.id,), True)))
    return [t for _, t in sorted(weighed, key=lambda wt: -wt[0])]


MAX_DEFAULT_WORKERS = 8
"""The default's cap: past a handful, workers only add start-up and memory (the longest
single task, about 3 s here, bounds the run)."""


def _cpus() -> int:
    """CPUs this process may run on (a container's limit, not the host's count), capped."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        n = os.cpu_count() or 1
    return max(1, min(n, MAX_DEFAULT_WORKERS))


def _prove_all(obs: list[Any], levels: dict[int, str], jobs: int) -> list[Any]:
    """Every obligation's result, in ``obs`` order; tasks spread over ``jobs`` processes."""
    from densegate.proofs.registry import prove

    workers = jobs if jobs > 0 else _cpus()
    if workers <= 1 or len(obs) <= 1:
        return [prove(o) for o in obs]
    tasks = _tasks(obs, levels)
    # fork where it is safe and native (Linux): a worker starts with the modules the parent
    # already imported (about half a second less here); the pool forks every worker before
    # it starts its own thread. Elsewhere each worker starts afresh.
    ctx = multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn")
    with concurrent.futures.ProcessPoolExecutor(min(workers, len(tasks)), mp_context=ctx) as pool:
        futures = [(t, pool.submit(_run, *t)) for t in tasks]
        try:
            done = [(t, f.result()) for t, f in futures]
        except BaseException:  # a worker's error surfaces now, not after every queued task
            pool.shutdown(cancel_futures=True)
            raise
    by_id = {r.id: r for (_, _, only), rs in done if not only for r in rs}
    for (_, ids, only), rs in done:
        if only:
            by_id[ids[0]].mutants = rs[0]
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
