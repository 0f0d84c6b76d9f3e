"""Attention over the paged cache's gathered keys: one decode group, or one prefill chunk.

Both take an additive bias (``mask_bias``) built once per pass and shared by
every layer, and never repeat K/V heads for a decode batch.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["decode_attention", "mask_bias", "prefill_attention"]


def mask_bias(allowed: Tensor, dtype: torch.dtype) -> Tensor:
    """Additive attention bias (0 or -inf) from a boolean mask.

    Built once per pass and shared by every layer: a boolean mask would be
    converted again inside each attention call.
    """
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill_(
        ~allowed, float("-inf")
    )


def decode_attention(q: Tensor, k: Tensor, v: Tensor, bias: Tensor) -> Tensor:
    """One query row per sequence, grouped-query attention without repeating K/V.

    ``q`` [B, H, D], ``k``/``v`` [B, C, KVH, D], ``bias`` [B, C] (``mask_bias``). The
    ``H // KVH`` query heads sharing a KV head become that head's query rows (query
    head ``h`` reads KV head ``h // (H // KVH)``), so the bias broadcasts and nothing
    is copied per head. Every row must allow at least one key, else it is NaN.
    """
    b, h, d = q.shape
    kvh = k.shape[2]
    qg = q.reshape(b, kvh, h // kvh, d)
    out = F.scaled_dot_product_attention(
        qg, k.transpose(1, 2), v.transpose(1, 2), attn_mask=bias[:, None, None, :]
    )
    return out.reshape(b, h, d)


def prefill_attention(q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None) -> Tensor:
    """One sequence's chunk: ``q`` [N, H, D] over ``k``/``v`` [L, KVH, D].

    ``bias`` [N, L] (``mask_bias``) masks keys; ``None`` means the chunk is the
    whole context (``N == L``) and plain causal attention applies. K/V heads are
    repeated: a chunk has far fewer keys than a decode batch, and the bias then
    stays [N, L].
    """
    groups = q.shape[1] // k.shape[1]
    # 4-D inputs: with 3-D ones the CPU picks the slow math kernel over the fused one.
    qq = q.transpose(0, 1)[None]
    kk = k.repeat_interleave(groups, dim=1).transpose(0, 1)[None]
    vv = v.repeat_interleave(groups, dim=1).transpose(0, 1)[None]
    if bias is None:
        out = F.scaled_dot_product_attention(qq, kk, vv, is_causal=True)
    else:
        out = F.scaled_dot_product_attention(qq, kk, vv, attn_mask=bias)
    return out[0].transpose(0, 1)
