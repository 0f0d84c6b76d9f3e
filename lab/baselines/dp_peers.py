"""Four engines' data-parallel prefill policies, rebuilt for the bench from their public
descriptions and sources (facts carried over, no code): one decision per tick per rank.

Every rank feeds its copy the same ``PeerView`` (the reduced vector), the same tick and
its own ``LocalView`` (this rank's plan and scheduler, no collective). A peer whose
engine decides once for every rank (``per_rank`` False) reads only the view and the
tick, so every copy keeps the same state and decides alike; a peer whose engine decides
per rank (``per_rank`` True: vLLM's cadence) also reads the local view, and the ranks'
decisions may differ. Where a peer needs a figure the runtime's vector lacks, the BENCH
appends slots (``densegate.lab.bench.dp_policies``): ``full_ranks`` (ranks whose capped
waiting tokens reach ``dense_tokens``), ``low_usage_ranks`` (ranks with waiting work whose
KV use is under the policy's low watermark), ``no_decode_ranks`` (ranks decoding nothing)
and ``batch_full_ranks`` (ranks whose decodes fill ``max_num_seqs``). The runtime's
vector is unchanged. Time is in ticks everywhere (one tick = one pass on every rank),
so wall-clock limits are simplified to tick limits.

``PEERS`` holds the engines' own rules first, then ``VARIANTS`` (rebuilds that are not
what the engine's code does, kept for comparison, never the bar), then ``ALIASES``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, NamedTuple, Protocol

__all__ = [
    "ALIASES",
    "PEERS",
    "VARIANTS",
    "AtomCoalescer",
    "LocalView",
    "PeerPolicy",
    "PeerView",
    "SglangDelayer",
    "TrtllmAdp",
    "TrtllmAdpBalance",
    "VllmCadence",
    "VllmCadenceGlobal",
]


class PeerView(NamedTuple):
    """The reduced vector as a peer reads it (sums over ranks)."""

    ranks: int
    waiting_ranks: int
    waiting_tokens: int
    decode_seqs: int
    kv_pressure_ranks: int
    partial_prefill_ranks: int
    full_ranks: int
    low_usage_ranks: int
    dense_tokens: int
    no_decode_ranks: int = 0
    """Ranks with no sequence decoding (TensorRT-LLM: no generation request)."""
    batch_full_ranks: int = 0
    """Ranks whose decoding sequences fill ``max_num_seqs`` (no free slot)."""


class LocalView(NamedTuple):
    """This rank's own facts this tick: its plan and its scheduler, nothing reduced."""

    waiting_tokens: int
    """Admissible prefill tokens of this rank's plan (capped at ``dense_tokens``)."""
    decode_seqs: int
    """Sequences this rank decodes this pass."""
    running: int
    """Requests in this rank's running list (decoding or mid-prefill)."""
    max_seqs: int
    """This rank's ``max_num_seqs``."""
    left_waiting: bool
    """Its last release (a pass this rank did not defer, without preemption) left
    requests waiting: vLLM's ``prefill_capacity_bound``."""

    @property
    def batch_full(self) -> bool:
        """Every sequence slot decodes (TensorRT-LLM: ``num_gen >= max_batch_size``)."""
        return self.decode_seqs >= self.max_seqs


class PeerPolicy(Protocol):
    """One rank's copy of a peer: ``decide`` is called once per tick on every rank."""

    low_watermark: float
    """KV-use fraction under which a rank with waiting work counts in ``low_usage_ranks``
    (0: never)."""
    per_rank: ClassVar[bool]
    """True when the decision reads ``local`` and may differ between ranks."""

    def decide(self, view: PeerView, tick: int, local: LocalView) -> tuple[bool, str]:
        """(fire, reason) for this rank this tick."""
        ...


@dataclass
class VllmCadence:
    """vLLM's DP prefill cadence, per rank as its scheduler does it (vllm #44558, merged;
    #46532, merged).

    #44558, the engine core (``DPEngineCoreProc._should_throttle_prefills``): a step is
    throttled unless ``prefill_schedule_interval <= 1`` or ``step_counter % interval ==
    0``; the counter is aligned on every rank, so the cadence is global. #44558, the
    scheduler (``defer_prefills``): a throttled step defers this rank's prefills (new and
    mid-flight chunks) only while some running request on THIS rank decodes and this
    rank is not ``prefill_capacity_bound``; that flag is set on each step that did not
    defer (and did not preempt) to whether the rank's waiting queue was left non-empty.
    #46532: the throttle is keyed on local prefill work, so a rank with no prefill
    tokens of its own has nothing deferred. Simplified: the step counter is the tick.
    """

    interval: int = 2
    low_watermark: float = 0.0
    per_rank: ClassVar[bool] = True

    def decide(self, view: PeerView, tick: int, local: LocalView) -> tuple[bool, str]:
        if self.interval <= 1 or tick % self.interval == 0:
            return True, "cadence"
        if local.left_waiting:
            return True, "capacity_bound"
        if local.decode_seqs == 0:
            return True, "no_decode"
        if local.waiting_tokens == 0:
            return True, "no_local_prefill"
        return False, "defer"


