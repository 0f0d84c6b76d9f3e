"""One workload of the DP side by side: its trace on the bench's clock, each load's run
of every policy, the rows and the goal verdict; and densegate's default gate per profile.

The default comes from the profile (``densegate.lab.cost.ridge.regime`` at the bench's
``max_num_seqs`` decodes): in the paced regime the aligned gate fires every tick that
work waits, capped at the ridge (at the surge ridge where some rank can fill a dense
pass); in the hold regime it is the aligned gate as before
(K = ``max_hold_passes``, no cap). The seconds clock is the default; ``--clock ticks``
replays the old tick clock (arrivals in ticks, idle time skipped) for comparison.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass
from typing import Any

from densegate.impl.engine import EngineConfig
from densegate.impl.traces.workload import TraceRequest
from densegate.lab.bench.dp_bound import goal_bound
from densegate.lab.bench.dp_load import at_load, capacity_per_tick, offered_per_tick
from densegate.lab.bench.dp_policies import bars, goal, policy_rows, run_dp_policies
from densegate.lab.bench.dp_runs import dp_trace
from densegate.lab.bench.dp_seconds import arrival_rate, capacity_tokens_per_s, seconds_trace
from densegate.lab.bench.workloads import Workload
from densegate.lab.cost.model import PassModel
from densegate.lab.cost.ridge import regime

__all__ = ["DEFAULT_LOAD", "DefaultGate", "Sweep", "default_gate", "side_by_side"]

DEFAULT_LOAD = 0.6
"""The seconds clock's load when ``--load`` is not given."""


@dataclass(frozen=True)
class DefaultGate:
    """densegate's default aligned gate for a profile, and the figures it was chosen on."""

    mode: str
    pace_tokens: int | None
    surge_tokens: int | None
    decode_ms: float
    mixed_ms: float
    penalty_share: float

    def describe(self) -> str:
        cap = ""
        if self.pace_tokens:
            cap = (f", cap {self.pace_tokens} tokens per rank per tick ({self.surge_tokens} on "
                   "a tick where some rank can fill a dense pass)")  # fmt: skip
        return (f"densegate's default from the profile: {self.mode}{cap} (a minimal chunk's "
                f"mixed pass costs {self.mixed_ms:.2f} ms against {self.decode_ms:.2f} ms "
                f"decode-only: +{self.penalty_share:.0%})")  # fmt: skip

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def default_gate(model: PassModel, engine: EngineConfig) -> DefaultGate:
    """The profile's regime at ``engine``'s ``max_num_seqs`` decodes, as a gate setting."""
    r = regime(model, engine.max_num_seqs, budget=engine.dense)
    paced = r.mode == "paced"
    pace, surge = (r.pace_tokens, r.surge_tokens) if paced else (None, None)
    return DefaultGate(r.mode, pace, surge, r.decode_ms, r.mixed_ms, r.penalty_share)


@dataclass(frozen=True)
class Sweep:
    """What every cell of a side by side shares: sizes, seed, loads, clock, the default gate."""

    engine: EngineConfig
    model: PassModel
    dp: int
    seed: int
    requests: int | None
    loads: tuple[float, ...]
    """The ``--load`` values; empty: the clock's default (tick clock: the workload as is)."""
    policies: tuple[str, ...]
    clock: str
    gate: DefaultGate


def _capacity(sweep: Sweep, workload: Workload) -> float:
    """The workload's modeled capacity on the sweep's clock (0: the tick clock, no load)."""
    w, s = workload, sweep
    if s.clock == "seconds":
        probe = seconds_trace(w, s.seed, s.dp, s.requests, 1.0)
        return capacity_tokens_per_s(probe, s.engine, s.dp, s.model, s.seed)
    if not s.loads:
        return 0.0
    return capacity_per_tick(dp_trace(w, s.seed, s.dp, s.requests), s.engine, s.dp, s.model, s.seed)


