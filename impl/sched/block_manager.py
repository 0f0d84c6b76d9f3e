"""Paged KV blocks: a free list, and the block tables requests hold.

No prefix sharing: a block belongs to at most one request, so the count of free
blocks plus the blocks held by requests is always ``num_blocks`` (proved as S2
over the spec, checked here by ``check_conservation``).
"""

from __future__ import annotations

from collections.abc import Iterable

from densegate.impl.validation import check_int

__all__ = ["BlockManager", "blocks_for"]


def blocks_for(num_tokens: int, block_size: int) -> int:
    """Blocks needed to hold ``num_tokens`` positions."""
    return -(-num_tokens // block_size)


class BlockManager:
    """Hands out and takes back KV blocks; O(1) per block."""

    __slots__ = ("_free", "block_size", "num_blocks")

    def __init__(self, num_blocks: int, block_size: int) -> None:
        check_int("BlockManager", "num_blocks", num_blocks, 1)
        check_int("BlockManager", "block_size", block_size, 1)
        self.num_blocks = num_blocks
        self.block_size = block_size
        # Popped from the end: low block ids are handed out first.
        self._free = list(range(num_blocks - 1, -1, -1))

    @property
    def num_free(self) -> int:
        return len(self._free)

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def allocate(self, table: list[int], num_tokens: int) -> None:
        """Grow ``table`` until it holds ``num_tokens`` positions."""
        free = self._free
        need = self.blocks_for(num_tokens) - len(table)
        if need > len(free):
            raise RuntimeError(f"KV exhausted: need {need} blocks, {len(free)} free")
        if need > 0:  # the free list's last ``need`` blocks, in the order popping gives
            cut = len(free) - need
            taken = free[cut:]
            del free[cut:]
            taken.reverse()
            table.extend(taken)

    def free(self, table: list[int]) -> None:
        self._free.extend(reversed(table))
        table.clear()

    def check_conservation(self, tables: Iterable[list[int]]) -> None:
        """Raise if any block is lost, duplicated or out of range."""
        held = [b for t in tables for b in t]
        every = sorted(held + self._free)
        if every != list(range(self.num_blocks)):
            raise AssertionError(
                f"KV blocks not conserved: {len(held)} held + {len(self._free)} free "
                f"!= {self.num_blocks} distinct blocks"
            )
