"""densegate's aligned gate standing where SGLang 0.5.23's ``PrefillDelayer`` stood.

SGLang's scheduler builds one ``PrefillDelayer`` per scheduler process
(``Scheduler.init_schedule_policy``) and, every pass, a
``PrefillDelayerSinglePassExecutor`` around it (``get_new_batch_prefill``).
The executor asks the delayer once per pass: at the first request
``PrefillAdder`` could admit or at a chunk continuation, and otherwise in
``finalize`` with ``local_prefillable=False``, so every rank joins the pass's
collective even with nothing to schedule (``sglang/srt/managers/prefill_delayer.py``,
0.5.23). ``DenseGatePrefillDelayer`` keeps SGLang's executor, and with it that
join, and answers its one call per pass with ``AlignedGate``:

* the plugin's hook on ``get_new_batch_prefill`` records, before the pass
  builds its batch, what it could prefill and what decodes (``observe``);
* the rank's gate vector (``densegate.impl.dp_gate``) plus one slot for SGLang's
  own ``local_prefillable`` and one for its run-time request slots (which size the
  busy wait's default at the first pass where ``--max-running-requests`` was left to
  SGLang) goes through SGLang's own ``all_gather_single``
  over the group SGLang's delayer uses (the TP group's CPU group, or its device
  group when SGLang's NCCL all-gather flag is on), and the DP ranks' rows are
  summed: an all-reduce(SUM) by the collective SGLang already runs each pass;
* every rank decides from the same sum and the same tick (its count of these
  calls, equal everywhere because every rank makes exactly one per pass).

The answer goes back in SGLang's ``_NegotiateOutput``, with SGLang's reason
labels, so its metrics and debug log keep working; densegate's reasons are in
``log``. Not used: SGLang's low token-usage watermark escape, its queue
trigger and its ``max_delay_ms`` wall-clock cap (a clock differs between
ranks; the pass budget K bounds every hold).
"""

from __future__ import annotations

import collections
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch
from sglang.srt.distributed.utils import all_gather_single
from sglang.srt.environ import envs
from sglang.srt.managers import prefill_delayer as sglang_delayer
from sglang.srt.runtime_context import get_parallel, get_schedule

from densegate.impl.dp_gate import VECTOR_SIZE, AlignedGate, RankObservation, ReducedObservation
from densegate.impl.gate import Reason
from densegate.integrations.sglang.config import (
    BUSY,
    busy_of_slots,
    gate_config,
    settings_from_env,
    sglang_reason,
)
from densegate.integrations.sglang.observe import PassObservation, observe

__all__ = [
    "LOG_SIZE",
    "PREFILLABLE",
    "SLOTS",
    "DenseGatePrefillDelayer",
    "GatePass",
    "around_get_new_batch_prefill",
]

PREFILLABLE = VECTOR_SIZE
"""The slot after the gate's: 1 if SGLang's adder found an admissible candidate on this rank."""
RUNNING_SLOTS = VECTOR_SIZE + 1
"""The rank's run-time request slots (``PassObservation.running_slots``): their sum sizes the
busy wait's default at the first pass where ``--max-running-requests`` was left to SGLang."""
SLOTS = VECTOR_SIZE + 2
LOG_SIZE = 4096
"""Passes kept in ``log`` (oldest dropped first)."""


@dataclass(frozen=True, slots=True)
class GatePass:
    """One pass as the gate saw and decided it on this rank."""

    tick: int
    fire: bool
    reason: Reason
    hold_passes: int
    """The gate's counter after the decision."""
    reduced: tuple[int, ...]
    """The summed vector: the gate's slots, then the ranks SGLang found prefillable."""
    local: RankObservation
    """This rank's own contribution (differs between ranks; the decision never reads it)."""
    local_prefillable: bool

    def shared(self) -> tuple[int, bool, str, int, tuple[int, ...]]:
        """What must be equal on every rank."""
        return (self.tick, self.fire, self.reason.name, self.hold_passes, self.reduced)


