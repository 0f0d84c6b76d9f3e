"""The docs' generated tables: what each generator prints for a block, and where it comes from.

A doc carries a generated block as ``<!-- densegate-table: NAME ARGS -->`` ... ``<!--
/densegate-table -->`` directly under a line naming where it comes from
(``densegate.lab.docs`` checks both). Every generator here is deterministic: it reads a
table in the source (``spec/properties.py``, the proof registry) or runs a ``densegate``
command whose figures are pass counts or modeled times, never wall-clock ones. A command runs
in this process, through the command line's own parser (a doc's flags are the command's),
once per process however many blocks show it; its stderr (progress) is dropped.

Wall-clock rows are left out of a block (the bench's ``scheduler us per pass``, ``wall:``).
Measured tables are never generated; the docs say where and when they were measured.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NoReturn

from densegate.impl.settings import table as settings_table

__all__ = ["GENERATORS", "SECONDS", "Generator", "GeneratorError", "cli_output", "parse_tables"]


class GeneratorError(Exception):
    """A block's generator could not run: bad arguments, or its command failed."""


@dataclass(frozen=True)
class Generator:
    """A block kind: what the line above must name (``sources``) and the block (``render``)."""

    name: str
    about: str
    sources: Callable[[list[str]], list[str]]
    render: Callable[[list[str]], str]


# -- running a command once ------------------------------------------------------------
_OUTPUT: dict[tuple[str, ...], str] = {}
SECONDS: dict[str, float] = {}
"""Wall-clock seconds each command took when it ran in this process (printed, never judged)."""
MEASURED_LINES = re.compile(r"^(\| scheduler us per pass \||wall: )")
"""Wall-clock lines of the benchmark's text, left out of every block."""


def cli_output(argv: Sequence[str], ok: tuple[int, ...] = (0,)) -> str:
    """What ``densegate ARGV`` prints on stdout, run once per process and kept."""
    key = tuple(argv)
    if key not in _OUTPUT:
        from densegate.cli.main import main

        out, err, t0 = io.StringIO(), io.StringIO(), time.perf_counter()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = main(list(argv))
        except SystemExit as e:  # argparse: a flag the command does not know
            code = e.code if isinstance(e.code, int) else 2
        if code not in ok:
            tail = err.getvalue().strip().splitlines()[-3:]
            raise GeneratorError(f"densegate {' '.join(argv)} exited {code}: {' / '.join(tail)}")
        _OUTPUT[key] = out.getvalue()
        SECONDS[" ".join(("densegate", *argv))] = time.perf_counter() - t0
    return _OUTPUT[key]


def _without_measured(lines: list[str]) -> list[str]:
    return [ln for ln in lines if not MEASURED_LINES.match(ln)]


def _fenced_preamble(lines: list[str]) -> list[str]:
    """The lines before the first ``###`` heading (where the figures come from) as a text
    block, so Markdown keeps their line breaks; the tables after it as they are."""
    cut = next((i for i, ln in enumerate(lines) if ln.startswith("### ")), len(lines))
    head = [ln for ln in lines[:cut] if ln.strip()]
    return ["```text", *head, "```", "", *lines[cut:]] if head else lines[cut:]


def _strip(lines: list[str]) -> str:
    while lines and not lines[0].strip():
        lines = lines[1:]
    while lines and not lines[-1].strip():
        lines = lines[:-1]
    return "\n".join(lines)


# -- reading the command's own Markdown tables back -------------------------------------
Table = tuple[list[str], dict[str, list[str]]]
"""A table's column names (after the label column) and its rows: label -> cells."""


def parse_tables(text: str) -> dict[str, Table]:
    """Every ``### heading`` of a command's text output with the table under it."""
    out: dict[str, Table] = {}
    heading: str | None = None
    for ln in text.splitlines():
        if ln.startswith("### "):
            heading = ln[4:]
            out[heading] = ([], {})
        elif heading is not None and ln.startswith("|") and not ln.startswith("|---"):
            cells = [c.strip() for c in ln.strip().strip("|").split("|")]
            cols, rows = out[heading]
            if not cols:
                cols.extend(cells[1:])
            else:
                rows[cells[0]] = cells[1:]
    return out


def _find(tables: dict[str, Table], prefix: str) -> Table:
    for heading, table in tables.items():
        if heading.startswith(prefix):
            return table
    raise GeneratorError(f"no table headed {prefix!r} in the command's output")


