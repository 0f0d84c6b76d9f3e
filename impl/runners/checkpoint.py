"""Load a local Hugging Face ``LlamaForCausalLM`` checkpoint (safetensors) into a ``DecoderModel``.

No random draw happens first and nothing is staged: each fused weight is
allocated once on the target device in the target dtype, and every stored
tensor is copied (converted on the way) into its slice of it. Tied embeddings
share one tensor. Every file's header and every tensor name and shape is
checked before any is read (``safetensors_header``), so a truncated or garbled
file and a missing, unexpected or misshapen tensor are errors naming the file
and the tensor, not a silently wrong model; so is a tensor holding NaN or
infinity (unless ``check_finite=False``: that check reads each weight once
more). ``rotary_emb.inv_freq`` (stale buffers some exports carry) is ignored:
the frequencies are recomputed from ``config.json``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from densegate.impl.runners.hf_config import CheckpointError, read_config
from densegate.impl.runners.model import DecoderModel
from densegate.impl.runners.model_config import ModelConfig
from densegate.impl.runners.safetensors_header import TensorEntry, read_header
from densegate.impl.runners.weights import LayerWeights, ModelWeights
from densegate.impl.validation import json_value

__all__ = ["PROGRESS_BYTES", "declared_weights", "load_model", "tensor_targets"]

PROGRESS_BYTES = 256 << 20
"""Loads of at least this many stored bytes show a progress bar (``progress=None``)."""

_IGNORED_SUFFIX = "rotary_emb.inv_freq"

_Target = tuple[str, int, int]
"""(weight key, first row, row count) of a stored tensor's destination."""


def tensor_targets(config: ModelConfig) -> dict[str, tuple[_Target, tuple[int, ...]]]:
    """Every tensor the checkpoint must hold -> (destination, expected shape).

    Q, K, V land in consecutive row ranges of ``wqkv`` (that order), gate and up
    in ``w_gate_up``: the fused layout ``DecoderModel`` multiplies by.
    """
    c = config
    q, kv, h, f = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim, c.hidden, c.ffn_hidden
    out: dict[str, tuple[_Target, tuple[int, ...]]] = {
        "model.embed_tokens.weight": (("embed", 0, c.vocab_size), (c.vocab_size, h)),
        "model.norm.weight": (("final_norm", 0, h), (h,)),
    }
    if not c.tie_word_embeddings:
        out["lm_head.weight"] = (("lm_head", 0, c.vocab_size), (c.vocab_size, h))
    for i in range(c.n_layers):
        p = f"model.layers.{i}."
        out[p + "input_layernorm.weight"] = ((f"{i}.attn_norm", 0, h), (h,))
        out[p + "post_attention_layernorm.weight"] = ((f"{i}.mlp_norm", 0, h), (h,))
        out[p + "self_attn.q_proj.weight"] = ((f"{i}.wqkv", 0, q), (q, h))
        out[p + "self_attn.k_proj.weight"] = ((f"{i}.wqkv", q, kv), (kv, h))
        out[p + "self_attn.v_proj.weight"] = ((f"{i}.wqkv", q + kv, kv), (kv, h))
        out[p + "self_attn.o_proj.weight"] = ((f"{i}.wo", 0, h), (h, q))
        out[p + "mlp.gate_proj.weight"] = ((f"{i}.w_gate_up", 0, f), (f, h))
        out[p + "mlp.up_proj.weight"] = ((f"{i}.w_gate_up", f, f), (f, h))
        out[p + "mlp.down_proj.weight"] = ((f"{i}.w_down", 0, h), (h, f))
    return out


_Stored = dict[str, tuple[Path, TensorEntry]]
"""Tensor name -> (the safetensors file holding it, its header entry)."""


def _stored(root: Path) -> _Stored:
    """Every stored tensor, each file's header checked (``read_header``)."""
    single = root / "model.safetensors"
    index = root / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = json_value(index.read_text(), str(index))["weight_map"]
            shards = {str(name): root / file for name, file in weight_map.items()}
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise CheckpointError(f"{index}: no valid weight_map ({e!r})") from None
        except OSError as e:
            raise CheckpointError(f"{index}: cannot be read ({e.strerror or e})") from None
        headers: dict[Path, dict[str, TensorEntry]] = {}
        for shard in sorted(set(shards.values())):
            if not shard.is_file():
                raise CheckpointError(f"{index} names shard {shard.name}, which is missing")
            headers[shard] = read_header(shard)
        out: _Stored = {}
        for name, shard in shards.items():
            entry = headers[shard].get(name)
            if entry is None:
                raise CheckpointError(f"{index} puts tensor {name} in {shard}, which lacks it")
            out[name] = (shard, entry)
        return out
    if single.is_file():
        return {name: (single, e) for name, e in read_header(single).items()}
    raise CheckpointError(
        f"{root}: no model.safetensors or model.safetensors.index.json "
        "(only safetensors checkpoints are read)"
    )


