"""A small Llama-style decoder and its paged-KV forward, written here so the runner needs no hub.

The weights are random but seeded and scaled so that greedy tokens depend on the
whole context: a KV-cache or paging bug changes the tokens, which is what lets
the tests compare the paged forward against ``reference_generate`` by greedy
tokens alone.

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
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from densegate.impl.sched.batch import KVLayout
from densegate.impl.validation import check_int, check_positive_float

__all__ = [
    "DecodeGroup",
    "DecoderModel",
    "ForwardInputs",
    "ModelConfig",
    "PagedKVCache",
    "PrefillSpan",
    "reference_generate",
]


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """Shape of the decoder. ``head_dim=0`` derives it as ``hidden // n_heads``."""

    vocab_size: int = 512
    hidden: int = 64
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int = 2
    head_dim: int = 0
    ffn_hidden: int = 128
    rope_theta: float = 10000.0
    rms_eps: float = 1e-6
    seed: int = 0

    def __post_init__(self) -> None:
        check_int("ModelConfig", "vocab_size", self.vocab_size, 2)
        check_int("ModelConfig", "hidden", self.hidden, 1)
        check_int("ModelConfig", "n_layers", self.n_layers, 1)
        check_int("ModelConfig", "n_heads", self.n_heads, 1)
        check_int("ModelConfig", "n_kv_heads", self.n_kv_heads, 1)
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"ModelConfig.n_kv_heads must divide n_heads={self.n_heads}, got {self.n_kv_heads}"
            )
        check_int("ModelConfig", "head_dim", self.head_dim, 0)
        if self.head_dim == 0:
            if self.hidden % self.n_heads:
                raise ValueError(
                    f"ModelConfig.hidden must be a multiple of n_heads={self.n_heads} when "
                    f"head_dim is derived, got {self.hidden}"
                )
            object.__setattr__(self, "head_dim", self.hidden // self.n_heads)
        if self.head_dim % 2:
            raise ValueError(f"ModelConfig.head_dim must be even for RoPE, got {self.head_dim}")
        check_int("ModelConfig", "ffn_hidden", self.ffn_hidden, 1)
        check_positive_float("ModelConfig", "rope_theta", self.rope_theta)
        check_positive_float("ModelConfig", "rms_eps", self.rms_eps)
        check_int("ModelConfig", "seed", self.seed, 0)


@dataclass(frozen=True, slots=True)
class _Layer:
    attn_norm: Tensor
    wqkv: Tensor
    wo: Tensor
    mlp_norm: Tensor
    w_gate_up: Tensor
    w_down: Tensor


def _rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    out = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps)
    return out.to(x.dtype) * weight


def _apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate-half RoPE; ``x`` is [T, heads, D], ``cos``/``sin`` are [T, D/2]."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)


def _mask_bias(allowed: Tensor, dtype: torch.dtype) -> Tensor:
    """Additive attention bias (0 or -inf) from a boolean mask.

    Built once per pass and shared by every layer: a boolean mask would be
    converted again inside each attention call.
    """
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill_(
        ~allowed, float("-inf")
    )


def _decode_attention(q: Tensor, k: Tensor, v: Tensor, bias: Tensor) -> Tensor:
    """One query row per sequence, grouped-query attention without repeating K/V.

    ``q`` [B, H, D], ``k``/``v`` [B, C, KVH, D], ``bias`` [B, C] (``_mask_bias``). The
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


def _prefill_attention(q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None) -> Tensor:
    """One sequence's chunk: ``q`` [N, H, D] over ``k``/``v`` [L, KVH, D].

    ``bias`` [N, L] (``_mask_bias``) masks keys; ``None`` means the chunk is the
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


_Attend = Callable[[int, Tensor, Tensor, Tensor], Tensor]


