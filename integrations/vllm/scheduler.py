"""vLLM schedulers with densegate's proved prefill gate in front of admission.

Each step the gate observes, before vLLM changes any state, what the step
would prefill if it fired (``observe``) and how many sequences decode, then
asks ``PrefillGate``. FIRE: vLLM's own ``schedule()`` runs unchanged. HOLD:
``schedule(throttle_prefills=True)``, vLLM's own deferral path (the one its DP
prefill cadence uses), so the step is decode-only: running prefill chunks and
new admissions wait. A HOLD happens only while decodes run and fewer than
``dense_tokens`` prefill tokens are admissible, and at most
``max_hold_passes - 1`` steps in a row (the proved properties P2-P6).

With ``pace_tokens`` set (the paced release) the gate is the aligned gate on one rank:
it never holds while work waits; a step below a dense pass fires PACED, its prefill
capped at ``pace_tokens`` through vLLM's own per-step token budget
(``densegate.integrations.vllm.budget``), so decodes never wait behind a long chunk.

``GatedAsyncScheduler`` sits on vLLM's ``AsyncScheduler`` (vLLM's default,
which overlaps scheduling with GPU execution): use it on a GPU. ``GatedScheduler``
sits on the sync ``Scheduler``, for platforms that run sync (vLLM's CPU
platform turns async scheduling off). Subclassing the sync one on a GPU would
lose async scheduling's overlap.

vLLM 0.32 and 0.33 are supported: 0.33 adds ``has_request`` to the scheduler
interface (defined here too, so both versions answer it) and a one-engine
prefill cadence, which the gate refuses beside it (``check_no_cadence``).
"""

from __future__ import annotations

import collections
import time
from dataclasses import dataclass
from typing import Any

import vllm
from vllm.logger import init_logger
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.core.sched.scheduler import Scheduler

from densegate.impl.dp_gate import AlignedGate, RankObservation, ReducedObservation
from densegate.impl.gate import Decision, GateConfig, PrefillGate, Reason
from densegate.integrations.vllm.budget import capped_step, check_budget, decode_tokens
from densegate.integrations.vllm.config import (
    check_no_cadence,
    cuda_graphs,
    deployment_case,
    gate_on_by_default,
    gate_settings,
    one_engine_gate,
    one_rank_config,
)
from densegate.integrations.vllm.observe import StepObservation, observe

__all__ = ["GateStep", "GatedAsyncScheduler", "GatedScheduler"]

# Under "vllm." so the line goes through vLLM's own log handler and level.
logger = init_logger("vllm.densegate")

GATE_LOG_SIZE = 4096
"""Steps kept in ``gate_log`` (oldest dropped first)."""


@dataclass(frozen=True, slots=True)
class GateStep:
    """One step as the gate saw and decided it."""

    index: int
    """vLLM's ``current_step`` of the step decided."""
    waiting_tokens: int
    """The gate's w: admissible prefill tokens, capped at ``dense_tokens``."""
    observation: StepObservation
    fire: bool
    reason: Reason
    hold_passes: int
    """The gate's counter after the decision."""


class _Gated:
    """The gate's part of both schedulers; the vLLM base class comes after it in the MRO."""

    gate: PrefillGate | AlignedGate
    gate_config: GateConfig
    gate_counts: collections.Counter[Reason]
    gate_log: collections.deque[GateStep]
    gate_ns: int
    """Nanoseconds spent observing and deciding, summed over steps."""
    gate_ticks: int
    """Steps the paced gate has decided (its tick: the stall memory's clock)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        base: Any = self
        sc = base.scheduler_config
        graphs = cuda_graphs(base.vllm_config)
        raw, on = base.vllm_config.additional_config, gate_on_by_default(cuda_graphs=graphs)
        sizes = {"max_num_batched_tokens": sc.max_num_batched_tokens,
                 "max_num_seqs": sc.max_num_seqs}  # fmt: skip
        settings = gate_settings(raw, **sizes, enabled_default=on)
        self.gate_config = one_rank_config(settings)
        check_no_cadence(int(sc.prefill_schedule_interval), self.gate_config)
        self.gate = one_engine_gate(settings)
        if isinstance(self.gate, AlignedGate):
            check_budget(self, str(vllm.__version__))
        self.gate_ticks = 0
        logger.info(
            deployment_case(
                data_parallel_size=int(base.parallel_config.data_parallel_size),
                cuda_graphs=graphs,
                enabled=self.gate_config.enabled,
            )
        )
        self.gate_counts = collections.Counter()
        self.gate_log = collections.deque(maxlen=GATE_LOG_SIZE)
        self.gate_ns = 0

    def has_request(self, request_id: str) -> bool:
        """vLLM 0.33's interface method, answered the same on 0.32: the request is held here."""
        base: Any = self
        return request_id in base.requests

    @property
    def hold_passes(self) -> int:
        """Steps the current waiting episode has been held."""
        return self.gate.hold_passes

    def schedule(self, throttle_prefills: bool = False) -> SchedulerOutput:
        """Ask the gate, then run vLLM's step: unchanged on FIRE, decode-only on HOLD."""
        base: Any = self
        t0 = time.perf_counter_ns()
        obs = observe(self)
        w = min(obs.prefill_tokens, self.gate_config.dense_tokens)
        decision = self._decide(obs.prefill_tokens, w, obs.decode_seqs)
        self.gate_ns += time.perf_counter_ns() - t0
        self.gate_counts[decision.reason] += 1
        self.gate_log.append(
            GateStep(
                base.current_step + 1,
                w,
                obs,
                decision.fire,
                decision.reason,
                self.gate.hold_passes,
            )
        )
        parent: Any = super()
        if decision.fire:
            with capped_step(self, decision.cap, decode_tokens(self, obs.decode_seqs)):
                out: SchedulerOutput = parent.schedule(throttle_prefills)
            return out
        # vLLM ignores the throttle after a capacity-bound release (DP balancing);
        # a HOLD must defer, so that flag is cleared for this step only.
        bound = base.prefill_capacity_bound
        base.prefill_capacity_bound = False
        try:
            out = parent.schedule(True)
        finally:
            base.prefill_capacity_bound = bound
        return out

    def _decide(self, prefill_tokens: int, w: int, decodes: int) -> Decision:
        gate = self.gate
        if isinstance(gate, PrefillGate):
            return gate.decide_counts(w, decodes)
        vector = gate.contribution(RankObservation(prefill_tokens, decodes))
        self.gate_ticks += 1
        return gate.decide(ReducedObservation.from_sum(vector, 1), self.gate_ticks - 1)

    def gate_summary(self) -> str:
        """One line for logs: steps by reason, holds, and the gate's time per step."""
        steps = sum(self.gate_counts.values())
        by = " ".join(
            f"{r.name}={n}" for r, n in sorted(self.gate_counts.items(), key=lambda kv: kv[0].name)
        )
        per = self.gate_ns / steps / 1e3 if steps else 0.0
        return f"densegate: {steps} steps ({by}), hold_passes={self.hold_passes}, {per:.1f} us/step"


class GatedScheduler(_Gated, Scheduler):
    """vLLM's sync ``Scheduler`` with the dense prefill gate (CPU platform, sync engines)."""


class GatedAsyncScheduler(_Gated, AsyncScheduler):
    """vLLM's ``AsyncScheduler`` with the dense prefill gate: the one to use on a GPU."""
