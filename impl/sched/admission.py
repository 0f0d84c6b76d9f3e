"""Whether a request can ever be served, decided before it is queued (or its prompt built).

A request no pass could ever run (empty, over ``max_model_len``, more KV blocks
than the whole cache, a token outside the vocabulary) is an outcome, not an
error: the engine ends it REJECTED with the reason given here. Wrong argument
types are errors, raised at once (``checked_request``).
"""

from __future__ import annotations

from collections.abc import Sequence

from densegate.impl.sched.block_manager import blocks_for
from densegate.impl.sched.config import SchedulerConfig
from densegate.impl.validation import int_problem, is_int

__all__ = ["checked_request", "length_rejection", "rejection"]


def length_rejection(cfg: SchedulerConfig, prompt_len: int, max_tokens: int) -> str | None:
    """Why a request of these lengths could never be served under ``cfg``, or None: read from
    the lengths alone, so a trace is checked before any prompt is built."""
    if prompt_len == 0:
        return "empty prompt"
    if max_tokens < 1:
        return f"max_tokens must be >= 1, got {max_tokens}"
    total = prompt_len + max_tokens
    if total > cfg.max_model_len:
        return (
            f"prompt ({prompt_len}) + max_tokens ({max_tokens}) = {total} exceeds "
            f"max_model_len ({cfg.max_model_len})"
        )
    need = blocks_for(total, cfg.block_size)
    if need > cfg.num_blocks:
        return f"needs {need} KV blocks, the whole cache has {cfg.num_blocks}"
    return None


def rejection(
    cfg: SchedulerConfig, vocab: int | None, prompt_token_ids: Sequence[int], max_tokens: int
) -> str | None:
    """``length_rejection``, then a token id outside ``[0, vocab)`` (``>= 0`` without one)."""
    why = length_rejection(cfg, len(prompt_token_ids), max_tokens)
    if why is not None:
        return why
    if not prompt_token_ids or (  # in C first: the loop only names the first bad id
        min(prompt_token_ids) >= 0 and (vocab is None or max(prompt_token_ids) < vocab)
    ):
        return None
    for i, t in enumerate(prompt_token_ids):
        if t < 0 or (vocab is not None and t >= vocab):
            bound = f"[0, {vocab})" if vocab is not None else ">= 0"
            return f"token id {t} at position {i} is outside the vocabulary {bound}"
    return None


def checked_request(prompt_token_ids: object, max_tokens: object) -> list[int]:
    """The prompt as a list of ints; ``ValueError`` naming a value of the wrong type."""
    if isinstance(prompt_token_ids, (str, bytes)) or not isinstance(prompt_token_ids, Sequence):
        raise ValueError(f"prompt_token_ids must be a list of ints, got {prompt_token_ids!r}")
    exact = set(map(type, prompt_token_ids)) <= {int}  # in C: the usual case, all ints
    bad = None if exact else next((t for t in prompt_token_ids if not is_int(t)), None)
    if bad is not None:
        raise ValueError(f"prompt_token_ids must hold ints, got {bad!r}")
    why = int_problem("max_tokens", max_tokens)
    if why is not None:
        raise ValueError(why)
    return list(prompt_token_ids)
