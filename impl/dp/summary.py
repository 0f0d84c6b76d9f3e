"""One summary of a data-parallel run, merged from every reporting rank's reports.

JSON-ready and pure: what a launcher returns and an engine can log. Tables and
phase timing are the lab's (``densegate.lab.dp.tables``, ``densegate.lab.dp.timing``).

Every phase that ran is accounted for on its own: a rank dead in phase 2 has
still reported phase 1 (ranks report each phase as it ends), and its requests
of phase 2 ended on it (its stream, as the survivors or the launcher read it)
or on the survivors that took them over.
"""

from __future__ import annotations

import collections
import json
from collections.abc import Mapping, Sequence
from typing import Any

from densegate.impl.dp.config import COORDINATED
from densegate.impl.dp.membership import read_stream
from densegate.impl.dp.report import RankReport

__all__ = ["by_phase", "merge_reports"]


def by_phase(reports: Mapping[int, Sequence[RankReport]]) -> dict[str, dict[int, RankReport]]:
    """Phase name -> rank -> that rank's report of it, phases in the order first run."""
    out: dict[str, dict[int, RankReport]] = collections.defaultdict(dict)
    for rank, reps in reports.items():
        for rep in reps:
            out[rep.phase][rank] = rep
    return dict(out)


def _account(
    reps: Mapping[int, RankReport],
    missing: set[int],
    streams: Mapping[int, bytes] | None,
    trace_len: int,
    elsewhere_ranks: set[int],
) -> dict[str, Any]:
    """One phase: each request must end exactly once, in a reporting rank's report
    (finished or rejected), on a rank ``missing`` a report (its stream ended it, as the
    survivors' ``ended_on_dead`` or ``streams`` say), or as lost (the store died)."""
    first = reps[min(reps)]
    ends: collections.Counter[str] = collections.Counter()
    finished: set[str] = set()
    rejected: set[str] = set()
    for rep in reps.values():
        ends.update(rep.finished + rep.rejected)
        finished.update(rep.finished)
        rejected.update(rep.rejected)
    on_dead: dict[str, tuple[int, str]] = {}
    for rep in reps.values():
        for rid, (r, status) in rep.ended_on_dead.items():
            if r not in reps:  # a rank that reported counts its own
                on_dead[rid] = (int(r), str(status))
    for m in sorted(missing & set(streams or ())):
        for rec in read_stream((streams or {})[m]):  # up to the seal, if sealed
            for rid, status in rec["end"].items():
                if first.assignment.get(rid) == m:
                    on_dead.setdefault(rid, (m, str(status)))
    for rid, (_, status) in on_dead.items():
        ends[rid] += 1
        (finished if status == "FINISHED" else rejected).add(rid)
    lost = sorted({rid for rep in reps.values() for rid in rep.lost}, key=int)
    ends.update(lost)
    readmitted = {rid: v for rep in reps.values() for rid, v in rep.readmitted.items()}
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
    return {
        "reported_by": sorted(reps),
        "finished": len(finished),
        "rejected": len(rejected),
        "lost": len(lost),
        "readmitted": len(readmitted),
        "readmitted_finished": sum(1 for rid in readmitted if rid in finished),
        "ended_on_dead": len(on_dead),
        "unaccounted": unaccounted,
        "duplicated": sorted((rid for rid, n in ends.items() if n > 1), key=int),
        "held_by_unreporting_survivors": elsewhere,
        "ticks": first.ticks,
    }


