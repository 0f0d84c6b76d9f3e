"""The policy benchmark: workloads, runs with their checks, tables and plots.

``workloads`` (what is replayed), ``policies`` (what replays it), ``runs`` (each
policy over each workload, and the checks on the result), ``tables`` (text),
``plots`` (matplotlib).
"""

from densegate.lab.bench.plots import write_plots
from densegate.lab.bench.policies import BENCH_POLICIES, BENCH_STALL_PASSES, BenchPolicy
from densegate.lab.bench.runs import (
    BenchResult,
    Check,
    PolicyRun,
    WorkloadRun,
    bench_config,
    run_bench,
    run_policy,
)
from densegate.lab.bench.tables import ROWS, format_tables
from densegate.lab.bench.workloads import WORKLOADS, Workload

__all__ = [
    "BENCH_POLICIES",
    "BENCH_STALL_PASSES",
    "ROWS",
    "WORKLOADS",
    "BenchPolicy",
    "BenchResult",
    "Check",
    "PolicyRun",
    "Workload",
    "WorkloadRun",
    "bench_config",
    "format_tables",
    "run_bench",
    "run_policy",
    "write_plots",
]
