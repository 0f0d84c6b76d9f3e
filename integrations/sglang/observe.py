"""The gate's observation of one SGLang pass, taken before the pass builds its prefill batch.

``observe(scheduler, running_batch, limit)`` reads, without changing any state,
what ``Scheduler.get_new_batch_prefill`` could prefill this pass if nothing
delayed it, under the budgets SGLang 0.5.23's ``PrefillAdder`` applies
(``sglang/srt/managers/schedule_policy.py``, described there and in
``scheduler.py``'s ``_get_new_batch_prefill_raw``): the owed chunk of a chunked
prefill first, then the waiting queue in order. Cost: O(running + admitted),
and the walk stops once ``limit`` (the gate's ``dense_tokens``) is reached.

What it models: the pass's input budget (``--max-prefill-tokens``, less one
token per running request with ``--enable-mixed-chunk``), the chunk budget
(``--chunked-prefill-size``; one chunked request per pass), request slots
(``--max-running-requests`` less the running batch, the request-pool rows
``get_num_allocatable_reqs`` reports, ``--prefill-max-requests``), and KV:
SGLang's own prefill budget for the pool (free plus evictable tokens) less the
decode room SGLang reserves for running requests (their clipped
``max_new_tokens`` left, times the new-token ratio) and, per admission, its
extend plus clipped ``max_new_tokens`` plus a page (a cut chunk reserves no
decode room); a request that does not fit whole stops the walk, chunked or not.

What it over-counts: prefix-cache hits of requests not yet matched this pass
(it counts ``seqlen - prefix_len`` with the prefix of the last match, 0 for a
new request), page rounding, LoRA and grammar waits, hierarchical-cache
prefetch waits, SWA/Mamba hybrid pools (it reads only the full-attention
budget), priority preemption. It can under-count only when a request's last
prefix match was evicted since (it then needs more tokens than counted).
Over-counting makes the gate fire earlier, never hold a pass that could be dense.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["PassObservation", "observe"]


@dataclass(frozen=True, slots=True)
class PassObservation:
    """What one rank's pass would prefill if the gate fired, and what it decodes."""

    prefill_tokens: int
    """Owed chunk plus admissions, stopped at the walk's limit (the gate caps it anyway)."""
    decode_seqs: int
    """Requests in the running batch: each decodes this pass."""
    partial_prefill: bool
    """A chunked prefill is mid-flight: its next chunk runs whatever the gate says
    (SGLang's ``add_chunked_req`` ignores the delayer's verdict)."""
    running_slots: int = 0
    """The rank's request slots, SGLang's run-time ``max_running_requests`` (0: unknown): the
    busy wait's default is sized from the ranks' sum where the flag was left to SGLang."""


def _clip() -> int:
    from sglang.srt.managers.schedule_policy import CLIP_MAX_NEW_TOKENS

    return int(CLIP_MAX_NEW_TOKENS)


def _decode_room(req: Any, clip: int) -> int:
    params = req.sampling_params
    return min(max(int(params.max_new_tokens) - len(req.output_ids), 0), clip)


def observe(sched: Any, running_batch: Any, limit: int) -> PassObservation:
    """What ``sched.get_new_batch_prefill(running_batch)`` could prefill now, undelayed."""
    running = list(running_batch.reqs)
    running_bs = len(running)
    mixed = running_bs if sched.is_mixed_chunk else 0
    budget = int(sched.max_prefill_tokens) - mixed
    chunk = sched.chunked_prefill_size
    chunk = None if chunk is None or chunk <= 0 else int(chunk) - mixed
    chunked = sched.chunked_req
    rows = int(sched.max_running_requests)  # run time: set by SGLang's model worker's info
    if (not sched.waiting_queue or running_batch.batch_is_full) and chunked is None:
        return PassObservation(0, running_bs, False, rows)  # SGLang returns before negotiating
    clip = _clip()
    ratio = float(sched.new_token_ratio_tracker.current)
    mem = sched.token_to_kv_pool_allocator.create_prefill_budget(
        sched.tree_cache, num_mixed_decode_tokens=mixed
    )
    kv = float(mem.remaining_total)
    for r in running:
        kv -= _decode_room(r, clip) * (1.0 if r.sampling_params.ignore_eos else ratio)
    page = int(sched.page_size)
    tokens = 0
    if chunked is not None:
        owed = max(0, chunked.seqlen - chunked.prefix_len)
        n = max(0, min(owed, int(kv), chunk if chunk is not None else owed))
        tokens += n
        budget -= n
        kv -= n + page
        if chunk is not None:
            chunk -= n
    slots = min(
        rows - running_bs,
        int(sched.get_num_allocatable_reqs(running_bs, running_batch=running_batch)),
    )
    from sglang.srt.runtime_context import get_schedule

    cap = get_schedule().prefill_max_requests
    if cap is not None:
        slots = min(slots, int(cap))
    for admitted, req in enumerate(sched.waiting_queue):
        if tokens >= limit or admitted >= slots or budget <= 0 or kv <= 0:
            break
        if chunk is not None and chunk <= 0:
            break
        extend = max(0, req.seqlen - req.prefix_len)
        room = _decode_room(req, clip)
        if extend + room + page >= kv:
            break  # the whole request must fit the KV budget, chunked or not
        if chunk is None:
            if admitted and extend >= budget:
                break  # without chunking only the first request may pass the input cap
            take = extend
        else:
            take = min(extend, chunk)
        if take <= 0:
            break
        tokens += take
        budget -= take
        kv -= take + page + (room if take == extend else 0)  # a cut chunk reserves no decode
        if chunk is not None:
            chunk -= take
            if take < extend:
                break  # one chunked request per pass
    return PassObservation(tokens, running_bs, chunked is not None, rows)
