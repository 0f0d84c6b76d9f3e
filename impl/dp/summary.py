"""One summary of a data-parallel run, merged from every reporting rank's reports.

JSON-ready and pure: what a launcher returns and an engine can log. Tables and
phase timing are the lab's (``densegate.lab.dp.tables``, ``densegate.lab.dp.timing``).
"""

from __future__ import annotations

import collections
import json
from collections.abc import Mapping, Sequence
from typing import Any

from densegate.impl.dp.config import COORDINATED
from densegate.impl.dp.report import RankReport

__all__ = ["by_phase", "merge_reports"]


def by_phase(reports: Mapping[int, Sequence[RankReport]]) -> dict[str, dict[int, RankReport]]:
    """Phase name -> rank -> that rank's report of it, phases in the order first run."""
    out: dict[str, dict[int, RankReport]] = collections.defaultdict(dict)
    for rank, reps in reports.items():
        for rep in reps:
            out[rep.phase][rank] = rep
    return dict(out)


def merge_reports(
    world_size: int,
    reports: dict[int, list[dict[str, Any]]],
    trace_len: int,
    wall_s: float,
    exitcodes: Sequence[int | None] | None = None,
) -> dict[str, Any]:
    """One JSON-ready summary from every reporting rank's phase reports.

    Each request must end exactly once: in a reporting rank's report (finished
    or rejected), in a dead rank's stream as the survivors read it
    (``ended_on_dead``), or as lost (only if the store died). A request ended
    twice is listed under ``duplicated``, one never ended under ``unaccounted``.
    """
    phases = by_phase(
        {rank: [RankReport.from_dict(d) for d in reps] for rank, reps in reports.items()}
    )
    main = phases.get(COORDINATED, {})
    if not main:
        codes = list(exitcodes) if exitcodes is not None else None
        return {
            "dp": world_size,
            "requests": trace_len,
            "error": f"no rank reported (exit codes {codes}; their tracebacks are above)",
            "exitcodes": codes,
        }
    first = main[min(main)]
    faults = [f for rep in main.values() for f in rep.faults]
    dead_set = {d for f in faults for d in f.get("dead_ranks", [])}
    # Survivors a fault names but whose reports are not here (ranks started by hand
    # report alone) hold their own requests: "elsewhere", not unaccounted.
    named = {m for f in faults for m in f.get("survivors", [])}
    elsewhere_ranks = named - set(main) - dead_set
    dead = sorted(dead_set | (set(range(world_size)) - set(main) - elsewhere_ranks))
    ends: collections.Counter[str] = collections.Counter()
    finished: set[str] = set()
    rejected: set[str] = set()
    for rep in main.values():
        ends.update(rep.finished + rep.rejected)
        finished.update(rep.finished)
        rejected.update(rep.rejected)
    on_dead = {rid: e for rep in main.values() for rid, e in rep.ended_on_dead.items()}
    for rid, (r, status) in on_dead.items():
        if r not in main:  # a rank that reported counts its own
            ends[rid] += 1
            (finished if status == "FINISHED" else rejected).add(rid)
    lost = sorted({rid for rep in main.values() for rid in rep.lost}, key=int)
    ends.update(lost)
    readmitted = {rid: v for rep in main.values() for rid, v in rep.readmitted.items()}
    unaccounted: list[str] = []
    elsewhere = 0
    for i in range(trace_len):
        rid = str(i)
        if ends[rid]:
            continue
        if first.assignment.get(rid) in elsewhere_ranks:
            elsewhere += 1
        else:
            unaccounted.append(rid)
    duplicated = sorted((rid for rid, n in ends.items() if n > 1), key=int)
    healthy = not faults and not dead
    decisions = {r: rep.decisions for r, rep in main.items()}
    agree = len({json.dumps(d) for d in decisions.values()}) == 1
    reasons = collections.Counter(reason for _, _, reason in first.decisions)
    alignment = {name: reps[min(reps)].alignment for name, reps in phases.items()}
    alignment_agree = all(
        len({json.dumps(rep.alignment, sort_keys=True) for rep in reps.values()}) == 1
        for reps in phases.values()
    )
    ranks = []
    for r in range(world_size):
        mine = main.get(r)
        row: dict[str, Any] = {"rank": r}
        if exitcodes is not None:
            row["exitcode"] = exitcodes[r]
        if mine is None:
            row["status"] = "survivor, reports alone" if r in elsewhere_ranks else "dead"
        else:
            row.update(
                status="survived" if mine.faults else "ok",
                assigned=len(mine.assigned),
                finished=len(mine.finished),
                readmitted=sum(1 for _, to in mine.readmitted.values() if to == r),
                kv_blocks=mine.kv_blocks,
                ticks=mine.ticks,
                wall_s=mine.wall_s,
                collective_ms_per_tick=mine.collective_ms_per_tick,
                **{k: v for k, v in mine.figures.items() if k not in ("requests", "finished")},
            )
        ranks.append(row)
    failure = None
    if faults:
        tick = min(f["tick"] for f in faults)
        failure = {
            "tick": tick,
            "dead_ranks": dead,
            "agreements": max(len(rep.faults) for rep in main.values()),
            "ticks_before": tick,
            "ticks_after": first.ticks - tick,
            "detected_after_s": max(f.get("detected_after_s", 0.0) for f in faults),
            "recovery_s": max(f.get("recovery_s", 0.0) for f in faults),
            "readmitted": len(readmitted),
            "readmitted_finished": sum(1 for rid in readmitted if rid in finished),
            "ended_on_dead": sum(1 for r, _ in on_dead.values() if r not in main),
            "store_lost": any(f.get("store_lost") for f in faults),
            "error": faults[0]["error"],
        }
    return {
        "dp": world_size,
        "router": first.router,
        "runner_kind": first.runner,
        "gate": first.gate,
        "requests": trace_len,
        "finished": len(finished),
        "rejected": len(rejected),
        "lost": len(lost),
        "readmitted": len(readmitted),
        "unaccounted": unaccounted,
        "duplicated": duplicated,
        "held_by_unreporting_survivors": elsewhere,
        "healthy": healthy,
        "decisions_agree": agree,
        "alignment_agree": alignment_agree,
        "ticks": first.ticks,
        "reasons": dict(sorted(reasons.items())),
        "alignment": alignment,
        "ranks": ranks,
        "failure": failure,
        "coordinated_wall_s": max(rep.wall_s for rep in main.values()),
        "wall_s": wall_s,
    }