class DecoderModel:
    """Inference-only weights plus the two forwards; no autograd, no ``nn.Module``.

    Weights are drawn in float64 on the CPU from ``config.seed`` and only then cast,
    so every device and dtype sees the same model up to rounding.
    """

    def __init__(
        self,
        config: ModelConfig,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> None:
        if not dtype.is_floating_point:
            raise ValueError(f"DecoderModel dtype must be floating point, got {dtype}")
        self.config = config
        self.device = torch.device(device)
        self.dtype = dtype
        gen = torch.Generator().manual_seed(config.seed)
        c = config
        q_dim, kv_dim = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim

        def draw(rows: int, cols: int, std: float) -> Tensor:
            w = torch.randn(rows, cols, generator=gen, dtype=torch.float64) * std
            return w.to(device=self.device, dtype=dtype)

        def ones(n: int) -> Tensor:
            return torch.ones(n, device=self.device, dtype=dtype)

        # Unit-variance embeddings and 1/sqrt(fan_in) projections keep every layer's
        # contribution comparable to the residual, so attention (hence the cache)
        # really steers the output; the head gain makes the argmax decisive.
        self.embed = draw(c.vocab_size, c.hidden, 1.0)
        layers = []
        for _ in range(c.n_layers):
            layers.append(
                _Layer(
                    attn_norm=ones(c.hidden),
                    wqkv=draw(c.hidden, q_dim + 2 * kv_dim, c.hidden**-0.5),
                    wo=draw(q_dim, c.hidden, q_dim**-0.5),
                    mlp_norm=ones(c.hidden),
                    w_gate_up=draw(c.hidden, 2 * c.ffn_hidden, c.hidden**-0.5),
                    w_down=draw(c.ffn_hidden, c.hidden, c.ffn_hidden**-0.5),
                )
            )
        self.layers = tuple(layers)
        self.final_norm = ones(c.hidden)
        self.lm_head = draw(c.hidden, c.vocab_size, 4.0 * c.hidden**-0.5)
        half = c.head_dim // 2
        exponents = torch.arange(half, dtype=torch.float64) / half
        self.inv_freq = (c.rope_theta**-exponents).to(device=self.device, dtype=torch.float64)

    def new_cache(self, layout: KVLayout) -> PagedKVCache:
        return PagedKVCache(self.config, layout, self.device, self.dtype)

    # -- shared body -------------------------------------------------------------

    def _rope_tables(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        angles = positions.to(torch.float64)[:, None] * self.inv_freq[None, :]
        return angles.cos().to(self.dtype), angles.sin().to(self.dtype)

    def _body(self, token_ids: Tensor, positions: Tensor, attend: _Attend) -> Tensor:
        """Embedding, all layers and the final norm; ``attend`` is the only variant."""
        c = self.config
        t = token_ids.shape[0]
        q_dim, kv_dim = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
        cos, sin = self._rope_tables(positions)
        x = self.embed.index_select(0, token_ids)
        for i, layer in enumerate(self.layers):
            qkv = _rms_norm(x, layer.attn_norm, c.rms_eps) @ layer.wqkv
            q = _apply_rope(qkv[:, :q_dim].reshape(t, c.n_heads, c.head_dim), cos, sin)
            k = _apply_rope(
                qkv[:, q_dim : q_dim + kv_dim].reshape(t, c.n_kv_heads, c.head_dim), cos, sin
            )
            v = qkv[:, q_dim + kv_dim :].reshape(t, c.n_kv_heads, c.head_dim)
            x = x + attend(i, q, k, v).reshape(t, q_dim) @ layer.wo
            gate, up = (_rms_norm(x, layer.mlp_norm, c.rms_eps) @ layer.w_gate_up).chunk(2, -1)
            x = x + (F.silu(gate) * up) @ layer.w_down
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
            return self._body(ids, positions, attend) @ self.lm_head

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
            groups.append((rows, slots.reshape(-1), width, _mask_bias(allowed, self.dtype)))
        spans = [
            (
                slice(sp.row_start, sp.row_start + sp.n_rows),
                sp.ctx_slots,
                None if sp.allowed is None else _mask_bias(sp.allowed, self.dtype),
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
                    outs.append(_prefill_attention(q[rows], k[rows], v[rows], None))
                else:
                    ks = kc.index_select(0, ctx_slots)
                    vs = vc.index_select(0, ctx_slots)
                    outs.append(_prefill_attention(q[rows], ks, vs, bias))
            for rows, slots, width, dec_bias in groups:
                # index_select on flat slots: several times faster than kc[slots_2d].
                shape = (-1, width, *kc.shape[1:])
                ks = kc.index_select(0, slots).view(shape)
                vs = vc.index_select(0, slots).view(shape)
                outs.append(_decode_attention(q[rows], ks, vs, dec_bias))
            return outs[0] if len(outs) == 1 else torch.cat(outs, dim=0)

        with torch.no_grad():
            hidden = self._body(inp.token_ids, inp.positions, attend)
            if inp.sample_rows is not None:
                hidden = hidden.index_select(0, inp.sample_rows)
            return hidden @ self.lm_head

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
