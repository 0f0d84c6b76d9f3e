"""The gate's observation of one vLLM step, computed before ``Scheduler.schedule`` runs.

``observe(scheduler)`` walks the running list and then the waiting queues the
way vLLM 0.32's ``schedule()`` will, without changing any state, and returns
what the step would run if the gate fired: the prefill tokens (owed chunks of
running prefills, then FCFS admissions) and the sequences that decode. Cost:
O(running + admitted), never O(waiting queue).

What it models exactly (single full-attention KV group, FCFS policy, no
prefix-cache hits): the token budget left after decodes, the per-request cap
``long_prefill_token_threshold`` (only when more than one request is eligible,
floored when adaptive), ``max_model_len``, free sequence slots, the free KV
blocks minus the blocks this step's decodes and chunks allocate, the whole
prompt fitting (``scheduler_reserve_full_isl``) plus the watermark, chunked
prefill off (a prompt must fit whole), and preemption (a step that preempts
admits nothing).

What it over-counts, never under-counts: prefix-cache hits (it counts the whole
prompt and, with prefix caching on, skips the KV check for admissions), LoRA
limits, encoder budgets, structured-output and KV-connector waits, sliding-window
or hybrid KV layouts (KV is then not checked at all), speculative decoding.
Over-counting the admissible tokens can only make the gate fire earlier (a
DENSE verdict on a step that then admits less); it never holds a step that
could have been dense.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["StepObservation", "observe"]

_ADMITTABLE = ("WAITING", "PREEMPTED")


@dataclass(frozen=True, slots=True)
class StepObservation:
    """What one step would run if the gate fired."""

    prefill_tokens: int
    """Owed chunks plus FCFS admissions (uncapped)."""
    decode_seqs: int
    """Running requests scheduled for a decode this step; when nothing is admissible
    (``prefill_tokens == 0`` without a walk) the running count, an upper bound: the
    gate's verdict (EMPTY) does not depend on it then."""
    preempts: bool
    """The step is predicted to preempt (then vLLM admits nothing)."""


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class _Kv:
    """Free blocks and per-request holdings of a single full-attention KV group."""

    def __init__(self, sched: Any) -> None:
        mgr = sched.kv_cache_manager
        managers = mgr.coordinator.single_type_managers
        self.exact = len(managers) == 1 and _full_attention(managers[0].kv_cache_spec)
        self.free = mgr.block_pool.get_num_free_blocks() if self.exact else 0
        self.block_size = managers[0].block_size if self.exact else 1
        self.held_by = managers[0].req_to_blocks if self.exact else {}
        self.watermark = mgr.watermark_blocks if self.exact else 0
        self.lookahead = sched.num_lookahead_tokens

    def held(self, request_id: str) -> int:
        blocks = self.held_by.get(request_id)
        return len(blocks) if blocks else 0

    def need(self, request_id: str, tokens: int, held: int | None = None) -> int:
        """Blocks to add so ``request_id`` has slots for ``tokens`` (plus lookahead)."""
        have = self.held(request_id) if held is None else held
        return max(0, _cdiv(tokens + self.lookahead, self.block_size) - have)


def _full_attention(spec: Any) -> bool:
    from vllm.v1.kv_cache_interface import FullAttentionSpec

    return (
        type(spec) is FullAttentionSpec
        and spec.sliding_window is None
        and spec.attention_chunk_size is None
    )


