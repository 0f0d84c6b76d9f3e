"""Side-by-side policy benchmark: the same seeded workloads through the engine, once per policy.

What the gate is for is visible only against the policies engines use today,
on the same requests. Each workload is replayed through ``run_trace`` (so the
figures are ``summarize``'s, not re-implemented) once per policy; the only
figures added here come from the per-pass records: the share of decode work in
decode-only passes (the ones a GPU runs as a CUDA graph) and the prefill fill
of every prefill pass, for the histogram.

The policies are in ``densegate.lab.bench.policies``.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from densegate.impl.engine import Engine, EngineConfig
from densegate.impl.sched.config import REFERENCE_CONFIG
from densegate.impl.traces.replay import run_trace, summarize
from densegate.impl.traces.workload import TraceRequest
from densegate.impl.validation import check_int, check_optional_int
from densegate.lab.bench.policies import BENCH_POLICIES, BENCH_STALL_PASSES, BenchPolicy
from densegate.lab.bench.workloads import MAX_MODEL_LEN, MAX_NUM_SEQS, TOKEN_BUDGET, WORKLOADS
from densegate.lab.cost.compare import compare_rounds, round_name, round_order
from densegate.lab.cost.model import PassModel
from densegate.lab.cost.timeline import (
    PassTimeline,
    TimedRunner,
    TimeFigures,
    measured_figures,
    modeled_figures,
)

__all__ = [
    "TIME_BASELINE",
    "BenchResult",
    "Check",
    "PolicyRun",
    "WorkloadRun",
    "bench_config",
    "run_bench",
    "run_policy",
]


def bench_config(runner: str = "null", device: str = "cpu") -> EngineConfig:
    """The scheduler every policy shares before its own settings are applied."""
    return EngineConfig(
        max_num_seqs=MAX_NUM_SEQS,
        max_num_batched_tokens=TOKEN_BUDGET,
        block_size=REFERENCE_CONFIG.block_size,
        num_blocks=REFERENCE_CONFIG.num_blocks,
        max_model_len=MAX_MODEL_LEN,
        max_hold_passes=REFERENCE_CONFIG.max_hold_passes,
        runner=runner,
        device=device,
    )


# -- one run ----------------------------------------------------------------------------
class _PassFigures:
    """What ``PassStats`` does not keep: decode tokens by pass kind, every fill, mixed passes
    and prefill passes under a quarter of the token budget (vLLM's cadence figures)."""

    def __init__(self, engine: Engine) -> None:
        self._log = engine.scheduler.pass_log
        self._dense = engine.config.dense
        self._quarter = engine.config.max_num_batched_tokens / 4
        self.decode_tokens = 0
        self.decode_only_tokens = 0
        self.mixed = 0
        self.under_quarter = 0
        self.fills: list[float] = []

    def __call__(self, _passes: int) -> None:
        rec = self._log[-1]
        self.decode_tokens += rec.decode_seqs
        if rec.prefill_tokens:
            self.fills.append(min(1.0, rec.prefill_tokens / self._dense))
            self.mixed += rec.decode_seqs > 0
            self.under_quarter += rec.prefill_tokens < self._quarter
        else:
            self.decode_only_tokens += rec.decode_seqs


@dataclass
class PolicyRun:
    """One policy over one workload: the table's figures, ``summarize``'s dict, the raw series."""

    policy: str
    figures: dict[str, Any]
    summary: dict[str, Any]
    ttft_passes: list[int] = field(repr=False)
    fills: list[float] = field(repr=False)
    measured: TimeFigures | None = field(default=None, repr=False)
    """Wall-clock figures (a timed runner only)."""
    modeled: TimeFigures | None = field(default=None, repr=False)
    """The same passes on the cost model's clock (when a model is given)."""


def run_policy(
    trace: Sequence[TraceRequest],
    policy: BenchPolicy,
    base: EngineConfig,
    seed: int = 0,
    model: PassModel | None = None,
) -> PolicyRun:
    """Replay ``trace`` through a fresh engine with ``policy``; ``model`` adds modeled times."""
    cfg = policy.config(base)
    engine = Engine(cfg, gate=policy.gate(cfg.gate_config()), scheduler=policy.scheduler)
    timeline = PassTimeline()
    engine.runner = TimedRunner(engine.runner, timeline)
    extra = _PassFigures(engine)
    t0 = time.perf_counter()
    stats = run_trace(engine, trace, seed, extra)
    s = summarize(engine, stats, time.perf_counter() - t0)
    metrics = engine.all_metrics()
    ttft_p = [m.ttft_passes for m in metrics if m.ttft_passes is not None]
    timed = cfg.runner != "null"
    ttft_ms = [1e3 * m.ttft_s for m in metrics if m.ttft_s is not None]
    engine_s = engine.scheduler_seconds + engine.runner_seconds
    last_arrival = max((m.arrival_pass for m in metrics), default=-1)
    passes = max(s["passes"], 1)
    figures: dict[str, Any] = {
        "requests": s["requests"],
        "finished": s["finished"],
        "passes": s["passes"],
        "drain_passes": s["passes"] - (last_arrival + 1),
        "underfull_interrupting": s["underfull_interrupting"],
        "underfull_interrupting_share": s["underfull_interrupting"] / passes,
        "underfull_interrupting_by_reason": s["underfull_interrupting_by_reason"],
        "prefill_passes": s["prefill_passes"],
        "mean_prefill_fill": s["mean_prefill_fill"],
        "mixed_passes": extra.mixed,
        "prefill_under_quarter_share": (
            extra.under_quarter / len(extra.fills) if extra.fills else None
        ),
        "decode_tokens": extra.decode_tokens,
        "decode_tokens_in_decode_only_share": (
            extra.decode_only_tokens / extra.decode_tokens if extra.decode_tokens else None
        ),
        "ttft_passes": s["ttft_passes"],
        "ttft_ms": {**s["ttft_ms"], "max": max(ttft_ms, default=None)} if timed else None,
        "tpot_passes": s["tpot_passes"],
        "tpot_ms": s["tpot_ms"] if timed else None,
        "output_tokens": s["output_tokens"],
        "output_tokens_per_pass": s["output_tokens_per_pass"],
        # Over the engine's step time (scheduler + runner), not the replay's prompt building.
        "output_tokens_per_s": s["output_tokens"] / engine_s if timed and engine_s > 0 else None,
        "scheduler_us_per_pass": s["scheduler_us_per_pass"],
        "head_ttft_passes_max": s["head_ttft_passes_max"],
        "head_ttft_bound_passes": s["head_ttft_bound_passes"],
        "s6": {k: v for k, v in s["s6"].items() if k != "per_request"},
        "preemptions": s["preemptions"],
    }
    run = PolicyRun(policy.name, figures, s, ttft_p, extra.fills)
    if timed:
        run.measured = measured_figures(engine, timeline)
        figures["measured_time"] = run.measured.summary()
    if model is not None:
        run.modeled = modeled_figures(engine, timeline, model)
        figures["modeled_time"] = run.modeled.summary()
    return run


# -- the whole benchmark ----------------------------------------------------------------
@dataclass(frozen=True)
class Check:
    """One of the benchmark's pass criteria, judged on one workload."""

    name: str
    ok: bool
    detail: str


@dataclass
class WorkloadRun:
    workload: str
    description: str
    requests: int
    runs: dict[str, PolicyRun]
    time: dict[str, dict[str, Any]] | None = None
    """Measured (timed runner): per policy, rounds pooled, ratio to ``TIME_BASELINE``."""

    def checks(self) -> list[Check]:
        """The done criteria that the policies present allow judging."""
        out = [
            Check(
                "every request finished under every policy",
                all(r.figures["finished"] == r.figures["requests"] for r in self.runs.values()),
                ", ".join(
                    f"{p} {r.figures['finished']}/{r.figures['requests']}"
                    for p, r in self.runs.items()
                ),
            )
        ]
        d = self.runs.get("densegate")
        if d is None:
            return out
        f = d.figures
        for other in ("legacy", "vllm-v1"):
            if other in self.runs:
                o = self.runs[other].figures["underfull_interrupting"]
                out.append(
                    Check(
                        f"densegate has fewer under-full interrupting prefill passes than {other}",
                        f["underfull_interrupting"] < o,
                        f"{f['underfull_interrupting']} vs {o}",
                    )
                )
        s6 = f["s6"]
        worst = s6["worst"]
        out.append(
            Check(
                "densegate: every undisturbed head wait within its S6 bound [S6]",
                s6["violations"] == 0,
                f"{s6['windows']} windows, {s6['violations']} over; worst "
                + (
                    f"{worst['wait']} / {worst['bound']} passes = {s6['worst_ratio']:.2f}"
                    if worst
                    else "-"
                ),
            )
        )
        if "legacy" in self.runs:
            lg = self.runs["legacy"].figures["output_tokens_per_pass"]
            dg = f["output_tokens_per_pass"]
            out.append(
                Check(
                    "densegate output tokens per pass not below legacy",
                    dg >= lg,
                    f"{dg:.2f} vs {lg:.2f} ({100 * (dg / lg - 1):+.1f}%)",
                )
            )
        return out


@dataclass
class BenchResult:
    runner: str
    seed: int
    config: dict[str, Any]
    workloads: dict[str, WorkloadRun]
    wall_s: float

    @property
    def drained(self) -> bool:
        return all(
            r.figures["finished"] == r.figures["requests"]
            for w in self.workloads.values()
            for r in w.runs.values()
        )

    def to_json(self) -> dict[str, Any]:
        """JSON-ready: the config, then per workload and policy the figures and the summary."""
        return {
            "runner": self.runner,
            "seed": self.seed,
            "config": self.config,
            "policies": {
                p: {
                    "description": BENCH_POLICIES[p].description,
                    "enable_chunked_prefill": BENCH_POLICIES[p].chunked_prefill,
                }
                for p in next(iter(self.workloads.values())).runs
            }
            if self.workloads
            else {},
            "workloads": {
                name: {
                    "description": w.description,
                    "requests": w.requests,
                    "policies": {
                        p: {"figures": r.figures, "summary": r.summary} for p, r in w.runs.items()
                    },
                    "checks": [dataclasses.asdict(c) for c in w.checks()],
                    "time": w.time,
                }
                for name, w in self.workloads.items()
            },
            "wall_s": self.wall_s,
        }


TIME_BASELINE = "vllm-v1"
"""The gate-off policy the measured tokens/s ratios are taken against."""


def run_bench(
    workloads: Sequence[str] = tuple(WORKLOADS),
    policies: Sequence[str] = tuple(BENCH_POLICIES),
    *,
    runner: str = "null",
    seed: int = 0,
    requests: int | None = None,
    device: str = "cpu",
    progress: Callable[[str], None] | None = None,
    model: PassModel | None = None,
    rounds: int = 1,
    stall_passes: int = BENCH_STALL_PASSES,
) -> BenchResult:
    """Every workload through every policy; ``requests`` overrides each workload's size.

    ``stall_passes`` is the ``densegate-stall`` column's valve (every other policy runs
    with it off).

    ``model`` adds each run's modeled times. With a timed runner the policies run
    ``rounds`` times in alternating order (``densegate.lab.cost.compare``); the
    tables' pass counts are round 1's, the measured times pool every round.
    """
    for name in workloads:
        if name not in WORKLOADS:
            raise ValueError(f"unknown workload {name!r}; choose from {', '.join(WORKLOADS)}")
    for name in policies:
        if name not in BENCH_POLICIES:
            raise ValueError(f"unknown policy {name!r}; choose from {', '.join(BENCH_POLICIES)}")
    check_optional_int("run_bench", "requests", requests, 1)
    check_int("run_bench", "rounds", rounds, 1)
    if rounds > 1 and runner == "null":
        raise ValueError(f"rounds must be 1 with the null runner (nothing is timed), got {rounds}")
    base = dataclasses.replace(bench_config(runner, device), stall_passes=stall_passes)
    t0 = time.perf_counter()
    out: dict[str, WorkloadRun] = {}
    for wname in workloads:
        wl = WORKLOADS[wname]
        trace = wl.trace(seed, requests)
        runs: dict[str, PolicyRun] = {}
        measured: dict[str, TimeFigures] = {}
        for k, pname in round_order(list(policies), rounds):
            t = time.perf_counter()
            run = run_policy(trace, BENCH_POLICIES[pname], base, seed, model)
            if k == 1:
                runs[pname] = run
            if run.measured is not None:
                measured[round_name(pname, k)] = run.measured
            if progress is not None:
                progress(
                    f"{wname} / {pname} (round {k}): {run.figures['passes']} passes, "
                    f"{time.perf_counter() - t:.1f} s"
                )
        time_table = compare_rounds(measured, TIME_BASELINE) if measured else None
        out[wname] = WorkloadRun(wname, wl.description, len(trace), runs, time_table)
    config = {
        k: v
        for k, v in dataclasses.asdict(base).items()
        if k not in ("model", "enable_chunked_prefill", "gate_enabled")
    }
    config["dense_tokens"] = base.dense
    config["rounds"] = rounds
    return BenchResult(runner, seed, config, out, time.perf_counter() - t0)
