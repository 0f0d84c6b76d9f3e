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

import argparse
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from densegate.impl.engine import EngineConfig
from densegate.lab.bench.dp_load import at_load, capacity_per_tick, offered_per_tick
from densegate.lab.bench.dp_policies import goal, policy_rows, run_dp_policies
from densegate.lab.bench.dp_runs import dp_trace
from densegate.lab.bench.dp_seconds import arrival_rate, capacity_tokens_per_s, seconds_trace
from densegate.lab.bench.workloads import Workload
from densegate.lab.cost.model import PassModel
from densegate.lab.cost.ridge import regime

__all__ = ["DEFAULT_LOAD", "DefaultGate", "default_gate", "side_by_side"]

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


def side_by_side(
    workload: Workload,
    engine: EngineConfig,
    args: argparse.Namespace,
    model: PassModel,
    policies: Sequence[str],
    clock: str,
    gate: DefaultGate,
    progress: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """Every load's entry for one workload: ``{"name", "load", "requests", "policies",
    "goal", ...}`` with the capacity and offered rate it was built from."""
    dp, seed = args.dp, args.seed
    loads = args.load or ([DEFAULT_LOAD] if clock == "seconds" else [1.0])
    out: list[dict[str, Any]] = []
    if clock == "seconds":
        probe = seconds_trace(workload, seed, dp, args.requests, 1.0)
        cap = capacity_tokens_per_s(probe, engine, dp, model, seed)
    else:
        base = dp_trace(workload, seed, dp, args.requests)
        cap = capacity_per_tick(base, engine, dp, model, seed) if args.load else 0.0
    for load in loads:
        extra: dict[str, Any]
        if clock == "seconds":
            rate = arrival_rate(probe, load, cap)
            trace = seconds_trace(workload, seed, dp, args.requests, rate)
            extra = {"capacity_tokens_per_s": cap, "offered_requests_per_s": rate}
        else:
            trace = at_load(base, load, cap) if args.load else base
            extra = {"capacity_requests_per_tick": cap, "offered_requests_per_tick":
                     offered_per_tick(trace)} if args.load else {}  # fmt: skip
        runs = run_dp_policies(trace, engine, dp, model, policies, seed, clock=clock,
                               pace_tokens=gate.pace_tokens,
                               surge_tokens=gate.surge_tokens)  # fmt: skip
        rows = policy_rows(runs)
        out.append({"name": workload.name, "load": load, "requests": len(trace),
                    "policies": rows, "goal": goal(rows), **extra})  # fmt: skip
        if progress is not None:
            progress(f"{workload.name} load {load}: {len(trace)} requests over {dp} ranks, "
                     f"{len(policies)} policies done")  # fmt: skip
    return out