def _threshold(sched: Any) -> int:
    cfg = sched.scheduler_config
    running, waiting = sched.get_request_counts()
    eligible = running + waiting
    thr = int(cfg.long_prefill_token_threshold) if eligible > 1 else 0
    if thr > 0 and sched.adaptive_long_prefill_threshold:
        thr = max(thr, cfg.max_num_batched_tokens // eligible)
    return thr


def observe(sched: Any) -> StepObservation:
    """The step ``sched.schedule()`` would run now if nothing deferred prefills."""
    from vllm.v1.core.sched.interface import PauseState

    if sched._pause_state == PauseState.PAUSED_ALL:
        return StepObservation(0, 0, False)
    running = sched.running
    room = sched.max_num_active_reqs - len(running) - sched.num_waiting_for_streaming_input
    queued = sched.waiting or sched.kv_holding_waiting
    if (room <= 0 or not queued) and not any(r.is_prefill_chunk for r in running):
        # Nothing admissible: the gate fires EMPTY whatever decodes, so the
        # walk is skipped and decode_seqs is the running count (an upper bound).
        return StepObservation(0, len(running), False)
    budget = int(sched.max_num_scheduled_tokens)
    max_len = int(sched.max_model_len)
    thr = _threshold(sched)
    kv = _Kv(sched)
    step = sched.current_step + 1  # schedule() counts the step before walking
    sampled = sched.num_sampled_tokens_per_step
    end = len(running)  # preemption takes from the end: running[end:] are the victims
    prefill = decodes = 0
    preempts = False
    exact = kv.exact
    held_get = kv.held_by.get
    bs, la, free = kv.block_size, kv.lookahead, kv.free
    i = 0
    # One pass in vLLM's order; locals only, as this runs every step with decodes.
    while i < end and budget > 0:
        r = running[i]
        i += 1
        ph = r.num_output_placeholders
        done = r.num_computed_tokens
        if ph > 0 and done + 2 - ph >= r.num_prompt_tokens + r.max_tokens:
            continue  # async: the in-flight step already reaches max_tokens
        if step < r.next_decode_eligible_step:
            continue
        n = r.num_tokens_with_spec + ph - done
        if 0 < thr < n:
            n = thr
        n = min(n, budget, max_len - done - sampled)
        if n <= 0:
            continue
        if exact:
            blocks = held_get(r.request_id)
            need = (done + n + la + bs - 1) // bs - (len(blocks) if blocks else 0)
            if need > free:
                while need > free and end > i:  # r is running[i - 1]
                    end -= 1  # FCFS: vLLM preempts the newest running request
                    free += kv.held(running[end].request_id)
                    preempts = True
                if need > free:
                    preempts = True  # r preempts itself; the running walk ends
                    break
            if need > 0:
                free -= need
        if r.is_prefill_chunk:
            prefill += n
        else:
            decodes += 1
        budget -= n
    kv.free = free
    if preempts:
        return StepObservation(prefill, decodes, True)
    prefill += _admissions(sched, kv, budget, thr, end)
    return StepObservation(prefill, decodes, False)


def _admissions(sched: Any, kv: _Kv, budget: int, thr: int, running: int) -> int:
    """Tokens FCFS admission takes from the waiting queues, in vLLM's order."""
    from vllm.v1.core.sched.interface import PauseState

    cfg = sched.scheduler_config
    slots = sched.max_num_active_reqs - running - sched.num_waiting_for_streaming_input
    chunked = cfg.enable_chunked_prefill
    full_fit = sched.scheduler_reserve_full_isl
    check_kv = kv.exact and not sched.cache_config.enable_prefix_caching
    max_len = int(sched.max_model_len)
    has_scheduled = running > 0
    queues = [sched.kv_holding_waiting]
    if sched._pause_state == PauseState.UNPAUSED:
        queues.append(sched.waiting)
    total = 0
    for queue in queues:
        for r in queue:
            if budget <= 0 or slots <= 0:
                return total
            if r.status.name not in _ADMITTABLE:
                continue  # vLLM skips blocked requests and scans on
            if r.num_stale_output_tokens and not r.drop_stale_output:
                continue
            done = r.num_computed_tokens
            n = r.num_tokens - done
            if 0 < thr < n:
                n = thr
            if not chunked and n > budget:
                return total
            n = min(n, budget)
            if n <= 0:
                return total
            if check_kv:
                held = kv.held(r.request_id)
                mark = kv.watermark if has_scheduled else 0
                if full_fit:
                    whole = _cdiv(min(r.num_tokens, max_len), kv.block_size) - held
                    if whole + mark > kv.free:
                        return total
                need = kv.need(r.request_id, done + n, held)
                if need + mark > kv.free:
                    return total
                kv.free -= need
            total += n
            budget -= n
            slots -= 1
            has_scheduled = True
    return total