@dataclass
class VllmCadenceGlobal:
    """A variant of vLLM's cadence, stronger than vLLM's own: one decision for every
    rank at once from the reduced vector (the earlier rebuild of #44558).

    Off-cadence ticks hold every rank while any rank decodes, unless some rank has a
    full pass (``dense_tokens``) of prefill waiting, read as "capacity-bound". vLLM's
    scheduler decides per rank (``VllmCadence``); this one is shown, not the bar.
    """

    interval: int = 2
    low_watermark: float = 0.0
    per_rank: ClassVar[bool] = False

    def decide(self, view: PeerView, tick: int, local: LocalView) -> tuple[bool, str]:
        if view.waiting_ranks == 0:
            return True, "empty"
        if view.decode_seqs == 0:
            return True, "no_decode"
        if view.full_ranks > 0:
            return True, "capacity_bound"
        if tick % self.interval == 0:
            return True, "cadence"
        return False, "hold"


@dataclass
class SglangDelayer:
    """SGLang's PrefillDelayer (sglang 0.5.23, ``prefill_delayer.py``,
    ``_negotiate_should_allow_prefill_pure``).

    Ranks share (prefillable, under-watermark) every pass and classify the pass all /
    none / mixed prefillable; all and none allow and clear the delay state. Mixed
    allows when some prefillable rank is under the low token-usage watermark; else it
    delays while the delayed count is under ``max_delay_passes - 1``, so at most 29
    passes are held (``max_delay_passes`` 30) and the next mixed pass is released
    ("wait_timeout"). Not modelled: the extra delay an all-prefillable pass may take on
    a slot or queue condition, and wall-clock caps. The watermark's default here is 0
    (off): the bench does not assume a value.
    """

    max_delay_passes: int = 30
    low_watermark: float = 0.0
    delayed: int = 0
    per_rank: ClassVar[bool] = False

    def decide(self, view: PeerView, tick: int, local: LocalView) -> tuple[bool, str]:
        if view.waiting_ranks == 0:
            self.delayed = 0
            return True, "none_prefillable"
        if view.waiting_ranks == view.ranks:
            self.delayed = 0
            return True, "all_prefillable"
        if view.low_usage_ranks > 0:
            self.delayed = 0
            return True, "low_token_usage"
        if self.delayed < self.max_delay_passes - 1:
            self.delayed += 1
            return False, "delay"
        self.delayed = 0
        return True, "wait_timeout"


@dataclass
class AtomCoalescer:
    """ATOM's prefill coalescer (ROCm/ATOM #1611; defaults from #1670).

    One all-reduce(SUM) of a small int vector, time in ticks. Must-fire bounds
    first: no decode, KV high watermark, a TTFT limit (``ttft_ticks`` 200) and a
    partial-prefill deadline (``partial_ticks`` 100); then the alignment gate holds
    while fewer than ``dp_size`` ranks are prefillable; then it releases at the
    fill target (``target_fill`` 0.9 of every rank's pass) or after ``stall_ticks``
    (10) without growth of the aggregate fill. Simplified: the TTFT and partial
    limits count the current hold episode (no rank prefills during it, so the
    oldest waiting request is at least that old); the ``max_queue_ms`` guard and
    the KV low watermark (off by default) are not modelled.
    """

    target_fill: float = 0.9
    stall_ticks: int = 10
    ttft_ticks: int = 200
    partial_ticks: int = 100
    low_watermark: float = 0.0
    held: int = 0
    last_fill: int = 0
    grew_at: int = 0
    per_rank: ClassVar[bool] = False

    def decide(self, view: PeerView, tick: int, local: LocalView) -> tuple[bool, str]:
        fill = view.waiting_tokens
        if fill > self.last_fill:
            self.grew_at = tick
        self.last_fill = fill
        reason = self._release(view, fill, tick)
        if reason is None:
            self.held += 1
            return False, "hold"
        self.held = 0
        return True, reason

    def _release(self, view: PeerView, fill: int, tick: int) -> str | None:
        if view.waiting_ranks == 0:
            return "empty"
        if view.decode_seqs == 0:
            return "no_decode"
        if view.kv_pressure_ranks > 0:
            return "kv_high"
        if self.held + 1 >= self.ttft_ticks:
            return "ttft_limit"
        if view.partial_prefill_ranks > 0 and self.held + 1 >= self.partial_ticks:
            return "partial_deadline"
        if view.waiting_ranks < view.ranks:
            return None
        if fill >= self.target_fill * view.ranks * view.dense_tokens:
            return "target_fill"
        if tick - self.grew_at >= self.stall_ticks:
            return "stall"
        return None


