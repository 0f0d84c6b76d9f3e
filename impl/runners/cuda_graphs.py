"""Decode-only passes as CUDA graphs: batch-size buckets, static padded inputs, capture, replay.

A graph replays fixed kernels on fixed addresses, so a decode pass of ``n`` rows
runs in the smallest captured bucket ``>= n``; the bucket's extra rows are
padding that writes only the cache's pad slot and whose outputs are dropped.
Everything except ``DecodeGraphs`` is plain host code, tested on the CPU, and
the graph path uses exactly these functions to fill its inputs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import torch
from torch import Tensor

from densegate.impl.sched.batch import KVLayout, SeqChunk
from densegate.impl.validation import check_int

__all__ = [
    "DecodeGraphs",
    "DecodeInputs",
    "choose_bucket",
    "decode_buckets",
    "decode_row",
    "fill_decode_inputs",
]


def decode_buckets(max_num_seqs: int) -> tuple[int, ...]:
    """Default buckets: 1, 2, 4, 8, 16, then every multiple of 16, and ``max_num_seqs``.

    Powers of two keep small batches cheap to pad; the linear step above 16
    bounds the padding waste of large batches at 15 rows.
    """
    check_int("decode_buckets", "max_num_seqs", max_num_seqs, 1)
    out = {b for b in (1, 2, 4, 8, 16) if b <= max_num_seqs}
    out.update(range(32, max_num_seqs + 1, 16))
    out.add(max_num_seqs)
    return tuple(sorted(out))


def choose_bucket(n: int, buckets: Iterable[int]) -> int | None:
    """The smallest bucket holding ``n`` rows, or None when ``n`` exceeds them all (run eager)."""
    if n < 1:
        raise ValueError(f"a decode pass needs >= 1 row, got {n}")
    fitting = [b for b in buckets if b >= n]
    return min(fitting) if fitting else None


def decode_row(chunk: SeqChunk, layout: KVLayout) -> tuple[int, int, int, Sequence[int]]:
    """(token, position, slot, blocks) of one decode chunk; ``blocks`` cover positions 0..pos.

    Shared by the graph inputs and the eager mixed pass so both compute slots alike.
    """
    if len(chunk.token_ids) != 1:
        raise ValueError(
            f"decode chunk of seq {chunk.seq_id} must feed 1 token, got {len(chunk.token_ids)}"
        )
    bs = layout.block_size
    pos = chunk.start
    n_blocks = pos // bs + 1
    if pos >= layout.max_model_len:
        raise ValueError(
            f"seq {chunk.seq_id}: position {pos} >= max_model_len {layout.max_model_len}"
        )
    if len(chunk.block_table) < n_blocks:
        raise ValueError(
            f"seq {chunk.seq_id}: block table of {len(chunk.block_table)} blocks does not "
            f"cover position {pos}"
        )
    blocks = chunk.block_table[:n_blocks]
    return chunk.token_ids[0], pos, blocks[-1] * bs + pos % bs, blocks


class DecodeInputs:
    """Static decode inputs for ``rows`` rows, in one flat int64 buffer filled by one copy.

    ``token_ids``, ``positions``, ``slot_mapping`` [rows] and ``block_tables``
    [rows, max_blocks_per_seq] are views that keep their addresses for the life
    of the object, which is what lets a captured graph read them.
    """

    def __init__(self, rows: int, layout: KVLayout, device: torch.device | str) -> None:
        if rows < 1:
            raise ValueError(f"DecodeInputs needs rows >= 1, got {rows}")
        self.rows = rows
        self.layout = layout
        self.max_blocks = layout.max_blocks_per_seq
        self.pad_slot = layout.num_slots
        self.pad_block = layout.num_blocks
        self.flat = torch.empty(rows * (3 + self.max_blocks), dtype=torch.long, device=device)
        self.token_ids = self.flat[:rows]
        self.positions = self.flat[rows : 2 * rows]
        self.slot_mapping = self.flat[2 * rows : 3 * rows]
        self.block_tables = self.flat[3 * rows :].view(rows, self.max_blocks)
        # The all-padding host image; each fill copies it and overwrites the real rows.
        self._template = (
            [0] * rows
            + [0] * rows
            + [self.pad_slot] * rows
            + [self.pad_block] * (rows * self.max_blocks)
        )
        fill_decode_inputs(self, ())


def fill_decode_inputs(inputs: DecodeInputs, chunks: Sequence[SeqChunk]) -> int:
    """Write ``chunks`` into the first rows of ``inputs`` and padding into the rest.

    A padded row feeds token 0 at position 0, writes the pad slot and has a block
    table of pad blocks, so it attends only to the pad slot: finite, harmless.
    Returns the number of real rows. One host-to-device copy, no new device memory.
    """
    n, rows, mb = len(chunks), inputs.rows, inputs.max_blocks
    if n > rows:
        raise ValueError(f"{n} decode rows do not fit in {rows} static rows")
    host = list(inputs._template)
    for i, chunk in enumerate(chunks):
        tok, pos, slot, blocks = decode_row(chunk, inputs.layout)
        host[i] = tok
        host[rows + i] = pos
        host[2 * rows + i] = slot
        base = 3 * rows + i * mb
        host[base : base + len(blocks)] = blocks
    inputs.flat.copy_(torch.tensor(host, dtype=torch.long))
    return n


class DecodeGraphs:
    """One CUDA graph per bucket, captured largest first into one shared memory pool.

    Largest first lets smaller graphs reuse the pool blocks the larger ones freed.
    Replays are serialised on the current stream and each output is read before
    the next replay, which is what makes sharing the pool safe. ``step`` must be
    static-shaped and free of host syncs; it is warmed up on a side stream (the
    warm-up runs all-padding rows, so it writes only the pad slot).
    """

    def __init__(
        self,
        step: Callable[[DecodeInputs], Tensor],
        inputs_for: Callable[[int], DecodeInputs],
        buckets: Sequence[int],
        warmup: int = 2,
    ) -> None:
        if not torch.cuda.is_available():
            raise RuntimeError("DecodeGraphs needs CUDA")
        self.buckets = tuple(sorted(set(buckets)))
        self.pool = torch.cuda.graph_pool_handle()
        self._graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self._outputs: dict[int, Tensor] = {}
        for bucket in sorted(self.buckets, reverse=True):
            inputs = inputs_for(bucket)
            fill_decode_inputs(inputs, ())
            side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(warmup):
                    step(inputs)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self.pool):
                out = step(inputs)
            self._graphs[bucket] = graph
            self._outputs[bucket] = out
        torch.cuda.synchronize()

    def __contains__(self, bucket: object) -> bool:
        return bucket in self._graphs

    def replay(self, bucket: int) -> Tensor:
        """Run the bucket's graph on whatever its static inputs hold; returns its static output."""
        self._graphs[bucket].replay()
        return self._outputs[bucket]
