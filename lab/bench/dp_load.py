"""Arrival rate as a fraction of modeled capacity, for the DP policies side by side.

Capacity is what gate-off sustains through the same rank loops when every request
of the workload waits at tick 0: requests divided by the ticks it took (requests
per tick, on the pass clock every modeled figure uses). Load L then respaces the
workload's arrivals, keeping their pattern, so requests arrive at L times that
rate. A modeled figure: it depends on the scheduler's passes, not on a machine.
The drain tail (the last long requests decoding alone) counts in those ticks, so
for a small trace load 1 sits below the true saturation point.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from densegate.impl.engine import EngineConfig
from densegate.impl.traces.workload import TraceRequest
from densegate.lab.bench.dp_policies import run_dp_policies
from densegate.lab.cost.model import PassModel

__all__ = ["at_load", "capacity_per_tick", "offered_per_tick", "write_load_plots"]


def capacity_per_tick(
    trace: Sequence[TraceRequest], engine: EngineConfig, dp: int, model: PassModel, seed: int = 0
) -> float:
    """Requests per tick gate-off finishes with the whole trace waiting at tick 0."""
    saturated = [TraceRequest(0, r.prompt_len, r.output_len) for r in trace]
    run = run_dp_policies(saturated, engine, dp, model, ["gate-off"], seed)["gate-off"]
    ticks = max(int(x.ticks) for x in run["reports"])
    return float(len(trace) / max(ticks, 1))


def offered_per_tick(trace: Sequence[TraceRequest]) -> float:
    """Requests per tick the trace offers as defined (over its arrival span)."""
    return len(trace) / (max((r.arrival_pass for r in trace), default=0) + 1)


def at_load(trace: Sequence[TraceRequest], load: float, capacity: float) -> list[TraceRequest]:
    """The trace respaced to offer ``load`` x ``capacity`` requests per tick."""
    if load <= 0 or capacity <= 0:
        raise ValueError(f"load and capacity must be > 0, got {load}, {capacity}")
    stretch = offered_per_tick(trace) / (load * capacity)
    return [TraceRequest(int(r.arrival_pass * stretch), r.prompt_len, r.output_len) for r in trace]


def write_load_plots(entries: Sequence[dict[str, Any]], directory: str, dp: int) -> list[str]:
    """Per workload ``dp_load_<w>.png``: tokens/s and TTFT p99 against load, per policy."""
    import matplotlib

    matplotlib.use("Agg")
    from pathlib import Path

    import matplotlib.pyplot as plt

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    written: list[str] = []
    for name in dict.fromkeys(e["name"] for e in entries):
        mine = sorted((e for e in entries if e["name"] == name), key=lambda e: e["load"])
        fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
        styles = ("-", "--", "-.", ":")  # policies that behave alike stay visible
        for k, pol in enumerate(p["name"] for p in mine[0]["policies"]):
            ls = styles[k % len(styles)]
            loads = [e["load"] for e in mine]
            rows = [next(p for p in e["policies"] if p["name"] == pol) for e in mine]
            a.plot(loads, [r["tokens_per_s"] for r in rows], marker="o", ls=ls, label=pol)
            b.plot(loads, [r["ttft_ms_p99"] for r in rows], marker="o", ls=ls, label=pol)
        a.set_ylabel("output tokens/s (modeled)")
        b.set_ylabel("TTFT p99 ms (modeled)")
        b.set_yscale("log")
        for ax in (a, b):
            ax.set_xlabel("load (arrival rate / modeled capacity)")
            ax.grid(True, alpha=0.3)
        a.legend()
        fig.suptitle(f"{name}: DP policies against load, dp={dp} (modeled)")
        path = out / f"dp_load_{name}.png"
        fig.savefig(path, dpi=110, bbox_inches="tight")
        plt.close(fig)
        written.append(str(path))
    return written
