"""The proof report: one row per obligation (mypyvy-style), traces pass by pass."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from densegate.proofs.results import MutantResult, ObligationResult, Trace
from densegate.proofs.vacuity import ONE_COMMAND, TOTALITY, sanity_passed

__all__ = ["print_report", "render_trace", "to_json"]

_STYLE = {"proved": "green", "refuted": "green", "failed": "red", "survived": "red"}


def _display(trace: Trace | None) -> list[dict[str, Any]] | None:
    """The rows as the report prints them, where that differs from the rows (else None)."""
    if trace is None or trace.display is None or trace.display == trace.rows:
        return None
    return trace.display


def _mutant_json(m: MutantResult) -> dict[str, Any]:
    return {
        "name": m.name,
        "description": m.description,
        "status": m.status,
        "seconds": round(m.seconds, 4),
        "params": m.trace.params if m.trace else None,
        "trace": m.trace.rows if m.trace else [],
        "display": _display(m.trace),
        "reason": m.reason,
    }


def _sanity_json(r: ObligationResult) -> dict[str, Any]:
    """Non-vacuity as JSON (``densegate.proofs.vacuity``): None where the check was not run
    (a code obligation has its precondition and configuration coverage instead)."""
    by = {c.name: c for c in r.sanity}

    def passed(name: str) -> bool | None:
        c = by.get(name)
        return None if c is None else sanity_passed(c)

    triggers = [c for c in r.sanity if c.name.startswith("trigger")]
    return {
        "initial_state_satisfiable": passed("initial state"),
        "premise_satisfiable": passed("premise"),
        "total": passed(TOTALITY),
        "exactly_one_command": passed(ONE_COMMAND),
        "reach_depth": r.reach_depth,
        "triggers": [
            {
                "condition": c.condition,
                "reachable": c.status == "sat",
                "at_pass": c.at_pass,
                "within": r.reach_depth,
                "status": c.status,
            }
            for c in triggers
        ],
        "sanity_checks": [
            {"name": c.name, "status": c.status, "reason": c.reason} for c in r.sanity
        ],
        "precondition_satisfiable": r.precondition_satisfiable,
        "coverage": [
            {"check": c.check, "class": c.name, "satisfiable": c.satisfiable, "reached": c.reached}
            for c in r.coverage
        ],
    }


def _sanity_cell(r: ObligationResult) -> str:
    """One table cell: a model obligation's initial state, totality, exactly one command and
    triggers reached; a code obligation's precondition and configuration classes."""
    s = _sanity_json(r)
    if r.about == "code":
        if s["precondition_satisfiable"] is None:
            return "-"
        cov = s["coverage"]
        hit = sum(c["satisfiable"] and c["reached"] for c in cov)
        pre = "precondition sat" if s["precondition_satisfiable"] else "[red]precondition UNSAT[/]"
        classes = f"{hit}/{len(cov)} classes reached"
        return f"{pre}, {classes if hit == len(cov) else f'[red]{classes}[/]'}"
    if s["premise_satisfiable"] is None:
        return "-"
    trig = s["triggers"]
    parts = [
        "init sat" if s["initial_state_satisfiable"] else "[red]init UNSAT[/]",
        "total" if s["total"] else "[red]NOT total[/]",
        "1 cmd" if s["exactly_one_command"] else "[red]not 1 cmd[/]",
        f"{sum(t['reachable'] for t in trig)}/{len(trig)} triggers reached"
        if trig
        else "unconditional",
    ]
    if trig and not all(t["reachable"] for t in trig):
        parts[3] = f"[red]{parts[3]}[/]"
    return ", ".join(parts)


def to_json(results: list[ObligationResult], seconds: float) -> dict[str, Any]:
    """One object: per obligation its level, id, statement, status, what the proof covers
    (``scope_statement``), its checks and its mutants (status, trace as rows and, where
    the report prints them otherwise, as printed: ``display``); the run's seconds."""
    return {
        "obligations": [
            {
                "id": r.id,
                "level": r.level,
                "about": r.about,
                "statement": r.statement,
                "status": r.status,
                "seconds": round(r.seconds, 4),
                "parametric": r.parametric,
                "bound": r.bound,
                "scope": r.scope,
                "scope_statement": r.scope_statement,
                "checks": [
                    {"name": c.name, "status": c.status, "reason": c.reason} for c in r.checks
                ],
                "counterexample": (
                    {"params": r.trace.params, "trace": r.trace.rows} if r.trace else None
                ),
                "mutants": [_mutant_json(m) for m in r.mutants],
                **_sanity_json(r),
            }
            for r in results
        ],
        "seconds": round(seconds, 4),
    }


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return ",".join(v) or "(none)"
    return str(v)