def _cell(table: Table, row: str, col: str) -> str:
    cols, rows = table
    if row not in rows or col not in cols:
        raise GeneratorError(f"no cell ({row!r}, {col!r}) in the command's table")
    return rows[row][cols.index(col)]


def _md(header: Sequence[str], rows: Sequence[Sequence[str]], right: int = 0) -> str:
    """A Markdown table; the last ``right`` columns right-aligned."""
    esc = [[c.replace("|", "\\|") for c in r] for r in rows]
    align = ["---"] * (len(header) - right) + ["---:"] * right
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in esc]
    return "\n".join(lines)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise GeneratorError(message)


def _opts(args: list[str], *flags: str) -> tuple[dict[str, str], list[str]]:
    """A generator's own ``--flag VALUE`` options taken out of ``args``; the rest kept."""
    p = _Parser(add_help=False)
    for f in flags:
        p.add_argument(f, required=True)
    ns, rest = p.parse_known_args(args)
    return {k: str(v) for k, v in vars(ns).items()}, rest


def _cmd(*argv: str) -> str:
    return " ".join(("densegate", *argv))


def _bench_passes(args: list[str]) -> str:
    """The pass-count tables and checks ``densegate bench ARGS`` prints first."""
    lines = cli_output(["bench", *args]).splitlines()
    end = next((i for i, ln in enumerate(lines) if ln.startswith("wall: ")), len(lines))
    return _strip(_without_measured(lines[:end]))


def _bench_modeled(args: list[str]) -> str:
    """The modeled tables ``densegate bench --cost PROFILE ...`` prints after the pass counts."""
    lines = cli_output(["bench", *args]).splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith("modeled times")), None)
    if start is None:
        raise GeneratorError(f"densegate bench {' '.join(args)} printed no modeled tables")
    return _strip(_fenced_preamble(_without_measured(lines[start:])))


def _bench_dp(args: list[str]) -> str:
    """The modeled data-parallel tables ``densegate bench --cost PROFILE --dp N ...`` prints."""
    if "--dp" not in args:
        raise GeneratorError("bench-dp needs --dp N")
    return _strip(_fenced_preamble(cli_output(["bench", *args]).splitlines()))


def _headline_one_rank(args: list[str]) -> list[str]:
    cost, _ = _opts(args, "--cost")
    return ["bench", "--cost", cost["cost"]]


def _headline(args: list[str]) -> str:
    """The front page's figure: per workload, the data-parallel run's mixed ticks and modeled
    tokens/s ratios (``densegate bench ARGS``, with ``--dp``) beside one rank's
    (``densegate bench --cost PROFILE``, its ``densegate`` over ``vllm-v1`` column)."""
    from densegate.lab.bench import WORKLOADS

    dp = parse_tables(cli_output(["bench", *args]))
    one = parse_tables(cli_output(_headline_one_rank(args)))
    ratio = "modeled: densegate tokens/s / this column's"
    rows = []
    for w in WORKLOADS:
        t = _find(dp, f"{w} (modeled, dp=")
        mixed = "mixed ticks (a rank prefills, another only decodes)"
        cols = t[0]
        off = "uncoordinated gate off"
        ttft = [_cell(t, "modeled TTFT ms p50 / p99 / max", c).split(" / ")[1] for c in cols]
        one_rank = _cell(_find(one, f"{w} (modeled, one rank)"), ratio, "vllm-v1")
        rows.append([
            f"{w} ({_cell(t, 'requests finished', off).split(' / ')[1]})",
            " / ".join(_cell(t, mixed, c) for c in cols),
            _cell(t, "modeled: tokens/s / gate off's", cols[0]),
            _cell(t, "modeled: tokens/s / gate off's", cols[1]),
            f"{ttft[0]} / {ttft[2]}",
            one_rank,
        ])  # fmt: skip
    header = [
        "workload (requests, all ranks)",
        "mixed ticks: aligned / local gates / gate off",
        "modeled tokens/s: aligned ÷ gate off",
        "modeled tokens/s: local gates ÷ gate off",
        "modeled TTFT p99 ms: aligned / gate off",
        "one rank, modeled tokens/s: densegate ÷ gate off",
    ]
    return _md(header, rows, right=5)


