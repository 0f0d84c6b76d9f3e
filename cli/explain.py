"""``densegate run --explain``: what the gate held and why, pass by pass, in a few lines.

The first minute on the lean install (``pip install .``, the null runner): a short
run whose gate decisions are grouped into runs of one reason, each said in words
with the numbers the gate saw, then two summary lines. Nothing in it is a wall-clock
time, so the README can carry its output as a generated block.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from densegate.impl.gate import Reason
from densegate.impl.sched.plan import PassRecord

__all__ = ["SHOWN", "explain", "groups"]

SHOWN = 14
"""Runs of decisions printed; the rest are counted in one line."""

_NEVER = (Reason.EMPTY,)
"""Reasons whose passes had no prefill to decide on: shown as one quiet line."""


@dataclass
class _Run:
    """Consecutive passes the gate decided for one reason."""

    reason: Reason
    first: int
    last: int
    waiting: tuple[int, int]
    decoding: tuple[int, int]
    fired_tokens: int

    def add(self, r: PassRecord) -> None:
        self.last = r.index
        self.waiting = (
            min(self.waiting[0], r.waiting_tokens),
            max(self.waiting[1], r.waiting_tokens),
        )
        self.decoding = (min(self.decoding[0], r.decode_seqs), max(self.decoding[1], r.decode_seqs))
        self.fired_tokens += r.prefill_tokens


def groups(records: Sequence[PassRecord]) -> list[_Run]:
    """``records`` (one per pass, in order) as runs of one reason."""
    out: list[_Run] = []
    for r in records:
        if out and out[-1].reason is r.reason and out[-1].last + 1 == r.index:
            out[-1].add(r)
        else:
            w, d = (r.waiting_tokens,) * 2, (r.decode_seqs,) * 2
            out.append(_Run(r.reason, r.index, r.index, w, d, r.prefill_tokens))
    return out


def _span(lo_hi: tuple[int, int]) -> str:
    lo, hi = lo_hi
    return str(lo) if lo == hi else f"{lo}-{hi}"


def _why(run: _Run, dense: int, hold: int) -> str:
    """The rule that decided ``run``, in the numbers the gate saw."""
    w, d = _span(run.waiting), _span(run.decoding)
    return {
        Reason.EMPTY: f"nothing waits to prefill; {d} decode",
        Reason.DISABLED: f"the gate is off: {w} waiting tokens prefill at once",
        Reason.NO_DECODE: f"{w} tokens wait, nothing decodes: holding would idle the pass",
        Reason.DENSE: f"{w} waiting tokens reach dense_tokens {dense}: a dense pass",
        Reason.BUDGET: f"held {hold - 1} passes (max_hold_passes - 1): fire anyway",
        Reason.HOLD: f"{w} waiting tokens < dense_tokens {dense}, {d} decoding: decode-only",
        Reason.STALL: f"{w} waiting tokens stopped growing (the STALL valve): fire",
    }.get(run.reason, run.reason.name)


def explain(records: Sequence[PassRecord], summary: dict[str, Any], shown: int = SHOWN) -> str:
    """The text ``--explain`` prints: a header, the first ``shown`` runs, two summary lines."""
    dense, hold = summary["dense_tokens"], summary["max_hold_passes"]
    runs = groups(records)
    rows = []
    for run in runs[:shown]:
        passes = f"{run.first}" if run.first == run.last else f"{run.first}-{run.last}"
        n = run.last - run.first + 1
        verb = "-" if run.reason in _NEVER else "hold" if run.reason is Reason.HOLD else "FIRE"
        label = f"{verb} {run.reason.name}" + (f" x{n}" if n > 1 else "")
        rows.append((passes, label, _why(run, dense, hold)))
    width = max((len(p) for p, _, _ in rows), default=4)
    label_w = max((len(lb) for _, lb, _ in rows), default=4)
    lines = [
        f"The gate, pass by pass (dense_tokens {dense}, max_hold_passes {hold}):",
        *(f"  pass {p.ljust(width)}  {lb.ljust(label_w)}  {why}" for p, lb, why in rows),
    ]
    if len(runs) > shown:
        rest = sum(r.last - r.first + 1 for r in runs[shown:])
        lines.append(f"  ... {len(runs) - shown} more runs of decisions ({rest} passes)")
    reasons = summary["reasons"]
    fired = ", ".join(f"{k} {v}" for k, v in sorted(reasons.items()) if k not in ("HOLD", "EMPTY"))
    lines += [
        f"Held {reasons.get('HOLD', 0)} passes decode-only (HOLD); fired {fired or 'never'}.",
        f"{summary['finished']} / {summary['requests']} requests finished in "
        f"{summary['passes']} passes: {summary['decode_only_passes']} decode-only, "
        f"{summary['prefill_passes']} with prefill (mean fill {summary['mean_prefill_fill']:.2f}),",
        f"{summary['underfull_interrupting']} of them under-full while decodes ran; "
        f"{reasons.get('EMPTY', 0)} passes had nothing waiting (EMPTY).",
        "Without --explain: the full table. The rules: docs/GATE.md.",
    ]
    return "\n".join(lines)