def render_trace(trace: Trace) -> Table:
    """Parameters first, then one row per pass; the last pass breaks the property."""
    params = "  ".join(f"{k}={_fmt(v)}" for k, v in trace.params.items())
    rows = trace.display if trace.display is not None else trace.rows
    cols: list[str] = []
    for row in rows:
        cols.extend(k for k in row if k not in cols)
    table = Table(title=f"parameters: {params}", title_justify="left", show_edge=False)
    widths = {c: max([len(c)] + [len(_fmt(row.get(c))) for row in rows]) for c in cols}
    for c in cols:
        if c == "pass":
            table.add_column(c, justify="right", no_wrap=True, min_width=widths[c])
        else:
            table.add_column(c, justify="left", no_wrap=True, min_width=widths[c])
    for row in rows:
        cells = [_fmt(row.get(c)) for c in cols]
        if "fire" in row and row["fire"] is not None:
            cells[cols.index("fire")] = "FIRE" if row["fire"] else "HOLD"
        table.add_row(*cells)
    return table


def _print_wide(console: Console, table: Table) -> None:
    """Traces are read across: never squeeze a row to the terminal's width. Rich caps a
    print's width at its console's, so a trace wider than that (a scheduler trace of 8 or
    12 requests: R4's) is printed by a console of its own width, to the same file."""
    need = sum(c.min_width or 0 for c in table.columns) + 3 * len(table.columns)
    if need > console.width:
        console = Console(
            file=console.file, width=need, force_terminal=console.is_terminal,
            no_color=console.no_color,
        )  # fmt: skip
    console.print(table, crop=False)


def print_report(
    results: list[ObligationResult], seconds: float, console: Console, traces: bool
) -> None:
    table = Table(title="densegate prove", title_justify="left")
    cols = ("id", "level", "about", "statement", "result", "seconds", "scope", "mutants")
    for col in (*cols, "non-vacuity"):
        table.add_column(col, overflow="fold")
    for r in results:
        refuted = sum(m.status == "refuted" for m in r.mutants)
        style = _STYLE.get(r.status, "yellow")
        mstyle = "green" if refuted == len(r.mutants) else "red"
        table.add_row(
            r.id,
            r.level,
            r.about,
            r.statement,
            f"[{style}]{r.status}[/]",
            f"{r.seconds:.3f}",
            r.scope_statement,
            f"[{mstyle}]{refuted}/{len(r.mutants)} refuted[/]",
            _sanity_cell(r),
        )
    console.print(table)
    for r in results:
        for c in r.checks:
            if c.status != "unsat":
                console.print(f"[red]{r.id} {c.name}: {c.status}[/] {c.reason}")
        for c in r.sanity:
            if not sanity_passed(c):
                console.print(f"[red]{r.id} {c.name}: {c.status}[/] {c.reason}")
        for cov in r.coverage:
            if not cov.ok:
                where = f"{r.id} {cov.check}: configuration class {cov.name}"
                console.print(f"[red]{where}[/] {cov.why}")
        if r.trace is not None:
            console.print(f"[red]{r.id} counterexample[/]: {r.statement}")
            _print_wide(console, render_trace(r.trace))
        for m in r.mutants:
            bad = m.status != "refuted"
            if bad:
                console.print(f"[red]{r.id} mutant {m.name} {m.status}[/]: {m.reason}")
            if m.trace is not None and (traces or bad):
                console.print(f"\n[bold]{r.id} refutes {m.name}[/]: {m.description}")
                _print_wide(console, render_trace(m.trace))
    ok = all(r.ok for r in results)
    verdict = "[green]all proved, all mutants refuted[/]" if ok else "[red]NOT all proved[/]"
    console.print(f"{verdict} in {seconds:.2f} s")
