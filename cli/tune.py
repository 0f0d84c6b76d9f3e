"""``densegate tune``: propose ``dense_tokens`` and ``max_hold_passes`` for a workload.

The choice is ``densegate.lab.cost.tune``'s; this module replays each
candidate with the benchmark's own replay (``run_policy``, null runner, priced
by the profile) and prints one table per workload.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from densegate.cli.bench_names import WORKLOAD_NAMES
from densegate.cli.flag_types import count, positive_float
from densegate.cli.options import MAX_REQUESTS, add_alias, add_quiet
from densegate.impl.settings import flagged, setting

HELP = "propose dense_tokens (B) and max_hold_passes (K) for a workload and a TTFT target"


def _ints(values: list[str] | None, flag: str) -> list[int] | None:
    """``--x 1 2`` and ``--x 1,2`` both work; a value that is not an int is named."""
    if values is None:
        return None
    out: list[int] = []
    for v in values:
        for part in v.split(","):
            if not part:
                continue
            try:
                out.append(int(part))
            except ValueError:
                raise ValueError(f"{flag}: {part!r} is not an int") from None
    return out


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--cost",
        required=True,
        metavar="PROFILE",
        help="price every pass with a profile (a `densegate profile` JSON, or roofline:H100-SXM / "
        "roofline:H200)",
    )
    p.add_argument(
        "--workload",
        nargs="+",
        metavar="NAME",
        help=f"workloads, space- or comma-separated (default all: {', '.join(WORKLOAD_NAMES)})",
    )
    add_alias(p, "--workloads", "workload", nargs="+")
    target = p.add_mutually_exclusive_group()
    target.add_argument(
        "--ttft-ms",
        type=positive_float,
        metavar="TARGET",
        help="TTFT target in modeled milliseconds",
    )
    target.add_argument(
        "--ttft-passes", type=positive_float, metavar="TARGET", help="TTFT target in passes"
    )
    p.add_argument(
        "--dense-tokens",
        nargs="+",
        metavar="B",
        help="dense_tokens candidates, space- or comma-separated (default: 1/4, 1/2, 3/4 of "
        "the token budget and the config's own)",
    )
    p.add_argument(
        "--max-hold-passes",
        dest="max_hold",
        nargs="+",
        metavar="K",
        help="max_hold_passes candidates, space- or comma-separated (default 2 4 8 16 32)",
    )
    add_alias(p, "--max-hold", "max_hold", nargs="+")
    p.add_argument(
        "--requests",
        type=count(1, MAX_REQUESTS),
        metavar="N",
        help=f"requests per workload (default: each workload's size; at most {MAX_REQUESTS})",
    )
    p.add_argument("--seed", type=int, default=0, help="workload seed (default 0)")
    p.add_argument(
        "--dp",
        type=count(2, 64),
        default=None,
        metavar="N",
        help="tune the aligned gate at N data-parallel ranks (in-process, modeled): K, "
        "--align-ticks, --pace-tokens and --surge-tokens per workload against the engines' "
        "own DP rules; --requests is per rank "
        f"(default {DP_REQUESTS})",
    )
    for s in flagged():  # the gate settings with a flag: their candidates, each its range
        p.add_argument(
            s.flag,
            dest=s.name,
            nargs="+",
            metavar=s.metavar,
            help=f"with --dp: {s.name} candidates ({s.rule}), 'off' or "
            f"an int >= {s.low} (default {CANDIDATES.get(s.name, 'off')})",
        )
    p.add_argument(
        "--load",
        type=positive_float,
        default=None,
        metavar="L",
        help="with --dp: arrivals at L times the modeled capacity, on the seconds clock (as "
        "`bench --load`; default 0.6)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_quiet(p)


DP_REQUESTS = 30
"""Requests per rank for ``--dp`` by default: what the load table of docs/BENCHMARKS.md uses."""


CANDIDATES = {
    "align_ticks": "off 0 2",
    "pace_tokens": "off and the profile's ridge",
    "surge_tokens": "off and the profile's surge ridge, beside a pace cap",
}
"""The candidates ``tune --dp`` tries for a setting not given (``densegate.lab.bench.dp_tune``)."""


def _candidates(values: list[str] | None, name: str) -> list[int | None] | None:
    """A flagged setting's candidates: 'off' (None) or an int in its declared range."""
    if values is None:
        return None
    flag, low = setting(name).flag, setting(name).low or 0
    out: list[int | None] = []
    for v in (x for raw in values for x in raw.split(",") if x):
        if v == "off":
            out.append(None)
        elif v.isdigit() and int(v) >= low:
            out.append(int(v))
        else:
            raise ValueError(f"{flag}: each value must be 'off' or an int >= {low}, got {v!r}")
    if not out:
        raise ValueError(f"{flag}: give at least one value")
    return out


def _aligns(values: list[str] | None) -> list[int | None] | None:
    return _candidates(values, "align_ticks")


def _paces(values: list[str] | None) -> list[int | None] | None:
    return _candidates(values, "pace_tokens")


