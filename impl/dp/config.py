"""What every rank of a data-parallel run must agree on: the config, its phases, the prompts."""

from __future__ import annotations

import contextlib
import dataclasses
import random
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from densegate.impl.dp.router import ROUTERS
from densegate.impl.dp_gate import AlignedGateConfig
from densegate.impl.engine import EngineConfig
from densegate.impl.settings import DP, carried
from densegate.impl.traces.workload import TraceRequest
from densegate.impl.validation import (
    STARTUP_TIMEOUT_S,
    TIMEOUT_S,
    check_choice,
    check_fraction,
    check_instance,
    check_int,
    check_seconds,
    fit_problem,
    int_problem,
)

__all__ = ["COORDINATED", "COORDINATIONS", "DPConfig", "Phase", "check_trace", "make_prompts",
           "shared_prompts"]  # fmt: skip

COORDINATIONS = ("aligned", "local")
COORDINATED = "coordinated"
"""The name of a run's first phase: the aligned run itself (the summary is built on it)."""


@dataclass(frozen=True)
class Phase:
    """One pass over the trace: how the ranks decide (``aligned``: one decision per tick
    for every rank; ``local``: each rank its own gate), and on which engine."""

    name: str
    coordination: str
    engine: EngineConfig

    def __post_init__(self) -> None:
        check_instance("Phase", "name", self.name, str)
        check_choice("Phase", "coordination", self.coordination, COORDINATIONS)
        check_instance("Phase", "engine", self.engine, EngineConfig)


@dataclass(frozen=True)
class DPConfig:
    """Everything every rank must agree on, besides the trace.

    ``phases`` are run in order over the same trace; empty (the default) is the
    one coordinated phase on ``engine``. A rank stops after a phase in which a
    rank died. Comparison phases (the lab's baselines and timed rounds,
    ``densegate.lab.dp.phases``) come after the first, which must be the aligned
    phase named ``coordinated``. ``grace_s`` (default ``timeout_s``) is how long
    survivors wait for each other to answer after a failure.

    ``timeout_s`` bounds every collective, a phase's first included: a hung rank
    is noticed within ``timeout_s`` plus ``collective.DETECTION_MARGIN_S`` of the
    moment every rank had built the phase's engine. ``startup_timeout_s`` bounds
    only the rendezvous and how long a rank may take to build a phase's engine. Each is
    in its range (``validation.TIMEOUT_S``, ``STARTUP_TIMEOUT_S``; ``grace_s`` as ``timeout_s``).
    """

    engine: EngineConfig
    router: str = "round-robin"
    timeout_s: float = 30.0
    startup_timeout_s: float = 300.0
    target_fill: float = 1.0
    stall_ticks: int = 0
    kv_pressure_valve: bool = False
    align_ticks: int | None = None
    pace_tokens: int | None = None
    surge_tokens: int | None = None
    kv_high_watermark: float = 0.9
    seed: int = 0
    keep_outputs: bool = False
    grace_s: float | None = None
    phases: tuple[Phase, ...] = ()

    def __post_init__(self) -> None:
        owner = "DPConfig"
        check_instance(owner, "engine", self.engine, EngineConfig)
        check_choice(owner, "router", self.router, ROUTERS)
        check_seconds(owner, "timeout_s", self.timeout_s, TIMEOUT_S)
        check_seconds(owner, "startup_timeout_s", self.startup_timeout_s, STARTUP_TIMEOUT_S)
        check_fraction(owner, "kv_high_watermark", self.kv_high_watermark)
        check_int(owner, "seed", self.seed)
        if self.grace_s is not None:
            check_seconds(owner, "grace_s", self.grace_s, TIMEOUT_S)
        check_instance(owner, "phases", self.phases, tuple)
        names: set[str] = set()
        for i, p in enumerate(self.phases):
            check_instance(owner, f"phases[{i}]", p, Phase)
            if p.name in names:
                raise ValueError(f"{owner}.phases has two phases named {p.name!r}")
            names.add(p.name)
        first = self.run_phases[0]
        if first.name != COORDINATED or first.coordination != "aligned":
            raise ValueError(
                f"{owner}.phases[0] must be the aligned phase named {COORDINATED!r}, got {first!r}"
            )
        # Raises on bad gate parameters before any process starts.
        for p in self.run_phases:
            self.gate_config(p.engine)

    @property
    def run_phases(self) -> tuple[Phase, ...]:
        """``phases``, or the one coordinated phase on ``engine`` if none are given."""
        return self.phases or (Phase(COORDINATED, "aligned", self.engine),)

    @property
    def grace(self) -> float:
        return self.timeout_s if self.grace_s is None else self.grace_s

    def on_device(self, device: str) -> DPConfig:
        """This config with ``device`` in its engine and in every phase's engine."""

        def moved(e: EngineConfig) -> EngineConfig:
            return dataclasses.replace(e, device=device)

        return dataclasses.replace(
            self,
            engine=moved(self.engine),
            phases=tuple(dataclasses.replace(p, engine=moved(p.engine)) for p in self.phases),
        )

    def gate_config(self, engine: EngineConfig) -> AlignedGateConfig:
        """The aligned gate's config: B, K and on/off from ``engine``, every setting
        ``DPConfig`` carries (``densegate.impl.settings``) from here."""
        gate: dict[str, Any] = {s.name: getattr(self, s.name) for s in carried(DP)}
        return AlignedGateConfig(engine.dense, engine.max_hold_passes, engine.gate_enabled, **gate)


