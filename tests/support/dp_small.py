"""The small engine and traces the DP tests run: seconds per run, yet requests queue."""

from __future__ import annotations

from densegate.impl.engine import EngineConfig
from densegate.impl.traces.workload import TraceRequest, synthetic_trace

ENGINE = EngineConfig(
    max_num_seqs=8,
    max_num_batched_tokens=256,
    block_size=16,
    num_blocks=160,
    max_model_len=512,
    max_hold_passes=6,
)


def small_trace(n: int, seed: int, rate: float = 1.5) -> list[TraceRequest]:
    return synthetic_trace(
        n, seed, rate=rate, prompt_median=48, output_median=12, max_model_len=ENGINE.max_model_len
    )


MIXED_REASONS = frozenset({"BUDGET", "STALL", "KV_PRESSURE", "DISABLED", "DENSE", "NO_DECODE"})
"""The rules that may let a coordinated tick be mixed (a rank prefills beside one that only
decodes): the valves, the gate off, and the per-rank releases (a filled rank's DENSE, a
no-decode rank's NO_DECODE, never held for the others). ALIGNED (every rank waiting or
vacant), EMPTY and PACED never may."""