@dataclass
class TrtllmAdp:
    """TensorRT-LLM's attention-DP balance as ``PyExecutor._balance_adp_requests`` does
    it (``tensorrt_llm/_torch/pyexecutor/py_executor.py``; ``AttentionDpConfig(
    enable_balance=True, timeout_iters=50, batching_wait_iters=10)``).

    Every iteration the ranks all-gather (context, generation) counts; one decision for
    every rank. When every rank has a free slot (generation requests under
    ``max_batch_size``) and context work, the timeout counter resets; then, if every
    rank also has a generation request, context waits ``batching_wait_iters`` iterations
    regardless of fill and goes on the next; if some rank has none, it goes now.
    Otherwise (some rank without context work, or with a full batch) it waits, counting
    toward ``timeout_iters``, and goes on the timeout or as soon as ANY rank lacks a
    generation request. The timeout counter runs on idle iterations too (no rank with
    context), as the source does. Simplified: iterations are ticks, a context request
    is admissible waiting work, a generation request a decoding sequence.
    """

    timeout_iters: int = 50
    batching_wait_iters: int = 10
    low_watermark: float = 0.0
    waited: int = 0
    batch_waited: int = 0
    per_rank: ClassVar[bool] = False

    def decide(self, view: PeerView, tick: int, local: LocalView) -> tuple[bool, str]:
        all_gen = view.no_decode_ranks == 0
        if view.batch_full_ranks == 0 and view.waiting_ranks == view.ranks:
            self.waited = 0
            if not all_gen:
                return True, "some_rank_no_gen"
            if self.batch_waited < self.batching_wait_iters:
                self.batch_waited += 1
                return False, "batching_wait"
            self.batch_waited = 0
            return True, "batching_done"
        self.waited += 1
        if not all_gen or self.waited >= self.timeout_iters:
            reason = "some_rank_no_gen" if not all_gen else "timeout"
            self.waited = 0
            return True, reason
        return False, "batch_full" if view.batch_full_ranks else "wait_all_ctx"


@dataclass
class TrtllmAdpBalance:
    """A variant of TensorRT-LLM's attention-DP balance (the earlier rebuild, from
    TensorRT-LLM #6061 and the ADP Balance Strategy tech blog); ``TrtllmAdp`` is the
    engine's own rule.

    Context work waits until every rank has some, or ``timeout_iters`` have passed;
    once every rank has it, it may wait up to ``batching_wait_iters`` more for the
    batch to fill (here: every rank's waiting tokens reach ``dense_tokens``).
    Nothing waits when no rank decodes; full batches are not looked at.
    """

    timeout_iters: int = 50
    batching_wait_iters: int = 10
    low_watermark: float = 0.0
    waited: int = 0
    batch_waited: int = 0
    per_rank: ClassVar[bool] = False

    def decide(self, view: PeerView, tick: int, local: LocalView) -> tuple[bool, str]:
        if view.waiting_ranks == 0:
            return self._fire("empty")
        if view.decode_seqs == 0:
            return self._fire("no_decode")
        if view.waiting_ranks < view.ranks:
            if self.waited + 1 >= self.timeout_iters:
                return self._fire("timeout")
            self.waited += 1
            return False, "hold"
        if view.full_ranks == view.ranks:
            return self._fire("balanced_full")
        if self.batch_waited >= self.batching_wait_iters:
            return self._fire("batching_wait")
        self.batch_waited += 1
        return False, "hold"

    def _fire(self, reason: str) -> tuple[bool, str]:
        self.waited = 0
        self.batch_waited = 0
        return True, reason


def _cadence(interval: int) -> Callable[[], PeerPolicy]:
    return functools.partial(VllmCadence, interval)


PEERS: dict[str, Callable[[], PeerPolicy]] = {
    "vllm-cadence-2": _cadence(2),
    "vllm-cadence-4": _cadence(4),
    "vllm-cadence-8": _cadence(8),
    "sglang-delayer": SglangDelayer,
    "atom-coalescer": AtomCoalescer,
    "trtllm-adp": TrtllmAdp,
    "vllm-cadence-global": VllmCadenceGlobal,
    "trtllm-adp-variant": TrtllmAdpBalance,
    "vllm-cadence": _cadence(2),
}
"""The peers by their ``--policies`` names, in table order; each a fresh copy with its
published defaults (vLLM's cadence at ``prefill_schedule_interval`` 2, 4 and 8)."""

VARIANTS = frozenset({"vllm-cadence-global", "trtllm-adp-variant"})
"""Names in ``PEERS`` that are not an engine's own rule: shown, never the best peer."""

ALIASES = {"vllm-cadence": "vllm-cadence-2"}
"""Old names kept so existing callers work: each runs the named peer's rule."""