def _dp_main(args: argparse.Namespace, profile: Any, names: list[str], holds: list[int]) -> int:
    """``tune --dp N``: per workload, the (K, align_ticks, pace_tokens, surge_tokens)
    proposal against the peers."""
    from densegate.lab.bench import WORKLOADS, bench_config
    from densegate.lab.bench.dp_seconds import arrival_rate, capacity_tokens_per_s, seconds_trace
    from densegate.lab.bench.dp_side import DEFAULT_LOAD
    from densegate.lab.bench.dp_tune import DEFAULT_ALIGNS, format_dp_tuning, tune_dp
    from densegate.lab.cost.ridge import regime

    aligns = _aligns(args.align_ticks) or list(DEFAULT_ALIGNS)
    base = bench_config()
    ridges = regime(profile.model, base.max_num_seqs, budget=base.dense)
    paces = _paces(args.pace_tokens) or [None, ridges.pace_tokens]
    surges = _candidates(args.surge_tokens, "surge_tokens") or [None, ridges.surge_tokens]
    progress = None if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    load = DEFAULT_LOAD if args.load is None else args.load
    out = {}
    for name in names:
        w, n = WORKLOADS[name], args.requests or DP_REQUESTS
        probe = seconds_trace(w, args.seed, args.dp, n, 1.0)
        cap = capacity_tokens_per_s(probe, base, args.dp, profile.model, args.seed)
        trace = seconds_trace(w, args.seed, args.dp, n, arrival_rate(probe, load, cap))
        out[name] = tune_dp(trace, base, args.dp, profile.model, holds, aligns, args.seed,
                            progress, paces, clock="seconds", surges=surges)  # fmt: skip
    if args.json:
        print(json.dumps({"profile": profile.describe(), "dp": args.dp, "load": load,
                          "clock": "seconds", "results": out}))  # fmt: skip
        return 0
    load_words = f"{load:g}x capacity (seconds clock)"
    lines = [
        f"aligned gate at dp={args.dp}, load {load_words} (modeled; proposed: the highest tokens/s "
        "among the candidates whose TTFT p99 is at most the best peer's)"
    ]
    lines += [f"  {x}" for x in profile.describe()]
    for name, t in out.items():
        lines += ["", *format_dp_tuning(name, t)]
    print("\n".join(lines))
    return 0


def bench_replay(workload: str, seed: int, requests: int | None, model: Any) -> Any:
    """A ``Replay`` over one bench workload: the bench's config and ``run_policy``."""
    from densegate.lab.bench import BENCH_POLICIES, WORKLOADS, bench_config, run_policy
    from densegate.lab.bench.runs import TIME_BASELINE
    from densegate.lab.cost.tune import Candidate, Replayed

    base = bench_config()
    trace = WORKLOADS[workload].trace(seed, requests)

    def replay(c: Candidate | None) -> Replayed:
        if c is None:
            run = run_policy(trace, BENCH_POLICIES[TIME_BASELINE], base, seed, model)
        else:
            cfg = dataclasses.replace(
                base, dense_tokens=c.dense_tokens, max_hold_passes=c.max_hold_passes
            )
            run = run_policy(trace, BENCH_POLICIES["densegate"], cfg, seed, model)
        assert run.modeled is not None
        f = run.figures
        s6 = run.summary["s6"]  # with ``per_request``, which ``figures`` leaves out
        return Replayed(f["requests"], f["finished"], run.modeled, run.ttft_passes, s6)

    return replay


def _fmt_pcts(d: dict[str, float | None], *qs: str) -> str:
    from densegate.impl.figures import fmt

    return " / ".join(fmt(d.get(q)) for q in qs)


def format_tuning(t: Any) -> list[str]:
    """One workload's table: the gate-off row, then a row per candidate."""
    from densegate.impl.figures import fmt

    def ratio(x: float | None) -> str:
        return "-" if x is None else f"{x:.3f}"

    head = (
        "| B | K | modeled tokens/s | modeled tokens/s / gate off | modeled TTFT ms p50 / p99 / "
        "max | modeled ITL ms p50 / p99 | TTFT passes max | worst S6 bound passes (modeled ms) | "
        "worst wait / bound | meets target |"
    )
    lines = [head, "|---:|---:|" + "---:|" * 7 + "---|"]

    def cells(r: Any) -> str:
        c = r.candidate
        bk = "gate off | -" if c is None else f"{c.dense_tokens} | {c.max_hold_passes}"
        bound = "-" if r.bound_passes is None else f"{r.bound_passes} ({fmt(r.bound_ms)})"
        if c is None:
            meets = "baseline"
        else:
            meets = "yes" if r.meets else f"no: {r.why_not}"
            meets += " **<- proposed**" if r is t.proposal else ""
        return (
            f"| {bk} | {fmt(r.tokens_per_s)} | {ratio(r.ratio_to_gate_off)} | "
            f"{_fmt_pcts(r.ttft_ms, 'p50', 'p99', 'max')} | {_fmt_pcts(r.itl_ms, 'p50', 'p99')} | "
            f"{fmt(r.ttft_passes_max)} | {bound} | {ratio(r.worst_ratio)} | {meets} |"
        )

    lines += [cells(t.baseline), *(cells(r) for r in t.rows)]
    p = t.proposal
    lines.append("")
    if p is None:
        lines.append(f"proposal: none. {t.reason}")
    else:
        c = p.candidate
        lines.append(
            f"proposal: dense_tokens {c.dense_tokens}, max_hold_passes {c.max_hold_passes} "
            f"({fmt(p.tokens_per_s)} modeled tokens/s, {ratio(p.ratio_to_gate_off)} of gate off; "
            f"{t.reason})"
        )
    return lines


