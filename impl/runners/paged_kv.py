"""The paged K/V cache and the flat pass the paged forward runs over it.

A pass is prefill rows (one ``PrefillSpan`` per chunk) then decode rows (in
``DecodeGroup`` groups); ``ForwardInputs`` holds them with the slot mapping that
says where each row's K/V is written.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from densegate.impl.runners.model_config import ModelConfig
from densegate.impl.sched.batch import KVLayout

__all__ = ["DecodeGroup", "ForwardInputs", "PagedKVCache", "PrefillSpan"]


class PagedKVCache:
    """Flat K/V cache, [n_layers, num_slots + 1, n_kv_heads, head_dim] each.

    The extra last slot (``pad_slot``) absorbs writes of padded rows; block id
    ``pad_block == num_blocks`` in a block table maps every position to it. Zero
    initialised so that masked, never-written slots are finite (0 * NaN would
    poison the attention sum).
    """

    def __init__(
        self, config: ModelConfig, layout: KVLayout, device: torch.device, dtype: torch.dtype
    ) -> None:
        self.block_size: int = layout.block_size
        self.num_slots: int = layout.num_slots
        self.pad_slot: int = layout.num_slots
        self.pad_block: int = layout.num_blocks
        self.max_blocks_per_seq: int = layout.max_blocks_per_seq
        shape = (config.n_layers, self.num_slots + 1, config.n_kv_heads, config.head_dim)
        self.k = torch.zeros(shape, device=device, dtype=dtype)
        self.v = torch.zeros(shape, device=device, dtype=dtype)
        # Index tensors for the widest decode context (max_blocks_per_seq whole blocks),
        # built once so a captured graph allocates nothing for them; a narrower eager
        # context uses a prefix of each (a view).
        width = self.max_blocks_per_seq * self.block_size
        ar = torch.arange(width, device=device)
        self.ctx_block_index: Tensor = ar // self.block_size
        self.ctx_block_offset: Tensor = ar % self.block_size
        self.key_positions: Tensor = ar

    @property
    def decode_width(self) -> int:
        """Positions in the static (graph) decode context: ``max_blocks_per_seq * block_size``."""
        return int(self.key_positions.numel())

    def context_slots(self, block_tables: Tensor) -> Tensor:
        """Slots of positions ``0 .. W - 1`` per row, ``W = block_tables.shape[1] * block_size``.

        Entries equal to ``pad_block`` land past the real slots and are clamped
        onto ``pad_slot``: arithmetic on shapes only, no host sync.
        """
        width = block_tables.shape[1] * self.block_size
        if width > self.decode_width:
            raise ValueError(
                f"block tables of {block_tables.shape[1]} blocks exceed max_blocks_per_seq "
                f"{self.max_blocks_per_seq}"
            )
        blocks = block_tables.index_select(1, self.ctx_block_index[:width])
        slots: Tensor = blocks * self.block_size + self.ctx_block_offset[:width]
        return slots.clamp_(max=self.pad_slot)


@dataclass(frozen=True, slots=True)
class PrefillSpan:
    """One prefill chunk inside a flat pass: rows ``row_start .. row_start + n_rows - 1``.

    ``ctx_slots`` [L] are the slots of the sequence's positions ``0 .. L - 1``,
    where ``L = start + n_rows``; ``allowed`` [n_rows, L] is the causal mask. Both
    are ``None`` for a chunk starting at position 0: it attends causally to its own
    K/V, so neither a gather nor a mask is needed.
    """

    row_start: int
    n_rows: int
    ctx_slots: Tensor | None
    allowed: Tensor | None


@dataclass(frozen=True, slots=True)
class DecodeGroup:
    """Decode rows ``row_start .. row_start + n_rows - 1``, one token each.

    ``block_tables`` [n_rows, W] are padded with ``pad_block``; ``W`` whole blocks
    (``W <= max_blocks_per_seq``) is the context every row of the group gathers.
    """

    row_start: int
    n_rows: int
    block_tables: Tensor


@dataclass(frozen=True, slots=True)
class ForwardInputs:
    """A flat pass: prefill rows (one span per chunk) first, then the decode groups' rows.

    ``sample_rows`` selects (and orders) the rows whose logits are returned;
    ``None`` means every row (the decode graph).
    """

    token_ids: Tensor
    positions: Tensor
    slot_mapping: Tensor
    prefills: tuple[PrefillSpan, ...]
    decodes: tuple[DecodeGroup, ...]
    sample_rows: Tensor | None
