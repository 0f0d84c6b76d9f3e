"""``densegate prove``'s run: every obligation proved, every mutant refuted, across workers.

The results come back in the order the obligations were asked for, whichever worker
ran them; a mutant task's results go back to their obligation's result. Workers fork
where that is safe and native (Linux): a worker starts with the modules the parent
already imported. Elsewhere each worker starts afresh and imports what it needs.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import sys
from collections.abc import Callable, Sequence

from densegate.proofs import prover
from densegate.proofs.obligation import Obligation, Provable, ProvesItself
from densegate.proofs.plan import Task, default_workers, tasks
from densegate.proofs.registry import Level
from densegate.proofs.results import MutantResult, ObligationResult

__all__ = ["prove_all", "prove_one", "refute_all", "run_task"]


def prove_one(ob: Provable, mutants: bool = True) -> ObligationResult:
    """A model obligation goes to the prover; a code obligation runs its own checks (its
    mutants always with them: they start from states its proof sampled). ``mutants``
    False leaves a model obligation's mutants to ``refute_all``."""
    if isinstance(ob, Obligation):
        return prover.prove(ob, mutants)
    if isinstance(ob, ProvesItself):
        return ob.prove()
    raise TypeError(f"{ob.id}: neither a model obligation nor one that proves itself")


def refute_all(ob: Provable) -> list[MutantResult]:
    """A model obligation's mutants, each refuted on its own (none for a code obligation,
    whose proof refutes them)."""
    if isinstance(ob, Obligation):
        return [prover.refute(ob, m) for m in ob.mutants]
    return []


def run_task(task: Task) -> list[ObligationResult] | list[list[MutantResult]]:
    """Worker: rebuild the task's obligations in this process and run it."""
    obs = [ob for ob in task.level.obligations() if ob.id in task.ids]
    if task.mutants_only:
        return [refute_all(ob) for ob in obs]
    return [prove_one(ob, mutants=False) for ob in obs]


def prove_all(
    work: Sequence[tuple[Level, Provable]],
    jobs: int = 0,
    progress: Callable[[int, int], None] | None = None,
) -> list[ObligationResult]:
    """Every obligation's result, in ``work`` order; tasks spread over ``jobs`` processes
    (0: ``default_workers``; 1: none, all in this process). ``progress(done, total)`` is
    called as each task (an obligation, or a model obligation's mutants) finishes."""
    tell = progress or (lambda done, total: None)
    workers = jobs if jobs > 0 else default_workers()
    if workers <= 1 or len(work) <= 1:
        out = []
        for _, ob in work:
            out.append(prove_one(ob))
            tell(len(out), len(work))
        return out
    todo = tasks(work)
    ctx = multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn")
    with concurrent.futures.ProcessPoolExecutor(min(workers, len(todo)), mp_context=ctx) as pool:
        futures = {pool.submit(run_task, t): t for t in todo}
        try:
            done = []
            for f in concurrent.futures.as_completed(futures):
                done.append((futures[f], f.result()))
                tell(len(done), len(todo))
        except BaseException:  # a worker's error surfaces now, not after every queued task
            pool.shutdown(cancel_futures=True)
            raise
    by_id: dict[tuple[str, str], ObligationResult] = {}
    for t, rs in done:
        if not t.mutants_only:
            for r in rs:
                assert isinstance(r, ObligationResult)
                by_id[t.level.name, r.id] = r
    for t, rs in done:
        if t.mutants_only:
            (mutants,) = rs
            assert isinstance(mutants, list)
            by_id[t.level.name, t.ids[0]].mutants = mutants
    return [by_id[lv.name, ob.id] for lv, ob in work]