def _trace(
    sweep: Sweep, workload: Workload, load: float, cap: float
) -> tuple[list[TraceRequest], dict[str, Any]]:
    """One cell's trace, and the capacity and offered rate it was built from."""
    w, s = workload, sweep
    if s.clock == "seconds":
        probe = seconds_trace(w, s.seed, s.dp, s.requests, 1.0)
        rate = arrival_rate(probe, load, cap)
        trace = seconds_trace(w, s.seed, s.dp, s.requests, rate)
        return trace, {"capacity_tokens_per_s": cap, "offered_requests_per_s": rate}
    base = dp_trace(w, s.seed, s.dp, s.requests)
    trace = at_load(base, load, cap) if s.loads else base
    return trace, {"capacity_requests_per_tick": cap, "offered_requests_per_tick":
                   offered_per_tick(trace)} if s.loads else {}  # fmt: skip


def _cell(
    sweep: Sweep, name: str, load: float, trace: list[TraceRequest], extra: dict[str, Any]
) -> dict[str, Any]:
    """One workload at one load, from its trace (``_trace``): ``{"name", "load",
    "requests", "policies", "goal", ...}`` with the capacity and offered rate in ``extra``;
    where the seconds clock's goal is missed on TTFT or ITL, ``"bound"``: whether any rule
    could meet the best peers' TTFT and ITL p99 together (``densegate.lab.bench.dp_bound``)."""
    s = sweep
    runs = run_dp_policies(trace, s.engine, s.dp, s.model, s.policies, s.seed, clock=s.clock,
                           pace_tokens=s.gate.pace_tokens,
                           surge_tokens=s.gate.surge_tokens)  # fmt: skip
    rows = policy_rows(runs)
    met = goal(rows)
    out = {"name": name, "load": load, "requests": len(trace), "policies": rows, "goal": met,
           **extra}  # fmt: skip
    best = bars(rows)
    if s.clock == "seconds" and met and best and not (met["ttft_ms_p99"] and met["itl_ms_p99"]):
        out["bound"] = goal_bound(
            trace, s.engine, s.model, best["ttft_ms_p99"], best["itl_ms_p99"]
        ).as_dict()
    return out


def side_by_side(
    sweep: Sweep,
    workloads: Sequence[Workload],
    jobs: int = 1,
    progress: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """Every workload's entry per load, in order. Each workload's capacity, then each
    (workload, load) cell, is independent of the others: with ``jobs`` > 1 they run in that
    many worker processes (spawned, so no rank state is shared), the cells with the latest
    last arrival (the longest replays) first so no long one runs alone at the end, with
    results identical to one process's (every run is seeded)."""
    loads = sweep.loads or ((DEFAULT_LOAD,) if sweep.clock == "seconds" else (1.0,))
    cells = [(w, load) for w in workloads for load in loads]
    if jobs <= 1 or len(cells) == 1:
        caps = {w.name: _capacity(sweep, w) for w in workloads}
        out = []
        for w, load in cells:
            out.append(_cell(sweep, w.name, load, *_trace(sweep, w, load, caps[w.name])))
            _said(progress, out[-1], sweep)
        return out
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(min(jobs, len(cells)), mp_context=ctx) as pool:
        caps = dict(
            zip(
                (w.name for w in workloads),
                pool.map(_capacity, [sweep] * len(workloads), workloads),
                strict=True,
            )
        )
        built = [_trace(sweep, w, load, caps[w.name]) for w, load in cells]
        spans = [-max((r.arrival_pass for r in trace), default=0) for trace, _ in built]
        started = {
            i: pool.submit(_cell, sweep, cells[i][0].name, cells[i][1], *built[i])
            for i in sorted(range(len(cells)), key=spans.__getitem__)
        }
        futures = [started[i] for i in range(len(cells))]
        for f in as_completed(futures):
            _said(progress, f.result(), sweep)
        return [f.result() for f in futures]  # fmt: skip


def _said(progress: Callable[[str], None] | None, entry: dict[str, Any], sweep: Sweep) -> None:
    if progress is not None:
        progress(f"{entry['name']} load {entry['load']}: {entry['requests']} requests over "
                 f"{sweep.dp} ranks, {len(sweep.policies)} policies done")  # fmt: skip