def check_trace(trace: Sequence[TraceRequest], config: DPConfig, label: str = "trace") -> None:
    """``ValueError`` naming the first request of ``trace`` (by its index there) that no
    phase's engine could ever admit: checked before any rank builds a prompt, so a length
    like 3e8 is one clear error rather than every rank dying of ``MemoryError``."""
    limit = min(p.engine.max_model_len for p in config.run_phases)
    for i, req in enumerate(trace):
        check_instance(label, f"[{i}]", req, TraceRequest)
        fields = (("arrival_pass", 0), ("prompt_len", 1), ("output_len", 1))
        for name, low in fields:
            why = int_problem(f"{label}: entry {i}: {name}", getattr(req, name), low)
            if why is not None:
                raise ValueError(why)
        why = fit_problem(f"{label}: entry {i}", req.prompt_len, req.output_len, limit)
        if why is not None:
            raise ValueError(why)


def make_prompts(trace: Sequence[TraceRequest], seed: int, vocab: int) -> list[list[int]]:
    """Prompt ids in arrival order, drawn exactly as ``run_trace`` draws them.

    So request ``i`` of a DP run has the very prompt request ``i`` of a
    single-rank ``run_trace`` of the same trace and seed has. Inside
    ``shared_prompts()`` the same draw is made once and its lists are shared.
    """
    ordered = sorted(trace, key=lambda r: r.arrival_pass)
    lengths = tuple(r.prompt_len for r in ordered)
    if not _shared.depth:
        return _draw(lengths, seed, vocab)
    with _shared.lock:  # held while drawing: concurrent callers wait for the one draw
        key = (seed, vocab, lengths)
        if key not in _shared.drawn:
            _shared.drawn[key] = _draw(lengths, seed, vocab)
        return list(_shared.drawn[key])


def _draw(lengths: Sequence[int], seed: int, vocab: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(vocab) for _ in range(n)] for n in lengths]


class _Shared:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.depth = 0
        self.drawn: dict[tuple[int, int, tuple[int, ...]], list[list[int]]] = {}


_shared = _Shared()


@contextlib.contextmanager
def shared_prompts() -> Iterator[None]:
    """While open, ``make_prompts`` draws each prompt set once in the process and gives
    every later call with the same lengths (in arrival order), seed and vocabulary the
    same inner lists, which callers must not change (``run_rank`` does not): for
    in-process ranks, which would otherwise each draw every request's prompt. Nests;
    the draws are dropped when the outermost closes."""
    with _shared.lock:
        _shared.depth += 1
    try:
        yield
    finally:
        with _shared.lock:
            _shared.depth -= 1
            if not _shared.depth:
                _shared.drawn.clear()
