"""What every rank of a data-parallel run must agree on: the config, its phases, the prompts."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence
from dataclasses import dataclass

from densegate.lab.cost.compare import round_name, round_order
from densegate.impl.dp.router import ROUTERS
from densegate.impl.dp_gate import AlignedGateConfig
from densegate.impl.engine import EngineConfig
from densegate.impl.traces.workload import TraceRequest

__all__ = ["COORDINATIONS", "FAULT_MODES", "DPConfig", "Fault", "Phase", "make_prompts", "phases"]

COORDINATIONS = ("aligned", "local")
FAULT_MODES = ("exit", "collective", "hang", "slow")


@dataclass(frozen=True)
class Fault:
    """An injected fault (a test hook) on ``rank`` at tick ``tick`` of the first phase.

    ``exit``: the rank dies before the tick's collective; ``collective``: it
    enters the collective, waits ``seconds`` and dies inside it; ``hang``: it
    stops answering; ``slow``: it sleeps ``seconds`` before the collective and
    goes on (below the timeout it must not be taken for dead).
    """

    rank: int
    tick: int
    mode: str = "exit"
    seconds: float = 0.0

    def __post_init__(self) -> None:
        for name in ("rank", "tick"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"Fault.{name} must be an int >= 0, got {v!r}")
        if self.mode not in FAULT_MODES:
            raise ValueError(f"Fault.mode must be one of {FAULT_MODES}, got {self.mode!r}")
        if isinstance(self.seconds, bool) or not self.seconds >= 0:
            raise ValueError(f"Fault.seconds must be a number >= 0, got {self.seconds!r}")


@dataclass(frozen=True)
class DPConfig:
    """Everything every rank must agree on, besides the trace.

    ``baselines`` adds two uncoordinated phases after the coordinated one, on
    the null runner (scheduling does not depend on token values): every rank
    with its gate off, and every rank with its own local gate. Both still
    all-reduce every tick, so their mixed ticks are counted the same way.
    ``faults`` are injected faults (test hooks, ``Fault``); ``crash`` =
    ``(rank, tick)`` with ``crash_mode`` is the one-fault shorthand.
    ``grace_s`` (default ``timeout_s``) is how long survivors wait for each
    other to answer after a failure.
    """

    engine: EngineConfig
    router: str = "round-robin"
    timeout_s: float = 30.0
    startup_timeout_s: float = 300.0
    target_fill: float = 1.0
    stall_ticks: int = 0
    kv_pressure_valve: bool = False
    kv_high_watermark: float = 0.9
    seed: int = 0
    baselines: bool = True
    keep_outputs: bool = False
    crash: tuple[int, int] | None = None
    crash_mode: str = "exit"
    faults: tuple[Fault, ...] = ()
    grace_s: float | None = None
    timed_rounds: int = 0
    """0: baselines on the null runner, untimed. R >= 1: every phase on the engine's runner,
    R rounds in alternating order (``densegate.lab.cost.compare``), to compare times."""

    def __post_init__(self) -> None:
        if not isinstance(self.engine, EngineConfig):
            raise TypeError(f"DPConfig.engine must be an EngineConfig, got {self.engine!r}")
        if self.router not in ROUTERS:
            raise ValueError(f"DPConfig.router must be one of {ROUTERS}, got {self.router!r}")
        for name in ("timeout_s", "startup_timeout_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | float) or not v > 0:
                raise ValueError(f"DPConfig.{name} must be a number > 0, got {v!r}")
        if not 0 < self.kv_high_watermark <= 1:
            raise ValueError(
                f"DPConfig.kv_high_watermark must be in (0, 1], got {self.kv_high_watermark!r}"
            )
        if self.crash_mode not in FAULT_MODES:
            raise ValueError(
                f"DPConfig.crash_mode must be one of {FAULT_MODES}, got {self.crash_mode!r}"
            )
        if not all(isinstance(f, Fault) for f in self.faults):
            raise ValueError(f"DPConfig.faults must hold Fault objects, got {self.faults!r}")
        if self.grace_s is not None and not self.grace_s > 0:
            raise ValueError(f"DPConfig.grace_s must be > 0, got {self.grace_s!r}")
        if (
            isinstance(self.timed_rounds, bool)
            or not isinstance(self.timed_rounds, int)
            or (self.timed_rounds < 0)
        ):
            raise ValueError(
                f"DPConfig.timed_rounds must be an int >= 0, got {self.timed_rounds!r}"
            )
        # Raises on bad gate parameters before any process starts.
        self.gate_config(self.engine)

    @property
    def all_faults(self) -> tuple[Fault, ...]:
        """``faults`` plus the ``crash`` shorthand."""
        if self.crash is None:
            return self.faults
        return (*self.faults, Fault(self.crash[0], self.crash[1], self.crash_mode))

    @property
    def grace(self) -> float:
        return self.timeout_s if self.grace_s is None else self.grace_s

    def gate_config(self, engine: EngineConfig) -> AlignedGateConfig:
        return AlignedGateConfig(
            engine.dense,
            engine.max_hold_passes,
            engine.gate_enabled,
            self.target_fill,
            self.stall_ticks,
            self.kv_pressure_valve,
        )


@dataclass(frozen=True)
class Phase:
    """One pass over the trace: how the ranks decide, and on which engine."""

    name: str
    coordination: str
    engine: EngineConfig


def phases(config: DPConfig) -> list[Phase]:
    """The coordinated run, then (if ``baselines``) the two uncoordinated ones."""
    out = [Phase("coordinated", "aligned", config.engine)]
    if config.baselines:
        null = dataclasses.replace(config.engine, runner="null", model=None)
        null = config.engine if config.timed_rounds else null
        out.append(
            Phase("uncoordinated_gate_off", "local", dataclasses.replace(null, gate_enabled=False))
        )
        out.append(
            Phase("uncoordinated_local_gate", "local", dataclasses.replace(null, gate_enabled=True))
        )
    rounds = max(config.timed_rounds, 1)
    return [dataclasses.replace(p, name=round_name(p.name, k)) for k, p in round_order(out, rounds)]


def make_prompts(trace: Sequence[TraceRequest], seed: int, vocab: int) -> list[list[int]]:
    """Prompt ids in arrival order, drawn exactly as ``run_trace`` draws them.

    So request ``i`` of a DP run has the very prompt request ``i`` of a
    single-rank ``run_trace`` of the same trace and seed has.
    """
    rng = random.Random(seed)
    ordered = sorted(trace, key=lambda r: r.arrival_pass)
    return [[rng.randrange(vocab) for _ in range(r.prompt_len)] for r in ordered]
