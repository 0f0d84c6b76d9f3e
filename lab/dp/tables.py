"""A data-parallel run's merged summary (``densegate.impl.dp.summary``) as rich tables:
the run, alignment per phase, the ranks, time per phase, and what a fault did."""

from __future__ import annotations

from typing import Any

from densegate.impl.dp.config import COORDINATED
from densegate.impl.figures import fmt
from densegate.lab.dp.timing import print_timing

__all__ = ["print_summary"]


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
        ("requests finished (coordinated run)", f"{s['finished']} / {s['requests']}"),
        ("  of which re-admitted after a rank died", s["readmitted"]),
        ("  rejected", s["rejected"]),
        (
            "lost / unaccounted / ended twice (every phase)",
            f"{s['lost']} / {len(s['unaccounted'])} / {len(s['duplicated'])}",
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
    acc = s.get("accounting", {})
    a.add_row(
        "requests finished / unaccounted",
        *(
            f"{fmt(acc[n]['finished'])} / {fmt(len(acc[n]['unaccounted']))}" if n in acc else "-"
            for n in phase_names
        ),
    )
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
    if f and not f.get("noticed_by_survivors", True):
        console.print(
            f"[bold red]rank(s) {f['dead_ranks']} died in {f['phase']}[/] with no survivor's "
            f"collective failing ({f['error']}); {f['ended_on_dead']} request(s) of that phase "
            "had ended on the dead rank(s), counted from their streams"
        )
    elif f:
        console.print(
            f"[bold red]rank(s) {f['dead_ranks']} died in {f.get('phase', COORDINATED)} at tick "
            f"{f['tick']}[/]: survivors noticed after {fmt(f['detected_after_s'])} s, agreed "
            f"and regrouped in {fmt(f['recovery_s'])} s ({f['agreements']} agreement(s)); "
            f"ticks before / after the fault {f['ticks_before']} / {f['ticks_after']}; "
            f"{f['readmitted']} request(s) re-admitted ({f['readmitted_finished']} finished), "
            f"{f['ended_on_dead']} had ended on the dead rank(s); the run stopped after that "
            "phase" + ("; the store died: requests lost" if f["store_lost"] else "")
        )