def merge_reports(
    world_size: int,
    reports: dict[int, list[dict[str, Any]]],
    trace_len: int,
    wall_s: float,
    exitcodes: Sequence[int | None] | None = None,
    streams: Mapping[str, Mapping[int, bytes]] | None = None,
) -> dict[str, Any]:
    """One JSON-ready summary from every reporting rank's phase reports.

    ``accounting`` holds each phase's (``_account``); ``unaccounted`` and
    ``duplicated`` list every phase's requests never ended or ended twice (a
    later phase's as ``phase:id``) and ``lost`` counts every phase's, while
    ``finished``, ``rejected`` and ``readmitted`` are the coordinated phase's.
    ``streams`` (phase -> rank -> stream, as ``DPResult.streams``) account for a
    phase a dead rank ended but never reported. A rank that died, or exited
    with a nonzero code, makes ``failure`` name the phase it happened in.
    """
    parsed = {rank: [RankReport.from_dict(d) for d in reps] for rank, reps in reports.items()}
    phases = by_phase(parsed)
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
    faults = {
        name: [f for rep in reps.values() for f in rep.faults] for name, reps in phases.items()
    }
    every = [f for fs in faults.values() for f in fs]
    named_dead = {int(d) for f in every for d in f.get("dead_ranks", [])}
    # Survivors a fault names but whose reports are not here (ranks started by hand
    # report alone) hold their own requests: "elsewhere", not unaccounted.
    named = {int(m) for f in every for m in f.get("survivors", [])}
    elsewhere_ranks = named - set(parsed) - named_dead
    missing = {
        name: set(range(world_size)) - set(reps) - elsewhere_ranks for name, reps in phases.items()
    }
    died_in: dict[int, str] = {}
    for name in phases:
        for r in sorted(
            missing[name] | {int(d) for f in faults[name] for d in f.get("dead_ranks", [])}
        ):
            died_in.setdefault(r, name)
    crashed = {r for r, c in enumerate(exitcodes or []) if c not in (0, None)}
    dead = sorted(set(died_in) | crashed)
    accounting = {
        name: _account(reps, missing[name], (streams or {}).get(name), trace_len, elsewhere_ranks)
        for name, reps in phases.items()
    }

    def tagged(key: str) -> list[str]:
        return [
            rid if name == COORDINATED else f"{name}:{rid}"
            for name, acc in accounting.items()
            for rid in acc[key]
        ]

    aligned = [
        reps for reps in phases.values() if next(iter(reps.values())).coordination == "aligned"
    ]
    agree = all(len({json.dumps(r.decisions) for r in reps.values()}) == 1 for reps in aligned)
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
        if r in dead:
            row["status"] = f"dead ({died_in.get(r, 'after its last phase')})"
        elif r in elsewhere_ranks:
            row["status"] = "survivor, reports alone"
        else:
            row["status"] = "survived" if any(x.faults for x in parsed[r]) else "ok"
        if mine is not None:
            row.update(
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
    acc = accounting[COORDINATED]
    return {
        "dp": world_size,
        "router": first.router,
        "runner_kind": first.runner,
        "gate": first.gate,
        "requests": trace_len,
        "finished": acc["finished"],
        "rejected": acc["rejected"],
        "lost": sum(a["lost"] for a in accounting.values()),
        "readmitted": acc["readmitted"],
        "unaccounted": tagged("unaccounted"),
        "duplicated": tagged("duplicated"),
        "held_by_unreporting_survivors": sum(
            a["held_by_unreporting_survivors"] for a in accounting.values()
        ),
        "accounting": accounting,
        "healthy": not every and not dead,
        "decisions_agree": agree,
        "alignment_agree": alignment_agree,
        "ticks": first.ticks,
        "reasons": dict(sorted(reasons.items())),
        "alignment": alignment,
        "ranks": ranks,
        "failure": _failure(phases, faults, missing, accounting, dead, exitcodes),
        "coordinated_wall_s": max(rep.wall_s for rep in main.values()),
        "wall_s": wall_s,
    }


def _failure(
    phases: Mapping[str, Mapping[int, RankReport]],
    faults: Mapping[str, list[dict[str, Any]]],
    missing: Mapping[str, set[int]],
    accounting: Mapping[str, Mapping[str, Any]],
    dead: list[int],
    exitcodes: Sequence[int | None] | None,
) -> dict[str, Any] | None:
    """The first phase (in run order) where the survivors agreed on a death, else where
    a rank's report is missing, else the last phase (a rank that died after reporting)."""
    if not dead and not any(faults.values()):
        return None
    names = list(phases)
    name = next((n for n in names if faults[n]), next((n for n in names if missing[n]), names[-1]))
    reps, fs, acc = phases[name], faults[name], accounting[name]
    ticks = reps[min(reps)].ticks
    tick = min(f["tick"] for f in fs) if fs else None
    if fs:
        error = fs[0]["error"]
    else:
        codes = {r: exitcodes[r] for r in dead} if exitcodes is not None else {}
        error = f"rank(s) {dead} exited (exit codes {codes}) with no survivor's collective failing"
    return {
        "phase": name,
        "tick": tick,
        "dead_ranks": dead,
        "noticed_by_survivors": bool(fs),
        "agreements": max(len(rep.faults) for rep in reps.values()),
        "ticks_before": tick if tick is not None else ticks,
        "ticks_after": ticks - tick if tick is not None else 0,
        # The first survivor to notice: a rank stopped (SIGSTOP) meanwhile counts its own
        # freeze in its wait, which says nothing of how soon the failure was noticed.
        "detected_after_s": min((f.get("detected_after_s", 0.0) for f in fs), default=0.0),
        "recovery_s": max((f.get("recovery_s", 0.0) for f in fs), default=0.0),
        "readmitted": acc["readmitted"],
        "readmitted_finished": acc["readmitted_finished"],
        "ended_on_dead": acc["ended_on_dead"],
        "store_lost": any(f.get("store_lost") for f in fs),
        "error": error,
        "last_phase_run": names[-1],
    }