def _preamble(profile: Sequence[str], target: Any, base: Any) -> list[str]:
    from densegate.impl.traces.replay import S6_SCOPE

    meets = (
        "no TTFT target: every candidate whose requests all finish within their S6 bounds qualifies"
        if target is None
        else f"target TTFT <= {target}: a candidate meets it when its worst S6 bound and its "
        "worst observed TTFT (arrival to first token) are both within it, every request "
        "finishes and no head window exceeds its bound"
    )
    return [
        "densegate tune: every time below is modeled (each pass of a null-runner replay priced "
        "by the profile below; arrivals on the pass clock)",
        *(f"  {x}" for x in profile),
        f"scheduler (the bench's): token budget {base.max_num_batched_tokens}, max_num_seqs "
        f"{base.max_num_seqs}, block_size {base.block_size}, num_blocks {base.num_blocks}",
        "S6 bound: the per-request TTFT bound in passes from headship (proved for "
        f"{S6_SCOPE}, checked on this replay), worst over undisturbed head windows; its ms = "
        "bound x the longest modeled pass of the replay (modeled)",
        meets,
    ]


def main(args: argparse.Namespace) -> int:
    from densegate.lab.bench import WORKLOADS, bench_config
    from densegate.lab.cost.profile import Profile
    from densegate.lab.cost.tune import Target, check_workloads, default_grid, grid, tune

    def fail(msg: str) -> int:
        print(f"densegate tune: {msg}", file=sys.stderr)
        return 2

    try:
        profile = Profile.load(args.cost)
    except (ValueError, OSError) as e:
        return fail(f"--cost {args.cost}: {e}")
    base = bench_config()
    try:
        names = [n for v in args.workload or list(WORKLOADS) for n in v.split(",") if n]
        check_workloads(names, list(WORKLOADS))
        dense, holds = default_grid(base.max_num_batched_tokens, base.max_num_seqs)
        dense = _ints(args.dense_tokens, "--dense-tokens") or ([] if args.dense_tokens else dense)
        holds = _ints(args.max_hold, "--max-hold-passes") or ([] if args.max_hold else holds)
        dp_only = [s.flag for s in flagged() if getattr(args, s.name) is not None]
        dp_only += ["--load"] * (args.load is not None)
        if args.dp is None and dp_only:
            return fail(f"{dp_only[0]} is for --dp N")
        if args.dp is not None:
            if args.dense_tokens or args.ttft_ms is not None or args.ttft_passes is not None:
                return fail("--dp tunes K and --align-ticks against the peers' TTFT: not with "
                            "--dense-tokens, --ttft-ms or --ttft-passes")  # fmt: skip
            for s in flagged():  # a bad value fails here, before any run
                _candidates(getattr(args, s.name), s.name)
            paces = _paces(args.pace_tokens)
            hold_only = [f for f, v in (("--max-hold-passes", args.max_hold),
                                        ("--align-ticks", args.align_ticks)) if v]  # fmt: skip
            if paces is not None and None not in paces and hold_only:
                return fail(f"{hold_only[0]} sets hold-mode candidates, but --pace-tokens "
                            f"{' '.join(args.pace_tokens)} has none (the paced release never "
                            "holds): add 'off' to --pace-tokens")  # fmt: skip
            return _dp_main(args, profile, names, holds)
        candidates = grid(dense, holds, base.max_num_batched_tokens)
        target = None
        if args.ttft_ms is not None:
            target = Target("ms", args.ttft_ms)
        elif args.ttft_passes is not None:
            target = Target("passes", args.ttft_passes)
    except ValueError as e:
        return fail(str(e))
    progress: Callable[[str], None] | None = None
    if not args.quiet:
        progress = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    results = []
    for name in names:
        replay = bench_replay(name, args.seed, args.requests, profile.model)
        results.append(tune(name, candidates, replay, target, progress))
    if args.json:
        print(
            json.dumps({"profile": profile.describe(), "results": [t.to_json() for t in results]})
        )
        return 0
    lines = _preamble(profile.describe(), target, base)
    for t in results:
        n = t.baseline.requests
        lines += ["", f"### {t.workload} ({n} requests, seed {args.seed}; modeled)", ""]
        lines += format_tuning(t)
    print("\n".join(lines))
    return 0