def declared_weights(config: ModelConfig) -> int:
    """How many weights ``config`` declares: what ``tensor_targets`` would list, counted
    without listing them (10^9 layers is one multiplication, not a dict that never ends)."""
    c = config
    q, kv, h, f = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim, c.hidden, c.ffn_hidden
    layer = 2 * h + (q + 2 * kv) * h + h * q + 3 * f * h
    heads = (1 if c.tie_word_embeddings else 2) * c.vocab_size * h
    return heads + h + c.n_layers * layer


def _check_declared(root: Path, config: ModelConfig, stored: _Stored) -> None:
    """Refuse a ``config.json`` declaring more layers than its files hold, before any tensor
    is listed or allocated (``num_hidden_layers`` 10^6 ran out of memory listing them).
    Every other shape field is checked tensor by tensor, before allocating, too."""
    layers = {name.split(".")[2] for name in stored if name.startswith("model.layers.")}
    if config.n_layers > len(layers):
        held = sum(math.prod(e.shape) for _, e in stored.values())
        raise CheckpointError(
            f"{root / 'config.json'} declares num_hidden_layers {config.n_layers} "
            f"({declared_weights(config):,} weights), but its safetensors files hold "
            f"{len(layers)} layers ({held:,} weights): refused before allocating"
        )


def _safe_open() -> Any:
    try:
        from safetensors import safe_open
    except ModuleNotFoundError:
        raise CheckpointError(
            "loading a checkpoint needs the safetensors package, the 'hf' extra: in a densegate "
            "checkout, pip install '.[hf]'"
        ) from None
    return safe_open


def _check_names(stored: _Stored, want: dict[str, Any], tied: bool) -> list[str]:
    """The stored names to load; raise naming missing or unexpected tensors."""
    ignored = {n for n in stored if n.endswith(_IGNORED_SUFFIX)}
    if tied:
        # transformers ties lm_head to the embeddings and ignores a stored copy.
        ignored |= {"lm_head.weight"} & stored.keys()
    unexpected = sorted(stored.keys() - want.keys() - ignored)
    biases = [n for n in unexpected if n.endswith(".bias")]
    if biases:
        raise CheckpointError(f"bias tensors are not supported: {', '.join(biases[:4])}")
    if unexpected:
        more = f" (+{len(unexpected) - 4} more)" if len(unexpected) > 4 else ""
        raise CheckpointError(f"unexpected tensors: {', '.join(unexpected[:4])}{more}")
    missing = sorted(want.keys() - stored.keys())
    if missing:
        more = f" (+{len(missing) - 4} more)" if len(missing) > 4 else ""
        raise CheckpointError(f"missing tensors: {', '.join(missing[:4])}{more}")
    return [n for n in stored if n in want]


@contextmanager
def _progress(total_bytes: int, enabled: bool | None) -> Iterator[Any]:
    """A rich progress bar over bytes copied, or None (asked for none, a small load, or
    rich, the ``cli`` extra, not installed: a bar is no reason to refuse a load)."""
    small = enabled is None and total_bytes < PROGRESS_BYTES
    if enabled is False or small or find_spec("rich") is None:
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn

    columns = (TextColumn("loading weights"), BarColumn(), DownloadColumn())
    # On stderr: stdout may be carrying JSON.
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("load", total=total_bytes)
        yield lambda n: bar.advance(task, n)


def _allocate(config: ModelConfig, device: torch.device, dtype: torch.dtype) -> dict[str, Tensor]:
    c = config
    q, kv, h, f = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim, c.hidden, c.ffn_hidden

    def empty(*shape: int) -> Tensor:
        return torch.empty(shape, device=device, dtype=dtype)

    out = {"embed": empty(c.vocab_size, h), "final_norm": empty(h)}
    if not c.tie_word_embeddings:
        out["lm_head"] = empty(c.vocab_size, h)
    for i in range(c.n_layers):
        out[f"{i}.attn_norm"] = empty(h)
        out[f"{i}.mlp_norm"] = empty(h)
        out[f"{i}.wqkv"] = empty(q + 2 * kv, h)
        out[f"{i}.wo"] = empty(h, q)
        out[f"{i}.w_gate_up"] = empty(2 * f, h)
        out[f"{i}.w_down"] = empty(h, f)
    return out


