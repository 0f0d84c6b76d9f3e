"""A Hugging Face Llama checkpoint's ``config.json`` -> ``ModelConfig``, refusing what is not run.

Torch-free: ``EngineConfig`` reads a checkpoint's limits here before any weight
is touched. Both config dialects are read: transformers 4.x (top-level
``rope_theta``, ``rope_scaling``, ``torch_dtype``) and 5.x (``rope_parameters``,
``dtype``). Anything this decoder does not compute faithfully (biases, another
activation, ``pretraining_tp != 1``, a RoPE type other than default, linear or
llama3, quantization) is a ``CheckpointError`` naming the field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import Any

from densegate.impl.runners.model_config import ModelConfig, RopeScaling
from densegate.impl.validation import bool_problem, int_problem, json_value, number_problem

__all__ = [
    "DTYPES",
    "CheckpointError",
    "CheckpointInfo",
    "checkpoint_dir",
    "model_len",
    "position_limit",
    "read_config",
]

DTYPES = ("float32", "float64", "bfloat16", "float16")

_MISSING = object()


class CheckpointError(ValueError):
    """A checkpoint this loader refuses; the message names the file, field or tensor."""


@dataclass(frozen=True, slots=True)
class CheckpointInfo:
    """What ``config.json`` says: the model's shape and the dtype it was saved in."""

    path: Path
    config: ModelConfig
    dtype: str
    has_tokenizer: bool


class _Fields:
    """Typed reads of one JSON object; every error names ``where`` and the field."""

    def __init__(self, data: dict[str, Any], where: str) -> None:
        self.data = data
        self.where = where

    def fail(self, field: str, why: str) -> CheckpointError:
        return CheckpointError(f"{self.where}: {field} {why}")

    def get(self, field: str, default: Any = _MISSING) -> Any:
        """The field's value; an absent or null field takes ``default`` (none: an error)."""
        value = self.data.get(field)
        if value is not None:
            return value
        if default is not _MISSING:
            return default
        raise self.fail(field, "is null" if field in self.data else "is missing")

    def _checked(self, why: str | None) -> None:
        if why is not None:
            raise CheckpointError(f"{self.where}: {why}")

    def int(self, field: str, default: Any = _MISSING) -> int:
        value = self.get(field, default)
        self._checked(int_problem(field, value))
        return int(value)

    def float(self, field: str, default: Any = _MISSING) -> float:
        value = self.get(field, default)
        self._checked(number_problem(field, value))
        return float(value)

    def bool(self, field: str, default: Any = _MISSING) -> bool:
        value = self.get(field, default)
        self._checked(bool_problem(field, value))
        return bool(value)

    def require(self, field: str, want: Any, default: Any, what: str) -> None:
        value = self.get(field, default)
        if value != want:
            raise self.fail(field, f"is {value!r}: {what}")


def _load_json(path: Path) -> dict[str, Any]:
    try:
        data = json_value(path.read_text(), str(path))
    except UnicodeDecodeError as e:
        raise CheckpointError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{path}: not valid JSON ({e})") from None
    except ValueError as e:  # nested too deep
        raise CheckpointError(str(e)) from None
    except OSError as e:
        raise CheckpointError(f"{path}: cannot be read ({e.strerror or e})") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: expected a JSON object")
    return data


def _rope(f: _Fields) -> tuple[float, RopeScaling | None]:
    """``(theta, scaling)`` from 5.x ``rope_parameters`` or 4.x ``rope_theta``/``rope_scaling``."""
    top_theta = f.float("rope_theta", 10000.0)
    params = f.get("rope_parameters", None)
    where = "rope_parameters"
    if params is None:
        params, where = f.get("rope_scaling", None), "rope_scaling"
    if params is None:
        return top_theta, None
    if not isinstance(params, dict):
        raise f.fail(where, f"must be an object, got {params!r}")
    p = _Fields(params, f"{f.where}: {where}")
    theta = p.float("rope_theta", top_theta)
    kind = params.get("rope_type", params.get("type", "default"))
    if p.float("partial_rotary_factor", 1.0) != 1.0:
        raise p.fail("partial_rotary_factor", "must be 1.0: partial rotary is not implemented")
    if kind == "default":
        return theta, None
    if kind == "linear":
        return theta, RopeScaling("linear", p.float("factor"))
    if kind == "llama3":
        return theta, RopeScaling(
            "llama3",
            p.float("factor"),
            p.float("low_freq_factor"),
            p.float("high_freq_factor"),
            p.int("original_max_position_embeddings"),
        )
    raise p.fail("rope_type", f"{kind!r} is not supported (only default, linear and llama3)")


