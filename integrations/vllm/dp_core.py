"""densegate's aligned gate inside vLLM's DP engine cores (``DPEngineCoreProc``, 0.32 and 0.33).

Why here: with DP (MoE models only) every rank's busy-loop iteration runs a
forward pass, a real step or a dummy batch, and ranks step in lockstep;
``step_counter`` is the same on all of them. ``schedule()`` is skipped on a rank
with no requests, so a collective inside the scheduler would hang; the engine
core's step is where every rank passes each iteration. vLLM has no supported
hook there, so ``install()`` wraps three ``DPEngineCoreProc`` methods (names
read from ``vllm/v1/engine/core.py`` of both releases):

- ``run_busy_loop``: before the loop, ``attach`` builds this rank's gate and
  runs one handshake all-reduce (rank count, config fingerprint): a rank with
  a different config fails at start-up, not mid-traffic.
- ``_process_engine_step``: on every iteration that runs a forward pass on this
  rank (the wave runs, or the rank holds unfinished requests, vLLM's own
  condition for a step or a dummy batch), the rank's ``RankObservation`` (from
  ``observe``, the one-engine gate's model of ``schedule()``) plus agreement
  slots go into one SUM all-reduce on the DP CPU group, and ``AlignedGate``
  decides from the reduced vector and ``step_counter``, the same on every rank.
- ``_should_throttle_prefills``: returns the decision (HOLD: throttle), which
  ``step()`` passes to ``schedule(throttle_prefills)``, vLLM's own deferral.
  A disabled gate leaves vLLM's answer (its cadence, if set) in place.

With ``pace_tokens`` set (the paced release), a PACED decision carries the same cap on
every rank, and the step runs with vLLM's per-step token budget lowered to this rank's
decode tokens plus the cap (``densegate.integrations.vllm.budget``).

vLLM's throttle defers prefills only on a rank that has decodes running and is
not capacity-bound; on a HOLD the capacity escape is cleared for that step (as
the one-engine scheduler does), while a rank with nothing to decode still
prefills (vLLM's rule, kept). The all-reduce waits at most vLLM's
``cpu_distributed_timeout_seconds`` (else ``DEFAULT_TIMEOUT_S``) and raises
``DpGateError``; vLLM's DP fault handling decides what follows.
"""

from __future__ import annotations

import collections
import datetime
import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import vllm
from vllm.logger import init_logger
from vllm.v1.engine.core import DPEngineCoreProc

from densegate.impl.dp_gate import (
    VECTOR_SIZE,
    AlignedGate,
    AlignedGateConfig,
    RankObservation,
    ReducedObservation,
)
from densegate.impl.gate import Reason
from densegate.integrations.vllm.budget import capped_step, check_budget, decode_tokens
from densegate.integrations.vllm.config import cuda_graphs
from densegate.integrations.vllm.dp_config import (
    DEFAULT_TIMEOUT_S,
    ENV_VAR,
    DpGateError,
    agreement_slots,
    aligned_config_from,
    check_agreement,
    fingerprint,
)
from densegate.integrations.vllm.observe import observe

__all__ = ["TARGETS", "DpGate", "DpStep", "attach", "install", "installed", "uninstall"]

logger = init_logger("vllm.densegate")

TARGETS = ("run_busy_loop", "_process_engine_step", "_should_throttle_prefills")
"""The ``DPEngineCoreProc`` methods wrapped (present in vLLM 0.32 and 0.33)."""

LOG_SIZE = 4096
"""Decisions kept in ``DpGate.log`` (oldest dropped first)."""

_ORIGINALS: dict[str, Any] = {}
_OWN: set[str] = set()
"""The targets ``DPEngineCoreProc`` defines itself (the others it inherits)."""
_ATTR = "densegate_dp"


@dataclass(frozen=True, slots=True)
class DpStep:
    """One aligned decision as this rank took it."""

    tick: int
    """vLLM's ``step_counter`` (the same on every rank)."""
    fire: bool
    reason: Reason
    local: RankObservation
    reduced: ReducedObservation