class DenseGatePrefillDelayer:
    """SGLang's ``PrefillDelayer`` interface (constructor, the executor's one call), gated."""

    def __init__(
        self,
        max_delay_passes: int,
        token_usage_low_watermark: float | None,
        metrics_collector: Any = None,
        debug_log_enabled: bool = True,
    ) -> None:
        schedule, parallel = get_schedule(), get_parallel()
        self.settings = settings_from_env(os.environ)
        attn_dp = bool(parallel.attn_dp_enabled)
        self.gate_config = gate_config(
            self.settings,
            max_delay_passes=max_delay_passes,
            max_prefill_tokens=schedule.max_prefill_tokens,
            chunked_prefill_size=schedule.chunked_prefill_size,
            max_running_requests=schedule.max_running_requests,
            ranks=int(parallel.num_dp_ranks) if attn_dp else 1,
        )
        self.token_usage_low_watermark = token_usage_low_watermark  # not part of the gate
        nccl = (
            schedule.disable_overlap_schedule
            or envs.SGLANG_NCCL_ALL_GATHER_IN_OVERLAP_SCHEDULER_SYNC_BATCH.get()
        )
        tp = parallel.tp_group
        self._start(
            num_dp_ranks=int(parallel.num_dp_ranks),
            attn_dp_enabled=attn_dp,
            group=tp.device_group if nccl else tp.cpu_group,
            device=tp.device if nccl else "cpu",
            width=int(parallel.attn_cp_size) * int(parallel.attn_tp_size),
            metrics_collector=metrics_collector,
            debug_log=bool(sglang_delayer._DEBUG_LOG and debug_log_enabled),
        )
        _check_scheduler_hook()

    def _start(
        self,
        *,
        num_dp_ranks: int,
        attn_dp_enabled: bool,
        group: Any,
        device: Any,
        width: int,
        metrics_collector: Any,
        debug_log: bool,
    ) -> None:
        """Everything but SGLang's config reads (``gate_config`` and ``settings`` set first)."""
        # Read by SGLang's executor (its attempted-batch estimate) as on its own delayer.
        self.num_dp_ranks = num_dp_ranks
        self.attn_dp_enabled = attn_dp_enabled
        self.world_size = num_dp_ranks if attn_dp_enabled else 1
        self.gate = AlignedGate(self.gate_config, self.world_size)
        self._group = group
        self._device = device
        self._buffer = torch.zeros(
            (self.world_size, width, SLOTS), dtype=torch.int64, device=device
        )
        self._metrics_collector = metrics_collector
        self._debug_log_enabled = debug_log
        self.tick = 0
        self.log: collections.deque[GatePass] = collections.deque(maxlen=LOG_SIZE)
        self.counts: collections.Counter[Reason] = collections.Counter()
        self._pending: PassObservation | None = None
        self._held_since: float | None = None
        self.reduce: Callable[[list[int]], list[int]] = self._gather_sum
        """The pass's collective (a SUM over the DP ranks); an in-process stand-in may replace
        it, as SGLang's own CPU test replaces its delayer's ``_gather_info``."""

    # -- what the pass could do --------------------------------------------------------
    def observe_pass(self, observation: PassObservation) -> None:
        """This pass's observation; the plugin's hook records it before the pass runs."""
        if not isinstance(observation, PassObservation):
            raise TypeError(f"observe_pass needs a PassObservation, got {observation!r}")
        self._pending = observation

    def observe_scheduler(self, scheduler: Any, running_batch: Any) -> None:
        """Observe SGLang's scheduler before ``get_new_batch_prefill`` changes anything."""
        self.observe_pass(observe(scheduler, running_batch, self.gate_config.dense_tokens))

    # -- the executor's one call per pass ----------------------------------------------
    def _negotiate_should_allow_prefill(
        self,
        local_prefillable: bool,
        token_usage: float,
        running_batch: int = 0,
        max_prefill_bs: int = 0,
        max_running_requests: int = 0,
        waiting_queue_len: int = 0,
    ) -> Any:
        obs = self._pending
        if obs is None:
            raise RuntimeError(
                "DenseGatePrefillDelayer: no observation for this pass; the plugin's hook on "
                "Scheduler.get_new_batch_prefill records one (is the plugin loaded?)"
            )
        self._pending = None
        pressured = float(token_usage) >= self.settings.kv_high_watermark
        local = RankObservation(obs.prefill_tokens, obs.decode_seqs, pressured, obs.partial_prefill)
        total = self.reduce(
            [*self.gate.contribution(local), int(bool(local_prefillable)), obs.running_slots]
        )
        if self.tick == 0:
            self._size_busy(total[RUNNING_SLOTS])
        reduced = ReducedObservation.from_sum(total[:VECTOR_SIZE], self.world_size)
        waited = self.gate.hold_passes
        decision = self.gate.decide(reduced, self.tick)
        self.log.append(
            GatePass(
                self.tick,
                decision.fire,
                decision.reason,
                self.gate.hold_passes,
                tuple(total),
                local,
                bool(local_prefillable),
            )
        )
        self.tick += 1
        self.counts[decision.reason] += 1
        now = time.perf_counter()  # for SGLang's wait histogram only, never the decision
        wait_s = 0.0
        if not decision.fire:
            self._held_since = now if self._held_since is None else self._held_since
        elif self._held_since is not None:
            wait_s, self._held_since = now - self._held_since, None
        w = reduced.waiting_ranks
        return sglang_delayer._NegotiateOutput(
            next_state=None,
            input_estimation="none" if w == 0 else "all" if w == self.world_size else "mixed",
            output_allow=decision.fire,
            output_reason=sglang_reason(decision.reason, waited > 0),
            num_prefillable=total[PREFILLABLE],
            num_token_watermark_force_allow=0,
            wait_forward_passes=waited if decision.fire else 0,
            wait_seconds=wait_s,
        )

    def _size_busy(self, slots: int) -> None:
        """At the first pass, before any decision (the gate is in its initial state): the
        busy wait's default, where the flag left it unsized, from the group's run-time slots,
        the same sum on every rank."""
        if self.settings.busy_decodes is not BUSY or self.gate_config.busy_decodes is not None:
            return
        busy = busy_of_slots(slots)
        if busy is not None:
            self.gate_config = replace(self.gate_config, busy_decodes=busy)
            self.gate = AlignedGate(self.gate_config, self.world_size)

    def _gather_sum(self, vector: list[int]) -> list[int]:
        """SUM over the DP ranks, through SGLang's all-gather of every TP rank's vector."""
        mine = torch.tensor(vector, dtype=torch.int64, device=self._device)
        all_gather_single(self._buffer.view(-1), mine, group=self._group)
        # Attention-TP ranks of one DP rank run the same scheduler: count each DP rank once.
        out: list[int] = self._buffer[:, 0, :].sum(dim=0).tolist()
        return out

    def summary(self) -> str:
        """One line for logs: passes by reason and the gate's counter."""
        names = sorted((r.name, n) for r, n in self.counts.items())
        by = " ".join(f"{name}={n}" for name, n in names)
        return f"densegate: {self.tick} passes ({by}), hold_passes={self.gate.hold_passes}"