def _assemble(config: ModelConfig, dest: dict[str, Tensor]) -> ModelWeights:
    layers = tuple(
        LayerWeights(
            attn_norm=dest[f"{i}.attn_norm"],
            wqkv=dest[f"{i}.wqkv"],
            wo=dest[f"{i}.wo"],
            mlp_norm=dest[f"{i}.mlp_norm"],
            w_gate_up=dest[f"{i}.w_gate_up"],
            w_down=dest[f"{i}.w_down"],
        )
        for i in range(config.n_layers)
    )
    embed = dest["embed"]
    return ModelWeights(embed, layers, dest["final_norm"], dest.get("lm_head", embed))


def load_model(
    path: str | Path,
    device: torch.device | str = "cpu",
    dtype: torch.dtype | None = None,
    progress: bool | None = None,
    check_finite: bool = True,
) -> DecoderModel:
    """The checkpoint at ``path`` as a ``DecoderModel`` on ``device``.

    ``dtype=None`` keeps the checkpoint's own (``config.json``'s ``dtype`` or
    ``torch_dtype``). ``progress``: True/False forces the bar on/off; None shows
    it for loads of at least ``PROGRESS_BYTES``. Nothing is allocated before
    every file's header and every tensor's name, shape and dtype has been checked.
    ``check_finite`` refuses a weight holding NaN or infinity (after the cast to
    ``dtype``, so an overflow to inf is caught too).
    """
    info = read_config(path)
    config = info.config
    dtype = dtype if dtype is not None else getattr(torch, info.dtype)
    device = torch.device(device)
    stored = _stored(info.path)
    _check_declared(info.path, config, stored)
    want = tensor_targets(config)
    by_file: dict[Path, list[str]] = {}
    total = 0
    for n in _check_names(stored, want, config.tie_word_embeddings):
        p, entry = stored[n]
        if entry.shape != want[n][1]:
            raise CheckpointError(
                f"{p}: tensor {n} has shape {list(entry.shape)}, config.json implies "
                f"{list(want[n][1])}"
            )
        total += math.prod(entry.shape) * _itemsize(entry.dtype, n)
        by_file.setdefault(p, []).append(n)
    safe_open = _safe_open()
    with ExitStack() as stack:
        handles = {p: stack.enter_context(_opened(safe_open, p)) for p in sorted(by_file)}
        dest = _allocate(config, device, dtype)
        with torch.no_grad(), _progress(total, progress) as advance:
            for p, group in by_file.items():
                for n in group:
                    (key, start, rows), _ = want[n]
                    try:
                        src = handles[p].get_tensor(n)
                    except Exception as e:  # the library's own error type names nothing
                        raise CheckpointError(f"{p}: tensor {n} cannot be read ({e})") from None
                    part = dest[key][start : start + rows]
                    part.copy_(src)
                    if check_finite and not bool(torch.isfinite(part).all()):
                        kind = str(dtype).removeprefix("torch.")
                        raise CheckpointError(
                            f"{p}: tensor {n} holds NaN or infinite values (as {kind}); "
                            "refused, as it would generate garbage (skip this check with "
                            "--no-finite-check, EngineConfig(check_weights=False))"
                        )
                    if advance is not None:
                        advance(src.numel() * src.element_size())
                    del src
    return DecoderModel(config, device, dtype, _assemble(config, dest))


@contextmanager
def _opened(safe_open: Any, path: Path) -> Iterator[Any]:
    """``safe_open(path)``, its refusal a ``CheckpointError`` naming the file."""
    try:
        handle = safe_open(str(path), framework="pt")
        f = handle.__enter__()
    except Exception as e:
        raise CheckpointError(f"{path}: not a readable safetensors file ({e})") from None
    try:
        yield f
    finally:
        handle.__exit__(None, None, None)


_ITEMSIZE = {"F64": 8, "F32": 4, "BF16": 2, "F16": 2}


def _itemsize(st_dtype: str, name: str) -> int:
    size = _ITEMSIZE.get(st_dtype)
    if size is None:
        raise CheckpointError(f"tensor {name} is stored as {st_dtype}: only float tensors load")
    return size
