"""The decoder's shape and RoPE settings: what a checkpoint's ``config.json`` maps onto.

Torch-free, so an engine config can read a checkpoint's limits (its
``max_position_embeddings``) without loading torch or any weight.
"""

from __future__ import annotations

from dataclasses import dataclass

from densegate.impl.validation import check_bool, check_int, check_positive_float

__all__ = ["ROPE_SCALINGS", "ModelConfig", "RopeScaling"]

ROPE_SCALINGS = ("linear", "llama3")
"""The ``rope_scaling`` types implemented here; any other is refused by name."""


@dataclass(frozen=True, slots=True)
class RopeScaling:
    """RoPE frequency scaling: ``linear`` divides every frequency by ``factor``;
    ``llama3`` (Llama 3.1/3.2) divides only the low frequencies, blending the
    band between ``low_freq_factor`` and ``high_freq_factor`` wavelengths of the
    ``original_max_position_embeddings`` context."""

    kind: str
    factor: float
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192

    def __post_init__(self) -> None:
        if self.kind not in ROPE_SCALINGS:
            raise ValueError(f"RopeScaling.kind must be one of {ROPE_SCALINGS}, got {self.kind!r}")
        check_positive_float("RopeScaling", "factor", self.factor)
        if self.kind == "llama3":
            check_positive_float("RopeScaling", "low_freq_factor", self.low_freq_factor)
            check_positive_float("RopeScaling", "high_freq_factor", self.high_freq_factor)
            if self.high_freq_factor <= self.low_freq_factor:
                raise ValueError(
                    f"RopeScaling.high_freq_factor ({self.high_freq_factor}) must exceed "
                    f"low_freq_factor ({self.low_freq_factor})"
                )
            check_int(
                "RopeScaling",
                "original_max_position_embeddings",
                self.original_max_position_embeddings,
                1,
            )


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """Shape of the decoder. ``head_dim=0`` derives it as ``hidden // n_heads``.

    ``seed`` draws the random weights of a model built without a checkpoint.
    ``max_position_embeddings=0`` means no positional limit of the model's own
    (the seeded model); ``eos_token_ids`` end a request unless it ignores EOS.
    """

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
    rope_scaling: RopeScaling | None = None
    max_position_embeddings: int = 0
    tie_word_embeddings: bool = False
    eos_token_ids: tuple[int, ...] = ()

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
        if self.rope_scaling is not None and not isinstance(self.rope_scaling, RopeScaling):
            raise ValueError(
                f"ModelConfig.rope_scaling must be a RopeScaling or None, got {self.rope_scaling!r}"
            )
        check_int("ModelConfig", "max_position_embeddings", self.max_position_embeddings, 0)
        check_bool("ModelConfig", "tie_word_embeddings", self.tie_word_embeddings)
        object.__setattr__(self, "eos_token_ids", tuple(self.eos_token_ids))
        for t in self.eos_token_ids:
            check_int("ModelConfig", "eos_token_ids", t, 0)
            if t >= self.vocab_size:
                raise ValueError(
                    f"ModelConfig.eos_token_ids holds {t}, outside the vocabulary "
                    f"[0, {self.vocab_size})"
                )
