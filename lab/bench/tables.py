"""The benchmark's text output: one table per workload, a column per policy."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from densegate.impl.figures import fmt
from densegate.impl.traces.replay import S6_SCOPE
from densegate.lab.bench.runs import BenchResult

__all__ = ["ROWS", "S6_LEGEND", "S6_ROW", "format_tables"]

S6_ROW = "head TTFT / its S6 bound, worst ratio [S6]"
S6_LEGEND = (
    f"[S6] S6 (a queue head's wait within its bound) is proved for {S6_SCOPE}; here it is "
    "checked. With the STALL valve on (densegate-stall) it is not proved, only checked."
)
"""The S6 row's label is short; its scope, a sentence, is the legend under the tables."""
_VALVE_ON = {"densegate-stall": " (valve on: not proved)"}


def _pcts(d: dict[str, Any] | None, keys: Sequence[str]) -> str:
    if d is None:
        return "-"
    return " / ".join(fmt(d.get(k)) for k in keys)


def _share(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _s6_cell(f: dict[str, Any]) -> str:
    w = f["s6"]["worst"]
    return "-" if w is None else f"{w['wait']} / {w['bound']} = {f['s6']['worst_ratio']:.2f}"


ROWS: tuple[tuple[str, Callable[[dict[str, Any]], str], bool], ...] = (
    ("passes to drain", lambda f: fmt(f["passes"]), False),
    ("  of which after the last arrival", lambda f: fmt(f["drain_passes"]), False),
    ("under-full prefill passes interrupting decode (% of passes)",
     lambda f: f"{f['underfull_interrupting']} ({_share(f['underfull_interrupting_share'])})",
     False),
    ("mean prefill fill (of dense_tokens)", lambda f: fmt(f["mean_prefill_fill"]), False),
    ("mixed passes (prefill beside decode)", lambda f: fmt(f["mixed_passes"]), False),
    ("prefill passes under 1/4 of the token budget (% of prefill passes)",
     lambda f: _share(f["prefill_under_quarter_share"]), False),
    ("decode tokens in decode-only (graph-eligible) passes",
     lambda f: _share(f["decode_tokens_in_decode_only_share"]), False),
    ("TTFT passes p50 / p99 / max", lambda f: _pcts(f["ttft_passes"], ("p50", "p99", "max")),
     False),
    ("TTFT ms p50 / p99 / max", lambda f: _pcts(f["ttft_ms"], ("p50", "p99", "max")), True),
    ("TPOT passes p50 / p99", lambda f: _pcts(f["tpot_passes"], ("p50", "p99")), False),
    ("TPOT ms p50 / p99", lambda f: _pcts(f["tpot_ms"], ("p50", "p99")), True),
    ("output tokens per pass", lambda f: fmt(f["output_tokens_per_pass"], 4), False),
    ("output tokens per s", lambda f: fmt(f["output_tokens_per_s"]), True),
    ("scheduler us per pass", lambda f: fmt(f["scheduler_us_per_pass"]), False),
    (S6_ROW, _s6_cell, False),
)  # fmt: skip
"""Table rows: label, cell, and whether the row needs wall-clock times (torch runner)."""


def format_tables(result: BenchResult) -> str:
    """One Markdown table per workload (rows: figures, columns: policies), then its checks."""
    timed = result.runner != "null"
    cfg = result.config
    lines = [
        f"densegate bench: runner {result.runner}, seed {result.seed}; max_num_seqs "
        f"{cfg['max_num_seqs']}, {cfg['max_num_batched_tokens']} tokens per pass, "
        f"dense_tokens {cfg['dense_tokens']}, max_hold_passes {cfg['max_hold_passes']}, "
        f"stall_passes {cfg['stall_passes']} (densegate-stall only), "
        f"{cfg['num_blocks']} KV blocks of {cfg['block_size']}",
    ]
    for w in result.workloads.values():
        names = list(w.runs)
        lines += ["", f"### {w.workload}: {w.description} ({w.requests} requests)", ""]
        lines.append("| figure | " + " | ".join(names) + " |")
        lines.append("|---|" + "---:|" * len(names))
        for label, cell, needs_time in ROWS:
            if needs_time and not timed:
                continue
            cells = [cell(w.runs[p].figures) for p in names]
            if label == S6_ROW:
                cells = [c + _VALVE_ON.get(p, "") for c, p in zip(cells, names, strict=True)]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        lines.append("")
        for c in w.checks():
            lines.append(f"- [{'x' if c.ok else ' '}] {c.name}: {c.detail}")
    lines += ["", S6_LEGEND, "", f"wall: {result.wall_s:.1f} s"]
    return "\n".join(lines)
