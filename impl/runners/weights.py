"""The decoder's weights, in Hugging Face's ``nn.Linear`` layout ([out, in]), and the seeded draw.

Q/K/V and gate/up are fused along the output dimension (one matmul each), in
that order. A model loaded from a checkpoint fills the same structure
(``densegate.impl.runners.checkpoint``); ``random_weights`` is only for a model
built without one.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from densegate.impl.runners.model_config import ModelConfig

__all__ = ["LayerWeights", "ModelWeights", "random_weights"]


@dataclass(frozen=True, slots=True)
class LayerWeights:
    """One decoder layer: ``wqkv`` [q + 2 kv, hidden], ``w_gate_up`` [2 ffn, hidden]."""

    attn_norm: Tensor
    wqkv: Tensor
    wo: Tensor
    mlp_norm: Tensor
    w_gate_up: Tensor
    w_down: Tensor


@dataclass(frozen=True, slots=True)
class ModelWeights:
    """Every weight; ``lm_head`` is ``embed`` itself (not a copy) when embeddings are tied."""

    embed: Tensor
    layers: tuple[LayerWeights, ...]
    final_norm: Tensor
    lm_head: Tensor


def random_weights(config: ModelConfig, device: torch.device, dtype: torch.dtype) -> ModelWeights:
    """Seeded weights, drawn in float64 on the CPU and only then cast.

    So every device and dtype sees the same model up to rounding. Unit-variance
    embeddings and 1/sqrt(fan_in) projections keep every layer's contribution
    comparable to the residual, so attention (hence the cache) really steers the
    output; the head gain makes the argmax decisive.
    """
    gen = torch.Generator().manual_seed(config.seed)
    c = config
    q_dim, kv_dim = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim

    def draw(fan_in: int, fan_out: int, std: float) -> Tensor:
        # Drawn [in, out] and transposed, so a seed gives the model it always gave.
        w = torch.randn(fan_in, fan_out, generator=gen, dtype=torch.float64) * std
        return w.t().to(device=device, dtype=dtype).contiguous()

    def ones(n: int) -> Tensor:
        return torch.ones(n, device=device, dtype=dtype)

    embed = torch.randn(c.vocab_size, c.hidden, generator=gen, dtype=torch.float64)
    embed = embed.to(device=device, dtype=dtype)
    layers = tuple(
        LayerWeights(
            attn_norm=ones(c.hidden),
            wqkv=draw(c.hidden, q_dim + 2 * kv_dim, c.hidden**-0.5),
            wo=draw(q_dim, c.hidden, q_dim**-0.5),
            mlp_norm=ones(c.hidden),
            w_gate_up=draw(c.hidden, 2 * c.ffn_hidden, c.hidden**-0.5),
            w_down=draw(c.ffn_hidden, c.hidden, c.ffn_hidden**-0.5),
        )
        for _ in range(c.n_layers)
    )
    lm_head = embed if c.tie_word_embeddings else draw(c.hidden, c.vocab_size, 4.0 * c.hidden**-0.5)
    return ModelWeights(embed, layers, ones(c.hidden), lm_head)
