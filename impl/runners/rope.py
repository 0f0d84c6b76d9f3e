"""Rotary position embeddings: the inverse frequencies (plain, linear, llama3) and the rotation.

Frequencies and angles are computed in float64 and only the cos/sin tables are
cast, so every dtype rotates by the same angles up to one rounding.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from densegate.impl.runners.model_config import ModelConfig, RopeScaling

__all__ = ["apply_rope", "inv_freq", "rope_tables"]


def _scale(freq: Tensor, s: RopeScaling) -> Tensor:
    if s.kind == "linear":
        return freq / s.factor
    # llama3: wavelengths longer than original/low_freq_factor are divided by factor,
    # shorter than original/high_freq_factor kept, the band between blended linearly
    # in original / wavelength.
    wavelen = 2 * math.pi / freq
    ctx = s.original_max_position_embeddings
    smooth = (ctx / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor)
    blended = (1 - smooth) * freq / s.factor + smooth * freq
    out = torch.where(wavelen > ctx / s.low_freq_factor, freq / s.factor, freq)
    medium = (wavelen >= ctx / s.high_freq_factor) & (wavelen <= ctx / s.low_freq_factor)
    return torch.where(medium, blended, out)


def inv_freq(config: ModelConfig, device: torch.device | str = "cpu") -> Tensor:
    """The ``head_dim / 2`` inverse frequencies, float64, scaled per ``config.rope_scaling``."""
    half = config.head_dim // 2
    exponents = torch.arange(half, dtype=torch.float64) * 2 / config.head_dim
    freq = config.rope_theta**-exponents
    if config.rope_scaling is not None:
        freq = _scale(freq, config.rope_scaling)
    return freq.to(device)


def rope_tables(freq: Tensor, positions: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """cos and sin [T, D/2] of ``positions`` [T] times ``freq`` [D/2], cast to ``dtype``."""
    angles = positions.to(torch.float64)[:, None] * freq[None, :]
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate-half RoPE (Hugging Face's q/k layout); ``x`` is [T, heads, D]."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)
