"""Four engines' data-parallel prefill policies, rebuilt for the bench from their public
descriptions (facts carried over, no code): one decision per tick from the reduced vector.

Each policy speaks the aligned gate's protocol: every rank feeds its copy the same
``PeerView`` (the reduced vector) and the same tick, so every copy keeps the same
state and decides alike. Where a peer needs a figure the runtime's vector lacks,
the BENCH appends slots (``densegate.lab.bench.dp_policies``): ``full_ranks``
(ranks whose capped waiting tokens reach ``dense_tokens``) and
``low_usage_ranks`` (ranks whose KV use is under the policy's low watermark).
The runtime's vector is unchanged. Time is in ticks everywhere (one tick = one
pass on every rank), so wall-clock limits are simplified to tick limits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Protocol

__all__ = [
    "PEERS",
    "AtomCoalescer",
    "PeerPolicy",
    "PeerView",
    "SglangDelayer",
    "TrtllmAdpBalance",
    "VllmCadence",
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


class PeerPolicy(Protocol):
    """One rank's copy of a peer: ``decide`` is called once per tick on every rank."""

    low_watermark: float
    """KV-use fraction under which a rank counts in ``low_usage_ranks`` (0: never)."""

    def decide(self, view: PeerView, tick: int) -> tuple[bool, str]:
        """(fire, reason) for this tick."""
        ...


@dataclass
class VllmCadence:
    """vLLM's DP prefill cadence (vllm #44558, merged).

    New prefills only on steps where ``step_counter % prefill_schedule_interval
    == 0``; deferred only while some running request decodes, and not when the
    scheduler is capacity-bound. Simplified: the step counter is the tick, and
    "capacity-bound" is read as some rank having a full pass (``dense_tokens``) of
    prefill waiting. ``interval`` 2 as in the public comparison.
    """

    interval: int = 2
    low_watermark: float = 0.0

    def decide(self, view: PeerView, tick: int) -> tuple[bool, str]:
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
    """SGLang's PrefillDelayer (sglang 0.5.23, ``prefill_delayer.py``).

    Ranks share their state every pass and classify the pass all / none / mixed
    prefillable. Mixed delays up to ``max_delay_passes`` (30), then releases; a
    rank under the low token-usage watermark forces the prefill through. Not
    modelled: the extra delay an all-prefillable pass may take on a slot or queue
    condition (capped by passes and ``max_delay_ms``), and wall-clock caps. The
    watermark's default here is 0 (off): the bench does not assume a value.
    """

    max_delay_passes: int = 30
    low_watermark: float = 0.0
    delayed: int = 0

    def decide(self, view: PeerView, tick: int) -> tuple[bool, str]:
        if view.waiting_ranks == 0:
            self.delayed = 0
            return True, "none_prefillable"
        if view.waiting_ranks == view.ranks:
            self.delayed = 0
            return True, "all_prefillable"
        if view.low_usage_ranks > 0:
            self.delayed = 0
            return True, "low_token_usage"
        if self.delayed >= self.max_delay_passes:
            self.delayed = 0
            return True, "max_delay"
        self.delayed += 1
        return False, "hold"


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

    def decide(self, view: PeerView, tick: int) -> tuple[bool, str]:
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
class TrtllmAdpBalance:
    """TensorRT-LLM's attention-DP balance (TensorRT-LLM #6061; ``AttentionDpConfig(
    enable_balance=True, timeout_iters=50, batching_wait_iters=10)``; the ADP
    Balance Strategy tech blog).

    Context work waits until every rank has some, or ``timeout_iters`` have passed;
    once every rank has it, it may wait up to ``batching_wait_iters`` more for the
    batch to fill (here: every rank's waiting tokens reach ``dense_tokens``).
    Simplified: iterations are ticks, and nothing waits when no rank decodes.
    """

    timeout_iters: int = 50
    batching_wait_iters: int = 10
    low_watermark: float = 0.0
    waited: int = 0
    batch_waited: int = 0

    def decide(self, view: PeerView, tick: int) -> tuple[bool, str]:
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


PEERS: dict[str, type[VllmCadence | SglangDelayer | AtomCoalescer | TrtllmAdpBalance]] = {
    "vllm-cadence": VllmCadence,
    "sglang-delayer": SglangDelayer,
    "atom-coalescer": AtomCoalescer,
    "trtllm-adp": TrtllmAdpBalance,
}
"""The peers by their ``--policies`` names; each built with its published defaults."""
