"""A Llama-family decoder and its paged-KV forward, with no hub and no ``nn.Module``.

Its weights come from a Hugging Face checkpoint (``checkpoint.load_model``) or
are random but seeded (``weights.random_weights``) and scaled so that greedy
tokens depend on the whole context: a KV-cache or paging bug changes the
tokens, which is what lets the tests compare the paged forward against
``reference_generate`` by greedy tokens alone.

Two forwards share every layer except attention:

* ``DecoderModel.reference_logits`` recomputes a whole sequence without a cache
  (``scaled_dot_product_attention`` with the KV heads repeated): the plain oracle.
* ``DecoderModel.paged_logits`` writes K/V into a flat paged cache through a slot
  mapping and attends over slots gathered from block tables. Prefill chunks are
  attended one sequence at a time (a chunk starting at position 0 attends only to
  its own fresh K/V, causally, with no gather). Decode rows are attended in
  groups, each over a context of as many whole blocks as its block tables have,
  masked by position. The CUDA-graph body is one group of ``max_blocks_per_seq``
  blocks, so its shapes are static and nothing syncs the host; an eager pass
  groups rows of similar length, so it pays for the contexts it has, not for
  ``max_model_len``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from densegate.impl.runners.attention import decode_attention, mask_bias, prefill_attention
from densegate.impl.runners.model_config import ModelConfig
from densegate.impl.runners.paged_kv import ForwardInputs, PagedKVCache
from densegate.impl.runners.rope import apply_rope, inv_freq, rope_tables
from densegate.impl.runners.weights import ModelWeights, random_weights
from densegate.impl.sched.batch import KVLayout

__all__ = ["DecoderModel", "reference_generate"]


def _rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    out = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps)
    return out.to(x.dtype) * weight


_Attend = Callable[[int, Tensor, Tensor, Tensor], Tensor]


class DecoderModel:
    """Inference-only weights plus the two forwards.

    ``weights`` come from a checkpoint loader; without them, seeded random ones
    are drawn from ``config.seed``. They must already be on ``device`` in ``dtype``.
    """

    def __init__(
        self,
        config: ModelConfig,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
        weights: ModelWeights | None = None,
    ) -> None:
        if not dtype.is_floating_point:
            raise ValueError(f"DecoderModel dtype must be floating point, got {dtype}")
        self.config = config
        self.device = torch.device(device)
        self.dtype = dtype
        w = weights if weights is not None else random_weights(config, self.device, dtype)
        self.embed = w.embed
        self.layers = w.layers
        self.final_norm = w.final_norm
        self.lm_head = w.lm_head
        self.inv_freq = inv_freq(config, self.device)

    def new_cache(self, layout: KVLayout) -> PagedKVCache:
        return PagedKVCache(self.config, layout, self.device, self.dtype)

    # -- shared body -------------------------------------------------------------

    def _body(self, token_ids: Tensor, positions: Tensor, attend: _Attend) -> Tensor:
        """Embedding, all layers and the final norm; ``attend`` is the only variant."""
        c = self.config
        t = token_ids.shape[0]
        q_dim, kv_dim = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
        cos, sin = rope_tables(self.inv_freq, positions, self.dtype)
        x = self.embed.index_select(0, token_ids)
        for i, layer in enumerate(self.layers):
            qkv = F.linear(_rms_norm(x, layer.attn_norm, c.rms_eps), layer.wqkv)
            q = apply_rope(qkv[:, :q_dim].reshape(t, c.n_heads, c.head_dim), cos, sin)
            k = apply_rope(
                qkv[:, q_dim : q_dim + kv_dim].reshape(t, c.n_kv_heads, c.head_dim), cos, sin
            )
            v = qkv[:, q_dim + kv_dim :].reshape(t, c.n_kv_heads, c.head_dim)
            x = x + F.linear(attend(i, q, k, v).reshape(t, q_dim), layer.wo)
            gate_up = F.linear(_rms_norm(x, layer.mlp_norm, c.rms_eps), layer.w_gate_up)
            gate, up = gate_up.chunk(2, -1)
            x = x + F.linear(F.silu(gate) * up, layer.w_down)
        return _rms_norm(x, self.final_norm, c.rms_eps)

    # -- reference: full recompute -----------------------------------------------

    def reference_logits(self, token_ids: Sequence[int]) -> Tensor:
        """Logits [L, vocab] for every position of one sequence, recomputed from scratch."""
        ids = torch.tensor(list(token_ids), dtype=torch.long, device=self.device)
        positions = torch.arange(ids.shape[0], device=self.device)
        groups = self.config.n_heads // self.config.n_kv_heads

        # Written out here, not shared with the paged path: the oracle stays independent.
        def attend(_layer: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
            kk = k.repeat_interleave(groups, dim=1).transpose(0, 1)[None]
            vv = v.repeat_interleave(groups, dim=1).transpose(0, 1)[None]
            out = F.scaled_dot_product_attention(q.transpose(0, 1)[None], kk, vv, is_causal=True)
            return out[0].transpose(0, 1)

        with torch.no_grad():
            return F.linear(self._body(ids, positions, attend), self.lm_head)

    # -- paged forward -----------------------------------------------------------

    def paged_logits(self, cache: PagedKVCache, inp: ForwardInputs) -> Tensor:
        """Write this pass's K/V into ``cache`` and return logits of the sampled rows.

        With only decode rows this is static-shaped and host-sync free, so it is
        exactly what the runner captures into a CUDA graph.
        """
        # Per decode group: its rows, flat context slots, context width and mask. A
        # row at position p attends to positions 0..p (context length p + 1); a
        # padded row sits at position 0 and reads only the pad slot.
        groups: list[tuple[slice, Tensor, int, Tensor]] = []
        for g in inp.decodes:
            rows = slice(g.row_start, g.row_start + g.n_rows)
            slots = cache.context_slots(g.block_tables)
            width = slots.shape[1]
            allowed = cache.key_positions[:width][None, :] <= inp.positions[rows][:, None]
            groups.append((rows, slots.reshape(-1), width, mask_bias(allowed, self.dtype)))
        spans = [
            (
                slice(sp.row_start, sp.row_start + sp.n_rows),
                sp.ctx_slots,
                None if sp.allowed is None else mask_bias(sp.allowed, self.dtype),
            )
            for sp in inp.prefills
        ]

        def attend(layer: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
            kc, vc = cache.k[layer], cache.v[layer]
            kc.index_copy_(0, inp.slot_mapping, k)
            vc.index_copy_(0, inp.slot_mapping, v)
            outs = []
            for rows, ctx_slots, bias in spans:
                if ctx_slots is None:
                    outs.append(prefill_attention(q[rows], k[rows], v[rows], None))
                else:
                    ks = kc.index_select(0, ctx_slots)
                    vs = vc.index_select(0, ctx_slots)
                    outs.append(prefill_attention(q[rows], ks, vs, bias))
            for rows, slots, width, dec_bias in groups:
                # index_select on flat slots: several times faster than kc[slots_2d].
                shape = (-1, width, *kc.shape[1:])
                ks = kc.index_select(0, slots).view(shape)
                vs = vc.index_select(0, slots).view(shape)
                outs.append(decode_attention(q[rows], ks, vs, dec_bias))
            return outs[0] if len(outs) == 1 else torch.cat(outs, dim=0)

        with torch.no_grad():
            hidden = self._body(inp.token_ids, inp.positions, attend)
            if inp.sample_rows is not None:
                hidden = hidden.index_select(0, inp.sample_rows)
            return F.linear(hidden, self.lm_head)

    def paged_greedy(self, cache: PagedKVCache, inp: ForwardInputs) -> Tensor:
        """Greedy next tokens [n_sampled] (argmax on the device: nothing syncs)."""
        return self.paged_logits(cache, inp).argmax(dim=-1)


def reference_generate(model: DecoderModel, prompt: Sequence[int], max_tokens: int) -> list[int]:
    """Greedy continuation by full recompute each step: the oracle for the paged path."""
    if not prompt:
        raise ValueError("reference_generate needs a non-empty prompt")
    seq = list(prompt)
    out: list[int] = []
    for _ in range(max_tokens):
        tok = int(model.reference_logits(seq)[-1].argmax().item())
        out.append(tok)
        seq.append(tok)
    return out
