"""The benchmarked policies: a gate and the scheduler settings each runs with.

The policies and how they differ (token budget, sequence slots and KV cache
are the same for all):

- ``densegate``: ``PrefillGate``, chunked prefill on, no per-request chunk cap,
  the STALL valve off (today's default).
- ``densegate-stall``: the same with the STALL valve on, ``stall_passes`` taken
  from the benchmark's base config (``densegate bench --stall-passes N``).
- ``original``: ``OriginalPolicy`` (the original change's gate, flaws kept), fed
  the scheduler's raw counts; otherwise as ``densegate``.
- ``legacy``: vLLM v0's prefill-first order (``PrefillFirstScheduler``): no
  gate (``LegacyPolicy``), chunked prefill off, whole prompts FCFS, and a pass
  that can admit prefill runs prefill only while every decode waits.
- ``vllm-v1``: no gate, chunked prefill on, no per-request chunk cap: vLLM v1's
  default (decode first, then chunked prefill in the same pass; its ``long_prefill_token_threshold``
  stays 0 unless ``max_num_partial_prefills > 1``). It is ``densegate`` with the
  gate off, so the two columns isolate what the gate does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from densegate.impl.engine import EngineConfig
from densegate.impl.gate import GateConfig, GatePolicy, PrefillGate
from densegate.impl.sched.scheduler import Scheduler
from densegate.lab.baselines.policies import LegacyPolicy, OriginalPolicy
from densegate.lab.baselines.prefill_first import PrefillFirstScheduler
from densegate.lab.baselines.raw_scheduler import RawListScheduler

__all__ = ["BENCH_POLICIES", "BENCH_STALL_PASSES", "BenchPolicy"]

BENCH_STALL_PASSES = 4
"""``stall_passes`` of the ``densegate-stall`` column unless the command line says otherwise
(the README's tables show the valve at 2, 4 and 8; the default ``PrefillGate`` keeps it off)."""


@dataclass(frozen=True)
class BenchPolicy:
    """A gate and the scheduler settings it is benchmarked with.

    ``stall``: the policy runs with the base config's ``stall_passes``; every other
    policy runs with the valve off, whatever the base says.
    """

    name: str
    description: str
    gate: Callable[[GateConfig], GatePolicy]
    chunked_prefill: bool = True
    gated: bool = True
    scheduler: type[Scheduler] = Scheduler
    stall: bool = False

    def config(self, base: EngineConfig) -> EngineConfig:
        return dataclasses.replace(
            base,
            enable_chunked_prefill=self.chunked_prefill,
            gate_enabled=self.gated,
            stall_passes=base.stall_passes if self.stall else 0,
        )


BENCH_POLICIES: dict[str, BenchPolicy] = {
    p.name: p
    for p in (
        BenchPolicy("densegate", "PrefillGate; chunked prefill", PrefillGate),
        BenchPolicy("densegate-stall", "PrefillGate with the STALL valve; chunked prefill",
                    PrefillGate, stall=True),
        BenchPolicy("original", "the original change's gate (raw counts); chunked prefill",
                    OriginalPolicy, scheduler=RawListScheduler),
        BenchPolicy("legacy", "no gate; prefill-first passes, whole prompts (vLLM v0)",
                    LegacyPolicy, chunked_prefill=False, gated=False,
                    scheduler=PrefillFirstScheduler),
        BenchPolicy("vllm-v1", "no gate; decode first, chunked prefill (v1 default)",
                    LegacyPolicy, gated=False),
    )
}  # fmt: skip
"""The benchmarked policies, in column order (see the module docstring)."""
