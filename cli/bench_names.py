"""The bench's workload and policy names and its STALL default, for the parser's help.

``densegate.lab.bench`` defines them, but importing it loads numpy and the whole
lab, and building the parser (every ``densegate`` call, ``--help`` included)
should not; ``tests/test_cli_habits.py`` checks that these copies agree with it.
"""

from __future__ import annotations

__all__ = ["BENCH_STALL_DEFAULT", "DP_POLICY_NAMES", "POLICY_NAMES", "WORKLOAD_NAMES"]

WORKLOAD_NAMES = ("steady", "bursty", "long-prompt", "chat")
"""``densegate.lab.bench.WORKLOADS``' keys, in its order."""

POLICY_NAMES = ("densegate", "densegate-stall", "original", "legacy", "vllm-v1")
"""``densegate.lab.bench.BENCH_POLICIES``' keys, in its order."""

DP_POLICY_NAMES = (
    "densegate",
    "gate-off",
    "vllm-cadence-2",
    "vllm-cadence-4",
    "vllm-cadence-8",
    "sglang-delayer",
    "atom-coalescer",
    "trtllm-adp",
    "vllm-cadence-global",
    "trtllm-adp-variant",
    "vllm-cadence",
)
"""``densegate.lab.bench.dp_policies.DP_POLICIES``, in its order (``--policies`` with ``--dp``)."""

BENCH_STALL_DEFAULT = 4
"""``densegate.lab.bench.BENCH_STALL_PASSES``: the densegate-stall column's valve."""
