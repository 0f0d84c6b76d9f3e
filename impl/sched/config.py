"""What a scheduler is configured with: budgets, KV cache, chunking and the gate's parameters.

Validated where it is built, so a bad value is named before any pass runs.
"""

from __future__ import annotations

from dataclasses import dataclass

from densegate.impl.gate import GateConfig
from densegate.impl.validation import MAX_SIZE, check_bool, check_int, check_optional_int

__all__ = ["REFERENCE_CONFIG", "SIZES", "SchedulerConfig"]

SIZES = ("max_num_seqs", "max_num_batched_tokens", "block_size", "num_blocks", "max_model_len",
         "max_hold_passes", "pass_log_size", "stall_passes", "long_prefill_token_threshold",
         "dense_tokens")  # fmt: skip
"""The fields ``check_sizes`` bounds by ``validation.MAX_SIZE``."""


@dataclass(frozen=True)
class SchedulerConfig:
    """Scheduling limits and the gate's parameters.

    ``dense_tokens`` defaults to ``max_num_batched_tokens - max_num_seqs``: the
    prefill room a pass has even when every other sequence slot decodes, so a
    dense pass is always reachable. ``long_prefill_token_threshold`` caps one
    request's chunk (default: no cap beyond the pass budget). ``stall_passes`` > 0
    turns on the gate's STALL valve (``GateConfig``); 0, the default, keeps it off.
    An engine's sizes are at most ``validation.MAX_SIZE`` (``check_sizes``: a bigger one only
    fails to allocate); the scheduler alone takes any, as its proofs (R3) do.
    """

    max_num_seqs: int = 64
    max_num_batched_tokens: int = 2048
    block_size: int = 16
    num_blocks: int = 2048
    max_model_len: int = 4096
    enable_chunked_prefill: bool = True
    long_prefill_token_threshold: int | None = None
    dense_tokens: int | None = None
    max_hold_passes: int = 30
    gate_enabled: bool = True
    pass_log_size: int = 4096
    stall_passes: int = 0

    def __post_init__(self) -> None:
        owner = type(self).__name__
        for name in (
            "max_num_seqs",
            "max_num_batched_tokens",
            "block_size",
            "num_blocks",
            "max_model_len",
            "max_hold_passes",
            "pass_log_size",
        ):
            check_int(owner, name, getattr(self, name), 1)
        check_int(owner, "stall_passes", self.stall_passes, 0)
        for name in ("long_prefill_token_threshold", "dense_tokens"):
            check_optional_int(owner, name, getattr(self, name), 1)
        for name in ("enable_chunked_prefill", "gate_enabled"):
            check_bool(owner, name, getattr(self, name))
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError(
                f"{owner}.max_num_batched_tokens ({self.max_num_batched_tokens}) must be >= "
                f"max_num_seqs ({self.max_num_seqs}) so every running sequence can decode"
            )
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
            raise ValueError(
                f"{owner}.max_num_batched_tokens ({self.max_num_batched_tokens}) must be >= "
                f"max_model_len ({self.max_model_len}) when chunked prefill is off, or a long "
                "request could never be prefilled"
            )
        if self.dense_tokens is not None and self.dense_tokens > self.max_num_batched_tokens:
            raise ValueError(
                f"{owner}.dense_tokens ({self.dense_tokens}) must be <= max_num_batched_tokens "
                f"({self.max_num_batched_tokens}), or no pass could ever be dense"
            )

    def check_sizes(self) -> None:
        """``ValueError`` naming the first size over ``MAX_SIZE`` (an engine's check)."""
        owner = type(self).__name__
        for name in SIZES:
            check_optional_int(owner, name, getattr(self, name), None, MAX_SIZE)

    @property
    def dense(self) -> int:
        if self.dense_tokens is not None:
            return self.dense_tokens
        return max(1, self.max_num_batched_tokens - self.max_num_seqs)

    @property
    def chunk_cap(self) -> int:
        if not self.enable_chunked_prefill:
            return self.max_num_batched_tokens
        return self.long_prefill_token_threshold or self.max_num_batched_tokens

    def gate_config(self) -> GateConfig:
        return GateConfig(self.dense, self.max_hold_passes, self.gate_enabled, self.stall_passes)


REFERENCE_CONFIG = SchedulerConfig(
    max_num_seqs=128,
    max_num_batched_tokens=2048 + 128,
    block_size=16,
    num_blocks=8192,
    max_model_len=2048,
    max_hold_passes=30,
)
"""The scheduler densegate's commands run unless told otherwise (``densegate run`` and the
DP entry point's flags, ``bench`` and ``tune``), so their figures describe one scheduler:
128 sequences and 2176 tokens per pass, so a whole 2048-token prompt fits a pass beside a
full set of decodes (vLLM v0 ran prefill-only steps, so any prompt fitted its budget);
8192 KV blocks of 16. ``SchedulerConfig()``'s own defaults stay small, for embedding."""
