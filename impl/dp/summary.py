"""One summary of a data-parallel run, merged from every reporting rank, and its tables."""

from __future__ import annotations

import collections
import json
from collections.abc import Sequence
from typing import Any

from densegate.impl.dp.report import RankReport
from densegate.impl.dp.timing import phase_timing, print_timing
from densegate.impl.figures import fmt

__all__ = ["merge_reports", "print_summary"]


def merge_reports(
    world_size: int,
    reports: dict[int, list[dict[str, Any]]],
    trace_len: int,
    wall_s: float,
    exitcodes: Sequence[int | None] | None = None,
) -> dict[str, Any]:
    """One JSON-ready summary from every reporting rank's phase reports.

    Every request must be finished by some rank, rejected, or reported lost
    with a dead rank; anything else is listed as ``unaccounted``.
    """
    by_phase: dict[str, dict[int, RankReport]] = collections.defaultdict(dict)
    for rank, reps in reports.items():
        for d in reps:
            rep = RankReport.from_dict(d)
            by_phase[rep.phase][rank] = rep
    main = by_phase.get("coordinated", {})
    if not main:
        codes = list(exitcodes) if exitcodes is not None else None
        return {
            "dp": world_size,
            "requests": trace_len,
            "error": f"no rank reported (exit codes {codes}; their tracebacks are above)",
            "exitcodes": codes,
        }
    first = main[min(main)]
    finished = sorted({rid for rep in main.values() for rid in rep.finished}, key=int)
    rejected = sorted({rid for rep in main.values() for rid in rep.rejected}, key=int)
    failures = {r: rep.failure for r, rep in main.items() if rep.failure is not None}
    # Survivors a failure names but whose reports are not here (under torchrun each
    # survivor reports alone) hold their own requests: "elsewhere", not unaccounted.
    elsewhere_ranks: set[int] = set()
    lost: set[str] = set()
    dead_set: set[int] = set()
    for f in failures.values():
        lost.update(f["lost_requests"])
        dead_set.update(f["dead_ranks"])
        elsewhere_ranks.update(set(f["survivors"]) - set(main))
    dead = sorted(dead_set | (set(range(world_size)) - set(main) - elsewhere_ranks))
    accounted = set(finished) | set(rejected) | lost
    unaccounted: list[str] = []
    elsewhere = 0
    for i in range(trace_len):
        rid = str(i)
        if rid in accounted:
            continue
        if first.assignment.get(rid) in elsewhere_ranks:
            elsewhere += 1
        else:
            unaccounted.append(rid)
    healthy = not failures and not dead
    decisions = {r: rep.decisions for r, rep in main.items()}
    agree = len({json.dumps(d) for d in decisions.values()}) == 1
    reasons = collections.Counter(reason for _, _, reason in first.decisions)
    alignment = {name: reps[min(reps)].alignment for name, reps in by_phase.items()}
    alignment_agree = all(
        len({json.dumps(rep.alignment, sort_keys=True) for rep in reps.values()}) == 1
        for reps in by_phase.values()
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
                status="fell back" if mine.failure else "ok",
                assigned=len(mine.assigned),
                finished=len(mine.finished),
                ticks=mine.ticks,
                wall_s=mine.wall_s,
                collective_ms_per_tick=mine.collective_ms_per_tick,
                **{k: v for k, v in mine.figures.items() if k not in ("requests", "finished")},
            )
        ranks.append(row)
    failure = None
    if failures:
        f = failures[min(failures)]
        failure = {
            "tick": f["tick"],
            "dead_ranks": dead,
            "detected_after_s": max(x["detected_after_s"] for x in failures.values()),
            "liveness_s": max(x["liveness_s"] for x in failures.values()),
            "finished_alone_s": max(x.get("finished_alone_s", 0.0) for x in failures.values()),
            "lost_requests": sorted(lost, key=int),
            "error": f["error"],
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
        "unaccounted": unaccounted,
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
        "timing": phase_timing(by_phase),
        "wall_s": wall_s,
    }


def print_summary(s: dict[str, Any]) -> None:
    """The summary as rich tables: run, alignment per phase, ranks."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if "error" in s:
        console.print(f"[red]densegate run --dp {s['dp']}: {s['error']}[/]")
        return
    t = Table(
        title=f"densegate run --dp {s['dp']} (router {s.get('router')}, gate {s.get('gate')}, "
        f"runner {s.get('runner_kind')})",
        show_header=False,
    )
    t.add_column("figure")
    t.add_column("value")
    rows = [
        ("requests finished", f"{s['finished']} / {s['requests']}"),
        (
            "rejected / lost / unaccounted",
            f"{s['rejected']} / {s['lost']} / {len(s['unaccounted'])}",
        ),
        ("ticks", s["ticks"]),
        ("all ranks logged the same decisions", s["decisions_agree"]),
        ("aligned decisions", s["reasons"]),
        ("coordinated run seconds", s["coordinated_wall_s"]),
        ("wall seconds (all phases, start-up included)", s["wall_s"]),
    ]
    if s.get("held_by_unreporting_survivors"):
        rows.insert(2, ("held by survivors reporting alone", s["held_by_unreporting_survivors"]))
    for k, v in rows:
        t.add_row(k, fmt(v))
    console.print(t)
    phase_names = list(s["alignment"])
    a = Table(title="alignment: a mixed tick has some rank prefilling while another only decodes")
    a.add_column("figure")
    for name in phase_names:
        a.add_column(name.replace("_", " "))
    for label, key in (
        ("ticks", "ticks"),
        ("prefill ticks", "prefill_ticks"),
        ("  ranks prefilled together", "aligned_prefill_ticks"),
        ("  every rank prefilled", "all_ranks_prefill_ticks"),
        ("  mixed", "mixed_ticks"),
        ("rank-ticks stalled by mixed", "stalled_rank_ticks"),
        ("mixed allowed by", "mixed_by_reason"),
    ):
        a.add_row(label, *(fmt(s["alignment"][n][key]) for n in phase_names))
    console.print(a)
    r = Table(title="ranks (coordinated run)")
    r.add_column("figure")
    for row in s["ranks"]:
        r.add_column(f"rank {row['rank']}")
    for label, get in (
        ("status", lambda row: row.get("status")),
        ("requests assigned / finished", lambda row: f"{fmt(row.get('assigned'))} / "
         f"{fmt(row.get('finished'))}"),
        ("prompt / output tokens", lambda row: f"{fmt(row.get('prompt_tokens'))} / "
         f"{fmt(row.get('output_tokens'))}"),
        ("prefill / decode-only passes", lambda row: f"{fmt(row.get('prefill_passes'))} / "
         f"{fmt(row.get('decode_only_passes'))}"),
        ("TTFT passes p50 / p99", lambda row: "{} / {}".format(
            *(fmt((row.get("ttft_passes") or {}).get(q)) for q in ("p50", "p99")))),
        ("runner ms per pass", lambda row: fmt(row.get("runner_ms_per_pass"))),
        ("collective ms per tick", lambda row: fmt(row.get("collective_ms_per_tick"))),
    ):  # fmt: skip
        r.add_row(label, *(str(get(row)) for row in s["ranks"]))
    console.print(r)
    print_timing(console, s)
    f = s.get("failure")
    if f:
        console.print(
            f"[bold red]rank(s) {f['dead_ranks']} died at tick {f['tick']}[/]: survivors noticed "
            f"after {fmt(f['detected_after_s'])} s, agreed on the dead in "
            f"{fmt(f['liveness_s'])} s, finished alone in {fmt(f['finished_alone_s'])} s; "
            f"lost requests: {f['lost_requests']}"
        )
