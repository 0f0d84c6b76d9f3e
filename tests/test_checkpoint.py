"""The loader's contract: what it reads, how (no waste), and what it refuses, by name.

Checkpoints are written by transformers (``tests/support/hf_llama.py``) and then edited:
each refused feature is planted in an otherwise good checkpoint, and the error
must name the field or tensor.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import LlamaForCausalLM

import densegate.impl.runners.checkpoint as checkpoint
import densegate.impl.runners.model as model_module
from densegate.impl.engine import Engine, EngineConfig
from densegate.impl.runners.checkpoint import load_model
from densegate.impl.runners.hf_config import CheckpointError, read_config
from tests.support.hf_llama import LLAMA3, make_checkpoint

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_checkpoint(tmp_path_factory.mktemp("good"), kv_heads=2, max_pos=96, eos=[7, 11])


@pytest.fixture
def copy(good: Path, tmp_path: Path) -> Path:
    out = tmp_path / "ckpt"
    shutil.copytree(good, out)
    return out


def _edit_config(path: Path, **fields: Any) -> None:
    cfg = json.loads((path / "config.json").read_text())
    for k, v in fields.items():
        if v is _DROP:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    (path / "config.json").write_text(json.dumps(cfg))


def _edit_tensors(path: Path, edit: Callable[[dict[str, torch.Tensor]], None]) -> None:
    tensors = load_file(str(path / "model.safetensors"))
    edit(tensors)
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})


_DROP = object()


def test_config_fields_are_mapped(good: Path) -> None:
    c = read_config(good).config
    assert (c.vocab_size, c.hidden, c.n_layers, c.n_heads, c.n_kv_heads) == (96, 32, 2, 4, 2)
    assert (c.head_dim, c.ffn_hidden, c.rope_theta, c.rms_eps) == (8, 48, 1e4, 1e-6)
    assert (c.max_position_embeddings, c.tie_word_embeddings) == (96, False)
    assert c.eos_token_ids == (7, 11) and c.rope_scaling is None
    assert read_config(good).dtype == "float32"


def test_llama3_and_linear_scaling_are_read(tmp_path: Path) -> None:
    s = read_config(make_checkpoint(tmp_path / "a", theta=5e5, rope=LLAMA3)).config
    assert s.rope_scaling is not None and s.rope_theta == 5e5
    assert (s.rope_scaling.kind, s.rope_scaling.factor, s.rope_scaling.high_freq_factor) == (
        "llama3",
        8.0,
        4.0,
    )
    _edit_config(tmp_path / "a", rope_parameters=_DROP, rope_theta=2e4)
    _edit_config(tmp_path / "a", rope_scaling={"type": "linear", "factor": 3.0})
    s = read_config(tmp_path / "a").config
    assert s.rope_theta == 2e4 and s.rope_scaling is not None
    assert (s.rope_scaling.kind, s.rope_scaling.factor) == ("linear", 3.0)


def test_sharded_checkpoint_loads_the_same_weights(good: Path, tmp_path: Path) -> None:
    hf = LlamaForCausalLM.from_pretrained(good)
    hf.save_pretrained(tmp_path, max_shard_size="20KB")
    assert (tmp_path / "model.safetensors.index.json").is_file()
    assert not (tmp_path / "model.safetensors").exists()
    a, b = load_model(good, dtype=torch.float64), load_model(tmp_path, dtype=torch.float64)
    ids = [1, 2, 3, 40, 50]
    assert torch.equal(a.reference_logits(ids), b.reference_logits(ids))


def test_no_random_draw_and_straight_to_target_dtype(
    good: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def forbidden(*_: object, **__: object) -> None:
        raise AssertionError("a random draw during a checkpoint load")

    monkeypatch.setattr(model_module, "random_weights", forbidden)
    monkeypatch.setattr(torch, "randn", forbidden)
    model = load_model(good, dtype=torch.bfloat16)
    assert model.embed.dtype == model.layers[0].wqkv.dtype == torch.bfloat16
    assert load_model(good).dtype == torch.float32  # None: the checkpoint's own
    with pytest.raises(AssertionError, match="random draw"):  # the guard does guard
        model_module.DecoderModel(read_config(good).config)


def test_tied_embeddings_share_one_tensor(tmp_path: Path) -> None:
    path = make_checkpoint(tmp_path, tied=True)
    model = load_model(path)
    assert model.lm_head is model.embed


def test_stale_inv_freq_is_ignored_and_progress_bar_runs(copy: Path) -> None:
    _edit_tensors(
        copy, lambda t: t.update({"model.layers.0.self_attn.rotary_emb.inv_freq": torch.ones(4)})
    )
    a = load_model(copy, dtype=torch.float64, progress=True)
    assert a.reference_logits([1, 2]).shape == (2, 96)


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"hidden_act": "gelu"}, "hidden_act"),
        ({"attention_bias": True}, "attention_bias"),
        ({"mlp_bias": True}, "mlp_bias"),
        ({"pretraining_tp": 2}, "pretraining_tp"),
        ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4}}, "rope_type"),
        ({"rope_parameters": _DROP, "rope_scaling": {"type": "dynamic"}}, "rope_type"),
        (
            {"rope_parameters": {"rope_type": "default", "partial_rotary_factor": 0.5}},
            "partial_rotary_factor",
        ),
        ({"rope_parameters": {"rope_type": "llama3", "factor": 8.0}}, "low_freq_factor"),
        ({"model_type": "mistral"}, "model_type"),
        ({"architectures": ["MistralForCausalLM"]}, "architectures"),
        ({"quantization_config": {"quant_method": "gptq"}}, "quantization_config"),
        ({"dtype": "int8"}, "dtype"),
        ({"vocab_size": _DROP}, "vocab_size"),
        ({"hidden_size": "32"}, "hidden_size"),
        ({"num_key_value_heads": 3}, "n_kv_heads"),
        ({"eos_token_id": [-1]}, "eos_token_id"),
        ({"tie_word_embeddings": "yes"}, "tie_word_embeddings"),
    ],
)
def test_refused_config_fields_are_named(copy: Path, fields: dict[str, Any], needle: str) -> None:
    _edit_config(copy, **fields)
    with pytest.raises(CheckpointError, match=needle):
        load_model(copy)


def _add(name: str, shape: tuple[int, ...]) -> Callable[[dict[str, torch.Tensor]], None]:
    return lambda t: t.update({name: torch.zeros(shape)})


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (_add("model.layers.0.self_attn.q_proj.bias", (32,)), r"bias.*q_proj\.bias"),
        (_add("model.layers.0.mlp.extra.weight", (4, 4)), r"unexpected.*mlp\.extra\.weight"),
        (lambda t: t.pop("model.layers.1.mlp.up_proj.weight"), r"missing.*1\.mlp\.up_proj"),
        (lambda t: t.pop("lm_head.weight"), r"missing.*lm_head\.weight"),
        (
            lambda t: t.update({"model.norm.weight": torch.ones(31)}),
            r"model\.norm\.weight has shape \[31\]",
        ),
        (
            lambda t: t.update({"model.norm.weight": torch.ones(32, dtype=torch.int32)}),
            r"model\.norm\.weight.*I32",
        ),
    ],
)
def test_refused_tensors_are_named(
    copy: Path, edit: Callable[[dict[str, torch.Tensor]], None], needle: str
) -> None:
    _edit_tensors(copy, edit)
    with pytest.raises(CheckpointError, match=needle):
        load_model(copy)


def test_missing_files_are_named(copy: Path) -> None:
    (copy / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"model\.safetensors"):
        load_model(copy)
    (copy / "config.json").unlink()
    with pytest.raises(CheckpointError, match=r"config\.json"):
        load_model(copy)


def test_missing_safetensors_package_says_what_to_install(
    good: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "safetensors", None)
    with pytest.raises(CheckpointError, match=r"pip install '\.\[hf\]'"):
        checkpoint.load_model(good)


def test_max_model_len_defaults_to_and_is_capped_at_max_position_embeddings(good: Path) -> None:
    cfg = EngineConfig(model=str(good))
    assert cfg.max_model_len == 96 and cfg.runner == "torch"
    assert EngineConfig(model=good, max_model_len=64).max_model_len == 64
    with pytest.raises(ValueError, match="max_position_embeddings 96"):
        EngineConfig(model=str(good), max_model_len=97)
    assert EngineConfig().max_model_len == 4096


def test_eos_and_stop_ids_end_requests_with_their_reason() -> None:
    """The null runner samples token 0 every time: a stop id of 0 ends a request at once."""
    engine = Engine(EngineConfig(max_model_len=64))
    a = engine.add_request([1, 2], 5)
    b = engine.add_request([1, 2], 5, stop_token_ids=[0])
    engine.eos_token_ids = frozenset({0})  # as a checkpoint's EOS would be
    c = engine.add_request([1, 2], 5)
    d = engine.add_request([1, 2], 5, ignore_eos=True)
    while engine.has_unfinished():
        engine.step()
    got = {
        rid: (engine.request(rid).finish_reason, engine.request(rid).output_token_ids)
        for rid in (a, b, c, d)
    }
    assert got == {
        a: ("length", [0] * 5),
        b: ("stop", [0]),
        c: ("stop", [0]),
        d: ("length", [0] * 5),
    }
    with pytest.raises(ValueError, match="stop_token_ids"):
        engine.add_request([1], 2, stop_token_ids=[-3])


def test_text_needs_a_tokenizer(good: Path) -> None:
    with pytest.raises(ValueError, match=r"tokenizer\.json"):
        Engine(EngineConfig(model=str(good), dtype="float64")).generate(["hello"], 2)
    with pytest.raises(ValueError, match=r"EngineConfig\.model"):
        Engine(EngineConfig()).generate(["hello"], 2)


def test_dtype_auto_is_the_checkpoints(good: Path, tmp_path: Path) -> None:
    assert Engine(EngineConfig(model=str(good), dtype="auto")).runner.model.dtype == torch.float32  # type: ignore[attr-defined]
    bf16 = tmp_path / "bf16"
    LlamaForCausalLM.from_pretrained(good, dtype=torch.bfloat16).save_pretrained(bf16)
    assert read_config(bf16).dtype == "bfloat16"
    assert load_model(bf16).dtype == torch.bfloat16
    assert Engine(EngineConfig(model=bf16)).runner.model.dtype == torch.float32  # type: ignore[attr-defined]


def test_null_optional_fields_take_transformers_defaults(copy: Path) -> None:
    _edit_config(copy, num_key_value_heads=None, head_dim=None, rms_norm_eps=None)
    c = read_config(copy).config
    assert (c.n_kv_heads, c.head_dim, c.rms_eps) == (4, 8, 1e-6)
    _edit_config(copy, vocab_size=None)
    with pytest.raises(CheckpointError, match="vocab_size is null"):
        read_config(copy)
