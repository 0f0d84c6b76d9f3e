"""A PACED step's prefill cap, applied through vLLM's own per-step token budget.

vLLM's ``Scheduler.schedule()`` spends one token budget per step
(``max_num_scheduled_tokens``, from ``--max-num-batched-tokens``) on the running
requests first (decodes and owed prefill chunks, in running order) and then on
admissions; each prefill chunk is also held to ``long_prefill_token_threshold``
when more than one request is eligible (vLLM's ``SchedulerConfig`` documents both;
the adaptive floor, ``long_prefill_token_threshold_adaptive``, can raise it). A cap of
C prefill tokens is therefore that budget lowered, for the one step, to the step's
decode tokens plus C, and the per-chunk threshold lowered to C with its floor off, so an
owed chunk ahead of the decodes in the running list cannot take their tokens. Both are
restored when the step returns. One corner is vLLM's order, not the cap's: two owed
chunks running at once (only after an uncapped step: a capped one leaves at most one)
take their tokens before later decodes do, so those decodes wait a step.

The attributes are vLLM internals (0.32 and 0.33 name them alike); ``check_budget`` reads
them once at start-up and names what is missing.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["BUDGET_ATTRS", "capped_step", "check_budget", "decode_tokens"]

BUDGET_ATTRS = ("max_num_scheduled_tokens", "adaptive_long_prefill_threshold")
"""The scheduler's attributes a cap lowers (beside ``scheduler_config``'s threshold)."""


def check_budget(sched: Any, version: str) -> None:
    """Raise ``ImportError`` naming the attributes a paced cap needs and ``sched`` lacks."""
    missing = [a for a in BUDGET_ATTRS if not hasattr(sched, a)]
    if not hasattr(sched.scheduler_config, "long_prefill_token_threshold"):
        missing.append("scheduler_config.long_prefill_token_threshold")
    if missing:
        raise ImportError(
            f"densegate's paced cap lowers vLLM's per-step token budget through {missing}, "
            f"which vllm {version} does not have; leave pace_tokens null (off) or install "
            "vllm>=0.32.0,<0.34"
        )


def decode_tokens(sched: Any, decode_seqs: int) -> int:
    """Tokens the step's decodes take: one each, plus the draft slots of speculative decoding."""
    spec = sched.vllm_config.speculative_config
    drafts = int(getattr(spec, "num_speculative_tokens", 0) or 0) if spec is not None else 0
    return decode_seqs * (1 + drafts)


@contextmanager
def capped_step(sched: Any, cap: int | None, decodes: int) -> Iterator[None]:
    """Inside: ``sched``'s next ``schedule()`` prefills at most ``cap`` tokens beside
    ``decodes`` decode tokens (``None``: unchanged)."""
    if cap is None:
        yield
        return
    sc = sched.scheduler_config
    saved = (sched.max_num_scheduled_tokens, sc.long_prefill_token_threshold,
             sched.adaptive_long_prefill_threshold)  # fmt: skip
    threshold = int(saved[1] or 0)
    sched.max_num_scheduled_tokens = min(int(saved[0]), decodes + cap)
    sc.long_prefill_token_threshold = cap if threshold <= 0 else min(threshold, cap)
    sched.adaptive_long_prefill_threshold = False
    try:
        yield
    finally:
        sched.max_num_scheduled_tokens = saved[0]
        sc.long_prefill_token_threshold = saved[1]
        sched.adaptive_long_prefill_threshold = saved[2]