class DpGate:
    """One engine core's copy of the aligned gate, its collective and its log."""

    def __init__(self, core: Any) -> None:
        from densegate.integrations.vllm.scheduler import GatedAsyncScheduler, GatedScheduler

        if isinstance(core.scheduler, GatedScheduler | GatedAsyncScheduler):
            raise ValueError(
                f"{ENV_VAR}=1 aligns prefills across DP ranks; --scheduler-cls "
                f"{type(core.scheduler).__name__} gates each rank on its own as well, and the "
                "two would stack: use vLLM's default scheduler with the DP gate"
            )
        vc = core.vllm_config
        sc = vc.scheduler_config
        self.config: AlignedGateConfig = aligned_config_from(
            vc.additional_config,
            max_num_batched_tokens=int(sc.max_num_batched_tokens),
            max_num_seqs=int(sc.max_num_seqs),
            prefill_schedule_interval=int(sc.prefill_schedule_interval),
            graphs=cuda_graphs(vc),
        )
        self.world = int(core.dp_size)
        self.rank = int(core.dp_rank)
        self.group = core.dp_group
        self.gate = AlignedGate(self.config, self.world)
        self.fp = fingerprint(self.config, self.world, str(vllm.__version__))
        seconds = vc.parallel_config.cpu_distributed_timeout_seconds
        self.timeout_s = int(seconds) if seconds is not None else DEFAULT_TIMEOUT_S
        self.throttle = False
        self.cap: int | None = None
        """The cap of this step's decision (PACED), applied to vLLM's token budget."""
        self.decodes = 0
        """This rank's decode sequences this step, as observed."""
        if self.config.pace_tokens is not None:
            check_budget(core.scheduler, str(vllm.__version__))
        self.log: collections.deque[DpStep] = collections.deque(maxlen=LOG_SIZE)
        self.counts: collections.Counter[Reason] = collections.Counter()

    def all_reduce(self, vector: list[int], what: str) -> list[int]:
        """SUM over the DP group, bounded by the timeout; a failure is a ``DpGateError``."""
        t = torch.tensor(vector, dtype=torch.int64)
        try:
            work = dist.all_reduce(t, group=self.group, async_op=True)
            work.wait(timeout=datetime.timedelta(seconds=self.timeout_s))
        except RuntimeError as e:
            raise DpGateError(
                f"densegate DP gate, rank {self.rank}, {what}: the all-reduce over the "
                f"{self.world} DP ranks failed or did not complete in {self.timeout_s}s "
                f"(a rank died or stopped stepping): {e}"
            ) from e
        return [int(x) for x in t.tolist()]

    def handshake(self) -> None:
        """One all-reduce at start-up: every rank present, with this rank's config."""
        total = self.all_reduce([1, *agreement_slots(self.fp, 0)], "start-up handshake")
        if total[0] != self.world:
            raise DpGateError(
                f"densegate DP gate, rank {self.rank}: {total[0]} ranks answered the "
                f"handshake, data_parallel_size is {self.world}"
            )
        check_agreement(
            total[1:], world_size=self.world, fp=self.fp, tick=0, rank=self.rank,
            what="start-up handshake",
        )  # fmt: skip
        if self.rank == 0:
            c = self.config
            logger.info(
                "densegate: aligned prefill gate across %d DP engine cores (dense_tokens=%d, "
                "max_hold_passes=%d, enabled=%s, pace_tokens=%s, surge_tokens=%s%s), one "
                "all-reduce per step on the DP group",
                self.world, c.dense_tokens, c.max_hold_passes, c.enabled, c.pace_tokens,
                c.surge_tokens, "" if c.pace_tokens is None else ": never holds while work waits",
            )  # fmt: skip

    def step(self, core: Any) -> None:
        """This iteration's decision, from every rank's vector; no collective where vLLM
        runs no forward pass on this rank (then no rank is stepping)."""
        sched = core.scheduler
        if not (core.engines_running or sched.has_unfinished_requests()):
            self.throttle, self.cap = False, None
            return
        tick = int(core.step_counter)
        if tick == 0:
            self.gate.reset()  # a new wave, on every rank at once
        local = _observation(sched)
        total = self.all_reduce(
            [*self.gate.contribution(local), *agreement_slots(self.fp, tick)],
            f"step_counter {tick}",
        )
        check_agreement(
            total[VECTOR_SIZE:], world_size=self.world, fp=self.fp, tick=tick,
            rank=self.rank, what=f"step_counter {tick}",
        )  # fmt: skip
        try:
            reduced = ReducedObservation.from_sum(total[:VECTOR_SIZE], self.world)
        except ValueError as e:
            raise DpGateError(f"densegate DP gate, rank {self.rank}, tick {tick}: {e}") from e
        decision = self.gate.decide(reduced, tick)
        self.throttle = not decision.fire
        self.cap = decision.cap
        self.decodes = local.decode_seqs
        self.counts[decision.reason] += 1
        self.log.append(DpStep(tick, decision.fire, decision.reason, local, reduced))