def around_get_new_batch_prefill(
    original: Callable[..., Any], scheduler: Any, *args: Any, **kwargs: Any
) -> Any:
    """The AROUND hook on ``Scheduler.get_new_batch_prefill``: observe, then run the pass."""
    delayer = getattr(scheduler, "prefill_delayer", None)
    if isinstance(delayer, DenseGatePrefillDelayer):
        running_batch = args[0] if args else kwargs["running_batch"]
        delayer.observe_scheduler(scheduler, running_batch)
    return original(scheduler, *args, **kwargs)


def _check_scheduler_hook() -> None:
    """A delayer inside SGLang's scheduler needs the observation hook: say so at startup."""
    module = sys.modules.get("sglang.srt.managers.scheduler")
    if module is None:
        return  # built outside SGLang's scheduler (a test, the side-by-side benchmark)
    fn = module.Scheduler.get_new_batch_prefill
    cells = getattr(fn, "__closure__", None) or ()
    if not any(c.cell_contents is around_get_new_batch_prefill for c in cells):
        raise RuntimeError(
            "DenseGatePrefillDelayer needs the densegate plugin's hook on "
            "sglang.srt.managers.scheduler.Scheduler.get_new_batch_prefill, which is not "
            "applied: load it through sglang.srt.plugins.load_plugins (SGLANG_PLUGINS, if set, "
            "must name 'densegate')"
        )
