#!/usr/bin/env python3
"""SGLang's real ``PrefillDelayer``, densegate's and none, on the same loads, priced.

Each scenario routes its arrivals to DP ranks; each rank is a ``RankLoad``
(``tests/support/sglang_load.py``) that plays SGLang 0.5.23's per-pass protocol
through SGLang's real ``PrefillDelayerSinglePassExecutor`` (the executor per pass, the
chunk continuation and the first admissible request asking it, ``finalize`` joining
for a rank nobody asked on). Ranks run as threads in lockstep
(``tests/support/sglang_priced.py``); the arms differ only in the delayer behind the
executor: ``plain`` (none: SGLang without ``--enable-prefill-delayer``), ``sglang``
(SGLang's own ``PrefillDelayer``, its gather in process; defaults: no low watermark, no
queue trigger) and ``densegate`` (``DenseGatePrefillDelayer`` at its defaults: the paced
release at one pass's room, docs/SGLANG.md). Both
delayers get K = ``--prefill-delayer-max-delay-passes`` (SGLang's default, 30).

Scenarios: the failures of SGLang's public threads, rebuilt from their descriptions
(``lopsided``: one rank always prefillable, another never, cf. #29898 and #32880;
``all-stuck``: every rank prefillable with a batch that never grows, #29898;
``chunked``: chunked-prefill continuations on one rank, #32389 and #35017;
``oscillating``: a load around the threshold, #35241), densegate's bench workloads
(round-robin routed, SGLang's default ``--load-balance-method``), and the hard loads of
``densegate.lab.bench.hard_loads`` (``skewed``: ~75 % of arrivals pinned to rank 0, as a
request's ``data_parallel_rank`` can; ``oscillating-rate``, ``long-bursts``,
``kv-tight`` with a KV pool of ``kv_share`` of a full batch), at dp = 2, 4, 8. Every
pass is priced by the cost model (``densegate.lab.bench.step_price``; ``--profile``,
the H100-SXM roofline by default): the slowest rank's modeled pass for what it ran,
plus the collective; arrivals are in modeled seconds (a scenario's arrival pass is a
nominal step: the modeled pass of 256 prefill tokens) and reach their rank once the
modeled clock passes them. Per scenario and arm: passes, the longest run of held
passes, the share held, mixed passes (a rank prefills while another only decodes),
TTFT p99 in passes, passes where ranks' verdicts differed, requests finished, and the
modeled tokens/s, TTFT p99 and ITL p99 (ms).

Exit 1 when densegate holds K passes in a row, disagrees across ranks or leaves a
request unfinished (the bar CI holds today). Issue 32's goal
(``densegate.lab.bench.side_goal``) is printed per scenario as ``goal: met`` / ``goal:
missed`` lines, then one line per scenario (docs/SGLANG.md's table: its last column the arms
that beat densegate outright there, ``side_goal.dominators``) and the bars met;
``--goal`` also exits 1 on a missed one. Run from the repository root
in a venv with SGLang (``.ci/sglang_venv DIR``): ``python benchmarks/sglang_side_by_side.py``
(``--json`` for the figures as JSON, ``--requests N`` to shrink the bench workloads,
``--settings JSON`` to run the densegate arm with other ``DENSEGATE_SGLANG`` settings, e.g.
``'{"pace_tokens": null}'``: the hold mode; a bad one is refused in one line, exit 2).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from densegate.impl.figures import percentile  # noqa: E402
from densegate.impl.traces.workload import TraceRequest  # noqa: E402
from densegate.integrations.sglang.config import (  # noqa: E402
    ENV_VAR,
    PluginSettings,
    gate_config,
    settings_from_env,
)
from densegate.lab.bench.hard_loads import LOADS, hard_load  # noqa: E402
from densegate.lab.bench.side_goal import (  # noqa: E402
    Verdict,
    add_output_args,
    check_output_args,
    dominators,
    finish,
    goal,
    summary,
)
from densegate.lab.bench.step_price import (  # noqa: E402
    DEFAULT_PROFILE,
    StepClock,
    load_profile,
    nominal_step_us,
)
from densegate.lab.bench.workloads import WORKLOADS  # noqa: E402
from densegate.lab.docs import engine_diffs  # noqa: E402
from tests.support.sglang_load import Limits  # noqa: E402
from tests.support.sglang_priced import PricedRun, Routed, run_priced  # noqa: E402

K = 30
"""SGLang's default ``--prefill-delayer-max-delay-passes``."""
LIMITS = Limits()
POLICIES = ("plain", "sglang", "densegate")
DPS = (2, 4, 8)
BENCH_REQUESTS = 200
"""Requests per bench workload (the workloads' own sizes take minutes here)."""
HARD_REQUESTS_PER_RANK = 24
HARD_RATE_PER_RANK = 0.5
"""The hard loads: arrivals per nominal step per rank, on average."""
NOMINAL_TOKENS = 256
"""The nominal step: the modeled pass of this many prefill tokens (arrival passes -> us)."""
HARD = tuple(n for n in LOADS if n != "poisson")


