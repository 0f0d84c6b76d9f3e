"""Scheduled chunks -> the flat tensors of one paged forward (``ForwardInputs``).

An eager pass gathers only each length group's context (``decode_groups``):
that is what keeps eager decode passes cheap on the CPU. The decode graph's
body (``decode_forward_inputs``) is one static group over ``max_model_len``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from densegate.impl.runners.cuda_graphs import DecodeInputs, decode_row
from densegate.impl.runners.paged_kv import DecodeGroup, ForwardInputs, PrefillSpan
from densegate.impl.sched.batch import KVLayout, SeqChunk

__all__ = [
    "GROUP_SPLIT_POSITIONS",
    "build_forward_inputs",
    "decode_forward_inputs",
    "decode_groups",
]


def decode_forward_inputs(inputs: DecodeInputs) -> ForwardInputs:
    """The decode-only pass over static buffers: the body of every decode graph."""
    return ForwardInputs(
        token_ids=inputs.token_ids,
        positions=inputs.positions,
        slot_mapping=inputs.slot_mapping,
        prefills=(),
        decodes=(DecodeGroup(0, inputs.rows, inputs.block_tables),),
        sample_rows=None,
    )


GROUP_SPLIT_POSITIONS = 1024
"""An eager decode group is split when that saves at least this many padded key
positions: about the fixed cost of one more gather + attention call per layer."""


def decode_groups(blocks_needed: Sequence[int], block_size: int) -> list[list[int]]:
    """Partition decode rows (indices into ``blocks_needed``) into groups of similar length.

    Rows are taken longest first; a new group starts when padding every remaining
    row to the current group's width would waste ``>= GROUP_SPLIT_POSITIONS``
    key positions more than cutting here. Each group gathers only its longest
    row's context, so one long sequence no longer makes every row pay for it.
    """
    order = sorted(range(len(blocks_needed)), key=lambda i: -blocks_needed[i])
    groups: list[list[int]] = []
    width = 0
    for k, i in enumerate(order):
        need = blocks_needed[i]
        remaining = len(order) - k
        if not groups or (width - need) * block_size * remaining >= GROUP_SPLIT_POSITIONS:
            groups.append([])
            width = need
        groups[-1].append(i)
    return groups


def build_forward_inputs(
    prefills: Sequence[SeqChunk],
    decodes: Sequence[SeqChunk],
    layout: KVLayout,
    device: torch.device | str,
) -> ForwardInputs:
    """A general eager pass: prefill chunks (any start, any length) then decode rows.

    Decode rows are laid out in ``decode_groups`` order, each group's block tables
    padded only to its longest row, so the eager context follows the batch's real
    lengths, never ``max_model_len``. Sampled rows still come out in
    ``ScheduledBatch.sampled()`` order: the last row of each sampling prefill
    chunk, then each sampling decode row.
    """
    bs = layout.block_size
    offsets = torch.arange(bs, dtype=torch.long)
    tokens: list[int] = []
    positions: list[int] = []
    slot_parts: list[torch.Tensor] = []
    spans: list[PrefillSpan] = []
    sample_rows: list[int] = []
    for c in prefills:
        n = len(c.token_ids)
        end = c.start + n
        if n == 0 or c.start < 0:
            raise ValueError(f"prefill chunk of seq {c.seq_id}: start {c.start}, {n} tokens")
        if end > layout.max_model_len:
            raise ValueError(
                f"seq {c.seq_id}: {end} positions exceed max_model_len {layout.max_model_len}"
            )
        n_blocks = -(-end // bs)
        if len(c.block_table) < n_blocks:
            raise ValueError(
                f"seq {c.seq_id}: block table of {len(c.block_table)} blocks does not cover "
                f"{end} positions"
            )
        row = len(tokens)
        tokens.extend(c.token_ids)
        positions.extend(range(c.start, end))
        table = torch.tensor(c.block_table[:n_blocks], dtype=torch.long)
        ctx = (table[:, None] * bs + offsets[None, :]).reshape(-1)[:end]
        slot_parts.append(ctx[c.start :])
        if c.start == 0:
            spans.append(PrefillSpan(row, n, None, None))
        else:
            keys = torch.arange(end, device=device)
            allowed = keys[None, :] <= torch.arange(c.start, end, device=device)[:, None]
            spans.append(PrefillSpan(row, n, ctx.to(device), allowed))
        if c.sample:
            sample_rows.append(row + n - 1)
    rows = [decode_row(c, layout) for c in decodes]
    groups: list[DecodeGroup] = []
    row_of = [0] * len(decodes)
    dec_slots: list[int] = []
    for members in decode_groups([len(r[3]) for r in rows], bs):
        width = len(rows[members[0]][3])
        flat: list[int] = []
        for i in members:
            tok, pos, slot, blocks = rows[i]
            row_of[i] = len(tokens)
            tokens.append(tok)
            positions.append(pos)
            dec_slots.append(slot)
            flat.extend(blocks)
            flat.extend([layout.num_blocks] * (width - len(blocks)))
        tables = torch.tensor(flat, dtype=torch.long, device=device).view(len(members), width)
        groups.append(DecodeGroup(row_of[members[0]], len(members), tables))
    sample_rows.extend(row_of[i] for i, c in enumerate(decodes) if c.sample)
    slot_parts.append(torch.tensor(dec_slots, dtype=torch.long))

    def as_tensor(xs: list[int]) -> torch.Tensor:
        return torch.tensor(xs, dtype=torch.long, device=device)

    return ForwardInputs(
        token_ids=as_tensor(tokens),
        positions=as_tensor(positions),
        slot_mapping=torch.cat(slot_parts).to(device),
        prefills=tuple(spans),
        decodes=tuple(groups),
        sample_rows=as_tensor(sample_rows),
    )
