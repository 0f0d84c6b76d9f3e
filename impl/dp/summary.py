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

    Each request must end exactly once: in a reporting rank's report (finished
    or rejected), in a dead rank's stream as the survivors read it
    (``ended_on_dead``), or as lost (only if the store died). A request ended
    twice is listed under ``duplicated``, one never ended under ``unaccounted``.
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
        ("  of which re-admitted after a rank died", s["readmitted"]),
        (
            "rejected / lost / unaccounted / ended twice",
            f"{s['rejected']} / {s['lost']} / {len(s['unaccounted'])} / {len(s['duplicated'])}",
        ),
        ("ticks", s["ticks"]),
        ("all reporting ranks logged the same decisions", s["decisions_agree"]),
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
        ("  of which re-admitted here", lambda row: fmt(row.get("readmitted"))),
        ("KV blocks free / total at the end", lambda row: " / ".join(
            fmt(x) for x in row.get("kv_blocks") or [None, None])),
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
            f"after {fmt(f['detected_after_s'])} s, agreed and regrouped in "
            f"{fmt(f['recovery_s'])} s ({f['agreements']} agreement(s)); ticks before / after "
            f"the fault {f['ticks_before']} / {f['ticks_after']}, one aligned decision per tick "
            f"over the survivors; {f['readmitted']} request(s) re-admitted "
            f"({f['readmitted_finished']} finished), {f['ended_on_dead']} had ended on the "
            f"dead rank(s)" + ("; the store died: requests lost" if f["store_lost"] else "")
        )