@dataclass(frozen=True)
class Scenario:
    name: str
    dp: int
    ranks: list[list[TraceRequest]]
    """Each rank's arrivals (arrival passes: nominal steps), or none with ``routed``."""
    routed: tuple[Routed, ...] = ()
    """Arrivals in modeled us with their ranks (the hard loads)."""
    limits: Limits = LIMITS

    def requests(self, step_us: int) -> tuple[Routed, ...]:
        if self.routed:
            return self.routed
        return tuple(Routed(r.arrival_pass * step_us, r.prompt_len, r.output_len, rank)
                     for rank, reqs in enumerate(self.ranks) for r in reqs)  # fmt: skip


def _issue_scenarios() -> list[Scenario]:
    short = [TraceRequest(t, 64, 64) for t in range(300)]
    long_decodes = [TraceRequest(0, 32, 400) for _ in range(64)]
    lopsided = Scenario("lopsided", 2, [long_decodes[:8] + short, long_decodes])
    # Every rank near --max-running-requests with long decodes, a trickle that never fills.
    full = [TraceRequest(0, 32, 600) for _ in range(LIMITS.max_running_requests - 2)]
    trickle = [TraceRequest(2 * t, 48, 8) for t in range(200)]
    stuck = Scenario("all-stuck", 2, [full + trickle, full + trickle])
    longs = [TraceRequest(10 * t, 6000, 32) for t in range(40)]
    shorts = [TraceRequest(t, 96, 48) for t in range(0, 400, 2)]
    chunked = Scenario("chunked", 2, [longs + shorts[:20], shorts])
    osc = []
    for r in range(2):
        reqs = [TraceRequest(0, 32, 200) for _ in range(16)]
        for burst in range(60):  # bursts alternating just under and just over one pass's room
            tokens = LIMITS.chunked_prefill_size + (-256 if (burst + r) % 2 else 256)
            reqs += [TraceRequest(8 * burst, tokens // 8, 24) for _ in range(8)]
        osc.append(reqs)
    return [lopsided, stuck, chunked, Scenario("oscillating", 2, osc)]


def _bench_scenarios(requests: int | None, dps: list[int]) -> list[Scenario]:
    out = []
    for name, workload in WORKLOADS.items():
        trace = workload.trace(0, requests)
        for dp in dps:
            ranks: list[list[TraceRequest]] = [[] for _ in range(dp)]
            for i, req in enumerate(sorted(trace, key=lambda r: r.arrival_pass)):
                ranks[i % dp].append(req)
            out.append(Scenario(name, dp, ranks))
    return out


def _hard_scenarios(requests_per_rank: int | None, step_us: int, dps: list[int]) -> list[Scenario]:
    out = []
    for name in HARD:
        for dp in dps:
            load = hard_load(
                name, dp, requests_per_rank or HARD_REQUESTS_PER_RANK, HARD_RATE_PER_RANK,
                step_us, prompt_median=256, output_median=64, max_model_len=4096, seed=5,
            )  # fmt: skip
            routed = tuple(Routed(r.at_us, r.prompt_len, r.output_len,
                                  i % dp if r.rank is None else r.rank)
                           for i, r in enumerate(load.requests))  # fmt: skip
            limits = LIMITS
            if load.kv_share < 1.0:
                lens = [r.prompt_len + r.output_len for r in load.requests]
                pool = load.kv_share * LIMITS.max_running_requests * sum(lens) / len(lens)
                limits = replace(LIMITS, kv_tokens=max(round(pool), max(lens)))
            out.append(Scenario(name, dp, [], routed, limits))
    return out


def run(
    scenario: Scenario,
    policy: str,
    model: Any,
    profile: str,
    step_us: int,
    settings: PluginSettings | None = None,
) -> dict[str, Any]:
    """One scenario under one arm on the modeled clock; the figures of the run
    (``settings``: the densegate arm's, None for the plugin's defaults)."""
    reqs = scenario.requests(step_us)
    clock = StepClock(model, [r.at_us for r in reqs], profile)
    return _figures(scenario, policy, run_priced(scenario.dp, reqs, policy, scenario.limits,
                                                 clock, K, settings))  # fmt: skip


def _figures(scenario: Scenario, policy: str, run: PricedRun) -> dict[str, Any]:
    passes, loads = run.passes, run.loads
    n = len(passes[0])
    held = mixed = disagree = run_len = longest = 0
    for t in range(n):
        row = [p[t] for p in passes]
        verdicts = {p.allowed for p in row}
        disagree += len(verdicts) > 1
        hold = not row[0].allowed
        held += hold
        run_len = run_len + 1 if hold else 0
        longest = max(longest, run_len)
        prefills = any(p.prefill_reqs for p in row)
        decode_only = any(p.decode_seqs and not p.prefill_reqs for p in row)
        mixed += prefills and decode_only
    ttft = [float(r.passes[0] - at) for load in loads
            for r, at in zip(load.served, load.arrived_at, strict=True) if r.passes]  # fmt: skip
    priced = [(r.at, r.passes) for load in loads for r in load.served]
    return {
        "name": scenario.name,
        "dp": scenario.dp,
        "policy": policy,
        "passes": n,
        "max_consecutive_holds": longest,
        "held_share": round(held / n, 4) if n else 0.0,
        "mixed_passes": mixed,
        "ttft_passes_p99": percentile(ttft, 99) or 0.0,
        "disagreements": disagree,
        "finished": sum(load.finished for load in loads),
        "submitted": sum(load.submitted for load in loads),
        "max_delay_passes": K,
        "modeled": run.clock.figures(priced),
    }


def _as_goal(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows as the goal reads them: the scenario ``scenario``, the arm ``name``."""
    return [{**r, "scenario": r["name"], "name": r["policy"], "steps": r["passes"],
             "ttft_steps_p99": r["ttft_passes_p99"]} for r in rows]  # fmt: skip


def verdicts(rows: list[dict[str, Any]]) -> list[Verdict]:
    """Issue 32's goal, per scenario and bar."""
    return goal(_as_goal(rows), ttft_refs=["sglang"], held_ref="sglang")


def _table(rows: list[dict[str, Any]], profile: str) -> str:
    head = (
        "| scenario | dp | arm | passes | longest hold | held | mixed | TTFT p99 passes "
        "| disagree | finished | modeled tok/s | modeled TTFT p99 ms | modeled ITL p99 ms |"
    )
    lines = [f"modeled figures: profile {profile}", head, "|" + "---|" * 13]
    for r in rows:
        m = r["modeled"]
        lines.append(
            f"| {r['name']} | {r['dp']} | {r['policy']} | {r['passes']} | "
            f"{r['max_consecutive_holds']} | {100 * r['held_share']:.1f}% | {r['mixed_passes']} | "
            f"{r['ttft_passes_p99']:.0f} | {r['disagreements']} | "
            f"{r['finished']}/{r['submitted']} | "
            f"{m['tokens_per_s']:.0f} | {m['ttft_ms_p99']:.1f} | {m['itl_ms_p99']:.2f} |"
        )
    return "\n".join(lines)


def failures(rows: list[dict[str, Any]]) -> list[str]:
    """Today's bar: densegate never holds K passes in a row, never disagrees, finishes all."""
    return [
        f"{r['name']} dp={r['dp']}: longest hold {r['max_consecutive_holds']}, "
        f"{r['disagreements']} disagreements, {r['finished']}/{r['submitted']} finished"
        for r in rows
        if r["policy"] == "densegate"
        and (
            r["max_consecutive_holds"] > K - 1
            or r["disagreements"]
            or r["finished"] != r["submitted"]
        )
    ]


SCRIPT = "benchmarks/sglang_side_by_side.py"
"""This script as a doc's engine block names it."""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1] if __doc__ else None)
    add_output_args(ap, json_help="print the figures as JSON")
    ap.add_argument("--requests", type=int, default=BENCH_REQUESTS,
                    help="requests per bench workload")  # fmt: skip
    ap.add_argument("--requests-per-rank", type=int, default=HARD_REQUESTS_PER_RANK,
                    help="requests per rank of the hard loads")  # fmt: skip
    ap.add_argument("--profile", default=DEFAULT_PROFILE, help="the cost model's profile")
    ap.add_argument("--scenarios", default="issue,bench,hard",
                    help="groups (issue, bench, hard) or scenario names")  # fmt: skip
    ap.add_argument("--dps", default=",".join(map(str, DPS)), help="dp sizes (bench, hard)")
    ap.add_argument("--settings", default=None, metavar="JSON",
                    help=f"the densegate arm's {ENV_VAR} (default: unset, the plugin's "
                         "defaults), e.g. '{\"pace_tokens\": null}' for the hold mode")  # fmt: skip
    args = ap.parse_args(argv)
    check_output_args(ap, args)
    settings = None
    if args.settings is not None:
        try:
            settings = settings_from_env({ENV_VAR: args.settings})
            gate_config(settings, max_delay_passes=K, max_prefill_tokens=LIMITS.max_prefill_tokens,
                        chunked_prefill_size=LIMITS.chunked_prefill_size,
                        max_running_requests=LIMITS.max_running_requests)  # fmt: skip
        except ValueError as e:
            print(f"--settings: {e}", file=sys.stderr)
            return 2
    for flag, value in (("--requests", args.requests),
                        ("--requests-per-rank", args.requests_per_rank)):  # fmt: skip
        if value < 1:
            ap.error(f"{flag} must be >= 1, got {value}")
    try:
        prof = load_profile(args.profile)
        dps = [int(d) for d in args.dps.split(",")]
    except ValueError as e:
        ap.error(f"bad --profile or --dps: {e}")
    if any(d < 2 for d in dps):
        ap.error("--dps: DP sizes are >= 2")
    step_us = nominal_step_us(prof.model, NOMINAL_TOKENS)
    groups = {
        "issue": _issue_scenarios(),
        "bench": _bench_scenarios(args.requests, dps),
        "hard": _hard_scenarios(args.requests_per_rank, step_us, dps),
    }
    want = set(args.scenarios.split(","))
    scenarios = [s for g, ss in groups.items() for s in ss if g in want or s.name in want]
    if not scenarios:
        ap.error(f"--scenarios {args.scenarios!r} selects nothing")
    rows = [run(s, p, prof.model, prof.name, step_us, settings)
            for s in scenarios for p in POLICIES]  # fmt: skip
    ver = verdicts(rows)
    front = dominators(_as_goal(rows))
    text = summary(_as_goal(rows), ver, front, unit="passes", ttft_refs=["sglang"],
                   ref_label="sglang", held_ref="sglang")  # fmt: skip
    if args.json:
        doc = {"profile": prof.name, "nominal_step_us": step_us, "settings": args.settings,
               "scenarios": rows, "goal": [v.as_dict() for v in ver],
               "dominated_by": [{"scenario": sc, "dp": dp, "arms": by}
                                for (sc, dp), by in front.items()]}  # fmt: skip
        print(json.dumps(doc, indent=1))
    else:
        if args.settings is not None:
            print(f"densegate arm: {ENV_VAR}={args.settings}")
        print(_table(rows, prof.name))
        print("\n".join(v.line() for v in ver))
        print(f"\n{text}")
    bad = failures(rows)
    if args.doc is not None:
        argv = sys.argv[1:] if argv is None else argv
        bad += engine_diffs(args.doc, SCRIPT, argv, text, args.write_doc)
    return finish(bad, ver, goal_bars=args.goal)


if __name__ == "__main__":
    raise SystemExit(main())