def _observation(sched: Any) -> RankObservation:
    if not sched.has_requests():
        return RankObservation(0, 0)
    obs = observe(sched)
    chunk = any(r.is_prefill_chunk for r in sched.running)
    return RankObservation(obs.prefill_tokens, obs.decode_seqs, partial_prefill=chunk)


def attach(core: Any) -> DpGate:
    """This core's gate, built and handshaken on first use (on every rank alike)."""
    gate: DpGate | None = core.__dict__.get(_ATTR)
    if gate is None:
        gate = DpGate(core)
        gate.handshake()
        setattr(core, _ATTR, gate)
    return gate


def _run_busy_loop(self: Any) -> Any:
    attach(self)
    return _ORIGINALS["run_busy_loop"](self)


def _process_engine_step(self: Any) -> Any:
    gate = attach(self)
    gate.step(self)
    sched = self.scheduler
    if gate.cap is not None:
        with capped_step(sched, gate.cap, decode_tokens(sched, gate.decodes)):
            return _ORIGINALS["_process_engine_step"](self)
    # vLLM's capacity escape would let a held rank prefill; cleared for this step
    # only, where the throttle applies (the rank has decodes running).
    if not (gate.throttle and any(not r.is_prefill_chunk for r in sched.running)):
        return _ORIGINALS["_process_engine_step"](self)
    bound = sched.prefill_capacity_bound
    sched.prefill_capacity_bound = False
    try:
        return _ORIGINALS["_process_engine_step"](self)
    finally:
        sched.prefill_capacity_bound = bound


def _should_throttle_prefills(self: Any) -> bool:
    gate: DpGate | None = self.__dict__.get(_ATTR)
    if gate is None or not gate.config.enabled:
        return bool(_ORIGINALS["_should_throttle_prefills"](self))
    return gate.throttle


_WRAPPERS = {
    "run_busy_loop": _run_busy_loop,
    "_process_engine_step": _process_engine_step,
    "_should_throttle_prefills": _should_throttle_prefills,
}


def installed() -> bool:
    return bool(_ORIGINALS)


def install() -> None:
    """Wrap ``DPEngineCoreProc``'s three methods (once per process)."""
    if _ORIGINALS:
        return
    missing = [name for name in TARGETS if not callable(getattr(DPEngineCoreProc, name, None))]
    if missing:
        raise ImportError(
            f"densegate's DP gate wraps DPEngineCoreProc.{'/'.join(TARGETS)}, but vllm "
            f"{vllm.__version__} has no {missing}; install a supported vLLM"
        )
    for name in TARGETS:
        if name in DPEngineCoreProc.__dict__:
            _OWN.add(name)
        _ORIGINALS[name] = getattr(DPEngineCoreProc, name)
        setattr(DPEngineCoreProc, name, _WRAPPERS[name])
    logger.debug("densegate: DP gate installed in pid %d", os.getpid())


def uninstall() -> None:
    """Put vLLM's methods back (tests)."""
    for name, fn in _ORIGINALS.items():
        if name in _OWN:
            setattr(DPEngineCoreProc, name, fn)
        else:
            delattr(DPEngineCoreProc, name)  # inherited again from EngineCoreProc
    _ORIGINALS.clear()
    _OWN.clear()