def _eos(value: Any, where: str) -> tuple[int, ...]:
    if value is None:
        return ()
    ids = value if isinstance(value, list) else [value]
    for t in ids:
        why = int_problem("eos_token_id", t, 0)
        if why is not None:
            raise CheckpointError(f"{where}: {why} (in {value!r})")
    return tuple(ids)


def read_config(path: str | Path) -> CheckpointInfo:
    """Read and check ``path/config.json`` (and ``generation_config.json``'s EOS, which wins:
    it is what transformers' ``generate`` stops at)."""
    root = Path(path)
    if not root.is_dir():
        raise CheckpointError(f"{root}: not a checkpoint directory")
    cfg_path = root / "config.json"
    if not cfg_path.is_file():
        raise CheckpointError(f"{root}: no config.json")
    f = _Fields(_load_json(cfg_path), str(cfg_path))
    model_type = f.get("model_type", "llama")
    if model_type != "llama":
        raise f.fail("model_type", f"{model_type!r} is not supported (only 'llama')")
    arch = f.get("architectures", None)
    if arch is not None and "LlamaForCausalLM" not in arch:
        raise f.fail("architectures", f"{arch!r}: only LlamaForCausalLM is supported")
    f.require("hidden_act", "silu", "silu", "only silu is implemented")
    f.require("attention_bias", False, False, "biases are not implemented")
    f.require("mlp_bias", False, False, "biases are not implemented")
    f.require("pretraining_tp", 1, 1, "only pretraining_tp 1 is implemented")
    if f.get("quantization_config", None) is not None:
        raise f.fail("quantization_config", "is set: quantized checkpoints are not supported")
    dtype = f.get("dtype", None) or f.get("torch_dtype", None) or "float32"
    if dtype not in DTYPES:
        raise f.fail("dtype", f"{dtype!r} is not supported (one of {DTYPES})")
    heads = f.int("num_attention_heads")
    head_dim = f.get("head_dim", None)
    theta, scaling = _rope(f)
    eos = _eos(f.get("eos_token_id", None), str(cfg_path))
    gen_path = root / "generation_config.json"
    if gen_path.is_file():
        gen = _load_json(gen_path)
        if "eos_token_id" in gen:
            eos = _eos(gen["eos_token_id"], str(gen_path))
    try:
        config = ModelConfig(
            vocab_size=f.int("vocab_size"),
            hidden=f.int("hidden_size"),
            n_layers=f.int("num_hidden_layers"),
            n_heads=heads,
            n_kv_heads=f.int("num_key_value_heads", heads),
            head_dim=0 if head_dim is None else f.int("head_dim"),
            ffn_hidden=f.int("intermediate_size"),
            rope_theta=theta,
            rms_eps=f.float("rms_norm_eps", 1e-6),
            rope_scaling=scaling,
            max_position_embeddings=f.int("max_position_embeddings"),
            tie_word_embeddings=f.bool("tie_word_embeddings", False),
            eos_token_ids=eos,
        )
    except CheckpointError:
        raise
    except ValueError as e:
        raise CheckpointError(f"{cfg_path}: {e}") from None
    return CheckpointInfo(root, config, dtype, (root / "tokenizer.json").is_file())


def checkpoint_dir(model: object) -> Path | None:
    """``model`` as a checkpoint directory when it names one (a str or path), else None."""
    if isinstance(model, (str, PathLike)):
        return Path(model)
    return None


def position_limit(model: object) -> int:
    """The positional limit of an engine's ``model`` (0: none): a checkpoint's or a config's
    ``max_position_embeddings``."""
    path = checkpoint_dir(model)
    if path is not None:
        return read_config(path).config.max_position_embeddings
    if isinstance(model, ModelConfig):
        return model.max_position_embeddings
    if model is not None:
        raise ValueError(f"model must be a checkpoint directory or a ModelConfig, got {model!r}")
    return 0


def model_len(model: object, max_model_len: int) -> int:
    """An engine's ``max_model_len``: 0 picks the model's ``max_position_embeddings`` (4096
    without one); a value above it is an error, never silently cut."""
    limit = position_limit(model)
    if max_model_len == 0:
        return limit or 4096
    if limit and max_model_len > limit:
        raise ValueError(
            f"EngineConfig.max_model_len {max_model_len} exceeds the model's "
            f"max_position_embeddings {limit}"
        )
    return max_model_len