def _stall_sweep(args: list[str]) -> tuple[list[str], list[str]]:
    opts, base = _opts(args, "--sweep")
    sweep = [s for s in opts["sweep"].split(",") if s]
    if not sweep or not all(s.isdigit() and int(s) > 0 for s in sweep):
        raise GeneratorError(f"--sweep wants S values > 0, comma-separated; got {opts['sweep']}")
    return sweep, base


def _stall_argv(base: list[str], s: str) -> list[str]:
    return ["bench", *base, "--policies", "densegate-stall", "--stall-passes", s]


def _bench_stall(args: list[str]) -> str:
    """The STALL valve at several S beside the valve off and the gate off, one row per
    (workload, policy): pass figures, and modeled ones when the base args give ``--cost``."""
    from densegate.lab.bench import BENCH_STALL_PASSES, WORKLOADS

    sweep, base = _stall_sweep(args)
    ref = parse_tables(cli_output(["bench", *base]))

    # The base run's own densegate-stall column is S = BENCH_STALL_PASSES unless it sets S.
    own = None if "--stall-passes" in base else str(BENCH_STALL_PASSES)
    runs = {s: ref if s == own else parse_tables(cli_output(_stall_argv(base, s))) for s in sweep}
    modeled = "--cost" in base
    picks = [
        "TTFT passes p50 / p99 / max",
        "mean prefill fill (of dense_tokens)",
        "mixed passes (prefill beside decode)",
        "prefill passes under 1/4 of the token budget (% of prefill passes)",
        "decode tokens in decode-only (graph-eligible) passes",
        "output tokens per pass",
    ]
    rows = []
    for w in WORKLOADS:
        passes_of = {"ref": _find(ref, f"{w}: ")} | {s: _find(runs[s], f"{w}: ") for s in sweep}
        model_of = (
            {"ref": _find(ref, f"{w} (modeled, one rank)")}
            | {s: _find(runs[s], f"{w} (modeled, one rank)") for s in sweep}
            if modeled
            else {}
        )
        cols = [("ref", "densegate", "densegate (valve off)")]
        cols += [(s, "densegate-stall", f"densegate-stall S={s}") for s in sweep]
        cols += [("ref", "vllm-v1", "vllm-v1 (gate off)")]
        for key, col, label in cols:
            row = [w, label] + [_cell(passes_of[key], r, col) for r in picks]
            if modeled:
                m = model_of[key]
                ttft = _cell(m, "modeled TTFT ms p50 / p99 / max", col).split(" / ")
                row += [_cell(m, "modeled output tokens/s", col), " / ".join(ttft[1:])]
            rows.append(row)
    header = ["workload", "policy", "TTFT passes p50 / p99 / max", "mean fill", "mixed passes",
              "prefill passes < 1/4 budget", "decode tokens in decode-only passes",
              "output tokens / pass"]  # fmt: skip
    if modeled:
        header += ["modeled output tokens/s", "modeled TTFT ms p99 / max"]
    return _md(header, rows, right=len(header) - 2)


def _tune(args: list[str]) -> str:
    """What ``densegate tune ARGS`` prints (needs a profile: every time in it is modeled)."""
    return _strip(_fenced_preamble(cli_output(["tune", *args]).splitlines()))


def _conform(args: list[str]) -> str:
    """The verdict of every property per policy, or of one target, ``densegate conform ARGS
    --json`` (derandomized; exit status 1 when a policy violates one, as the shipped ones do)."""
    import json

    doc = json.loads(cli_output(["conform", *args, "--json"], ok=(0, 1)))
    pols = doc.get("policies", [doc])  # one target: its report, with the statements
    props, stated = {p["id"]: p for p in pols[0]["properties"]}, ["statement"] * (len(pols) == 1)
    verdict = {(q["target"], p["id"]): p["status"] for q in pols for p in q["properties"]}
    rows = []
    for pid, p in props.items():
        label = p["title"] if pid == "agreement" else f"{pid} {p['title']}"
        cells = [c if (c := verdict[(q["target"], pid)]) == "held" else c.upper() for q in pols]
        rows.append([label, *(p[k] for k in stated), *cells])
    return _md(["property", *stated, *(q["target"] for q in pols)], rows)


def _ids(args: list[str]) -> list[str]:
    """``P1-P7 agreement`` -> ``P1 .. P7, agreement``."""
    out = []
    for a in args:
        m = re.fullmatch(r"([A-Z])(\d+)-\1(\d+)", a)
        out += [f"{m[1]}{i}" for i in range(int(m[2]), int(m[3]) + 1)] if m else [a]
    return out


