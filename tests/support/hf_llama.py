"""Tiny random Llama checkpoints written by transformers, and transformers as the float64 oracle.

Weights are redrawn at scales that make greedy tokens decisive (unit-variance
embeddings, 1/sqrt(fan_in) projections, norm gains around 1), so a wrong
mapping changes tokens, not just the last digits of near-tied logits.

transformers computes RMSNorm and the RoPE angles in float32 even in a float64
model; ``hf_float64`` patches exactly those two steps to float64 (the RoPE
frequencies still come from transformers' own init function), so the only
difference left between the two implementations is summation order (~1e-14).
"""

from __future__ import annotations

import copy
import json
import types
from pathlib import Path
from typing import Any

import torch
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

LLAMA3 = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    # With head_dim 16 and theta 5e5 the wavelengths 6.3, 32 and 167 fall in the
    # kept, blended and divided bands of a 64-position original context.
    "original_max_position_embeddings": 64,
}


def make_checkpoint(
    path: Path,
    *,
    vocab: int = 96,
    hidden: int = 32,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    head_dim: int | None = None,
    ffn: int = 48,
    tied: bool = False,
    theta: float = 1e4,
    eps: float = 1e-6,
    rope: dict[str, Any] | None = None,
    max_pos: int = 128,
    eos: int | list[int] | None = None,
    seed: int = 0,
) -> Path:
    """Save a random ``LlamaForCausalLM`` of this shape to ``path`` (float32 safetensors)."""
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=ffn,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim or hidden // heads,
        max_position_embeddings=max_pos,
        rms_norm_eps=eps,
        rope_parameters={"rope_type": "default", "rope_theta": theta, **(rope or {})},
        tie_word_embeddings=tied,
        bos_token_id=None,
        eos_token_id=eos,
        pad_token_id=None,
    )
    model = LlamaForCausalLM(cfg)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
            elif "embed_tokens" in name:
                p.copy_(0.3 * torch.randn(p.shape, generator=gen))
            else:
                gain = 2.0 if name == "lm_head.weight" else 1.0
                p.copy_(torch.randn(p.shape, generator=gen) * gain / p.shape[1] ** 0.5)
    model.save_pretrained(path)
    return path


def _rms_norm_f64(self: Any, hidden_states: torch.Tensor) -> torch.Tensor:
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    return self.weight * (hidden_states * torch.rsqrt(variance + self.variance_epsilon))


def _rotary_f64(self: Any, x: torch.Tensor, position_ids: torch.Tensor) -> tuple[Any, Any]:
    freqs = position_ids[..., None].double() * self.inv_freq.double()
    emb = torch.cat((freqs, freqs), dim=-1)
    return (emb.cos() * self.attention_scaling).to(x.dtype), (
        emb.sin() * self.attention_scaling
    ).to(x.dtype)


def hf_float64(path: Path) -> LlamaForCausalLM:
    """transformers' model of ``path`` in float64, its float32 RMSNorm and RoPE steps patched."""
    model = LlamaForCausalLM.from_pretrained(path, dtype=torch.float64, attn_implementation="sdpa")
    model.eval()
    for m in model.modules():
        if type(m).__name__ == "LlamaRMSNorm":
            m.forward = types.MethodType(_rms_norm_f64, m)  # type: ignore[method-assign]
    rot = model.model.rotary_emb
    init = (
        rot.compute_default_rope_parameters
        if rot.rope_type == "default"
        else ROPE_INIT_FUNCTIONS[rot.rope_type]
    )
    f32 = torch.float
    torch.float = torch.float64  # type: ignore[misc]  # transformers' init casts to torch.float
    try:
        inv_freq, scaling = init(model.config, device=None)
    finally:
        torch.float = f32  # type: ignore[misc]
    assert inv_freq.dtype == torch.float64
    rot.inv_freq = inv_freq
    rot.attention_scaling = scaling
    rot.forward = types.MethodType(_rotary_f64, rot)
    return model


def hf_logits(model: LlamaForCausalLM, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        out: torch.Tensor = model(torch.tensor([ids])).logits[0]
    return out


def hf_greedy(model: LlamaForCausalLM, ids: list[int], n: int, stop: bool = False) -> list[int]:
    """transformers' ``generate(do_sample=False)``, one prompt at a time (no padding).

    ``stop``: stop at the checkpoint's EOS as transformers does; else ignore it.
    """
    gc = copy.deepcopy(model.generation_config)
    if not stop:
        gc.eos_token_id = None
    gc.pad_token_id = 0
    with torch.no_grad():
        out = model.generate(
            torch.tensor([ids]),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            generation_config=gc,
            max_new_tokens=n,
            do_sample=False,
        )
    return [int(t) for t in out[0, len(ids) :]]


def to_4x_config(path: Path) -> None:
    """Rewrite ``path/config.json`` in transformers 4.x's dialect (top-level ``rope_theta``,
    ``rope_scaling`` with ``type``, ``torch_dtype``)."""
    cfg_path = path / "config.json"
    cfg = json.loads(cfg_path.read_text())
    rope = cfg.pop("rope_parameters")
    cfg["rope_theta"] = rope.pop("rope_theta")
    kind = rope.pop("rope_type")
    cfg["rope_scaling"] = None if kind == "default" else {"type": kind, **rope}
    cfg["torch_dtype"] = cfg.pop("dtype")
    cfg_path.write_text(json.dumps(cfg))