def _properties(args: list[str]) -> str:
    """Rows of ``spec/properties.py``: id, title, statement (``P1-P7``, ``D1-D7``, ids)."""
    from densegate.spec.properties import by_id

    try:
        props = [by_id(i) for i in _ids(args)]
    except KeyError as e:
        raise GeneratorError(str(e.args[0])) from None
    return _md(["id", "property", "statement"], [[p.id, p.title, p.statement] for p in props])


def _scope(ob: object) -> str:
    """As ``densegate prove`` reports it: all parameters or the bound, and what is fixed."""
    bound, scope = getattr(ob, "bound", None), getattr(ob, "scope", None)
    base = "all parameters" if bound is None else f"bounded: {bound}"
    if scope and str(getattr(ob, "level", "")).startswith("refinement"):
        return f"{base}; {scope}"
    return f"{base}; fixed: {scope}" if scope else base


def _proofs(args: list[str]) -> str:
    """Every obligation of the given levels (all without args) from the proof registry:
    id, level, statement, scope and how many broken variants it must refute."""
    from densegate.proofs import registry

    try:
        obs = registry.obligations(args or None)
    except ValueError as e:
        raise GeneratorError(str(e)) from None
    rows = [
        [str(o.id), str(getattr(o, "level", "")), str(getattr(o, "statement", "")), _scope(o),
         str(len(getattr(o, "mutants", ())))]
        for o in obs
    ]  # fmt: skip
    return _md(["id", "level", "statement", "scope", "mutants"], rows, right=1)


def _proof_levels(args: list[str]) -> str:
    """The proof registry's levels: name (``densegate prove --level NAME``), what each
    proves, how many obligations it holds and whether the default run proves it."""
    from densegate.proofs import registry

    if args:
        raise GeneratorError("proof-levels takes no arguments")
    rows = []
    for lv in registry.LEVELS:
        ids = list(getattr(lv, "ids", ()))
        default = "yes" if lv.default else "no (`--all`)"
        rows.append([f"`{lv.name}`", str(lv.summary), default, str(len(ids))])
    return _md(["level", "what it proves", "default run", "obligations"], rows, right=1)


def _bench_src(a: list[str]) -> list[str]:
    return [_cmd("bench", *a)]


GENERATORS: dict[str, Generator] = {
    g.name: g
    for g in (
        Generator("bench-passes", "pass counts of `densegate bench ARGS`", _bench_src,
                  _bench_passes),
        Generator("bench-modeled", "modeled tables of `densegate bench --cost P ARGS`",
                  _bench_src, _bench_modeled),
        Generator("bench-dp", "modeled DP tables of `densegate bench --cost P --dp N ARGS`",
                  _bench_src, _bench_dp),
        Generator("headline", "the front page's figure: DP ratios beside one rank's",
                  lambda a: [_cmd("bench", *a), _cmd(*_headline_one_rank(a))], _headline),
        Generator("bench-stall", "the STALL valve swept: `--sweep S,S,.. ARGS`",
                  lambda a: [_cmd("bench", *_stall_sweep(a)[1]),
                             "--policies densegate-stall --stall-passes S",
                             "S = " + ", ".join(_stall_sweep(a)[0])],
                  _bench_stall),
        Generator("run", "`densegate run ARGS` and what it prints (with --explain: no times)",
                  lambda a: [_cmd("run", *a)],
                  lambda a: f"```text\n$ {_cmd('run', *a)}\n{cli_output(['run', *a])}```"),
        Generator("tune", "what `densegate tune ARGS` prints", lambda a: [_cmd("tune", *a)],
                  _tune),
        Generator("conform", "verdicts of `densegate conform ARGS`",
                  lambda a: [_cmd("conform", *a)], _conform),
        Generator("properties", "rows of spec/properties.py", lambda a: ["spec/properties.py"],
                  _properties),
        Generator("proofs", "obligations of the proof registry, by level",
                  lambda a: ["proofs/registry.py"], _proofs),
        Generator("proof-levels", "the proof registry's levels",
                  lambda a: ["proofs/registry.py"], _proof_levels),
        Generator("settings", "the gate settings declared in impl/settings.py",
                  lambda a: ["impl/settings.py"], lambda a: _md(*settings_table(a))),
    )
}  # fmt: skip
"""Every block kind a doc may carry, by name."""
