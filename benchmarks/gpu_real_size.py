"""``gpu_check.py --real-size``: decode timings for a model of a real size, through the loader.

Random weights of Llama-3.2-1B's shape (bf16; tied embeddings, llama3 RoPE,
GQA 32/8) are written as a Hugging Face checkpoint (``config.json`` +
``model.safetensors``, the tensor names transformers writes) and read back by
``densegate.impl.runners.checkpoint.load_model``, the path ``--model DIR``
takes, so graph-vs-eager ratios are for a realistic model and the loader's
time and memory at that size are on record. Weights are random: tokens mean
nothing, and graph and eager tokens may differ in bf16 (recorded, not checked).

With ``--cpu-smoke`` a tiny model of the same family runs on the CPU (the graph
body run eagerly in place of replays), to catch mistakes without a GPU; the
real size needs a GPU session.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from gpu_drive import StandInGraphs, timing

from densegate.impl.runners.checkpoint import load_model, tensor_targets
from densegate.impl.runners.hf_config import read_config
from densegate.impl.runners.torch_runner import TorchRunner
from densegate.impl.sched.batch import KVLayout

__all__ = ["LLAMA_3_2_1B", "TINY", "real_size_check", "write_random_checkpoint"]

_LLAMA3_ROPE = {
    "rope_type": "llama3",
    "rope_theta": 500000.0,
    "factor": 32.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}
LLAMA_3_2_1B: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": 128256,
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_hidden_layers": 16,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-5,
    "rope_parameters": _LLAMA3_ROPE,
    "tie_word_embeddings": True,
    "hidden_act": "silu",
    "eos_token_id": [128001, 128008, 128009],
}
"""Llama-3.2-1B's published shape (about 1.24 B parameters)."""

TINY: dict[str, Any] = {
    **LLAMA_3_2_1B,
    "vocab_size": 512,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "eos_token_id": None,
}
"""The same family at toy size, for ``--cpu-smoke``."""


def write_random_checkpoint(
    path: Path, config: dict[str, Any], dtype: torch.dtype, device: str, seed: int = 0
) -> int:
    """Write ``config`` and random weights (std 0.02, norms 1) to ``path``; returns bytes."""
    from safetensors.torch import save_file

    (path / "config.json").write_text(
        json.dumps({**config, "dtype": str(dtype).removeprefix("torch.")})
    )
    gen = torch.Generator(device=device).manual_seed(seed)
    tensors = {}
    for name, (_, shape) in tensor_targets(read_config(path).config).items():
        if len(shape) == 1:
            t = torch.ones(shape, dtype=dtype, device=device)
        else:
            t = torch.randn(shape, generator=gen, device=device).mul_(0.02).to(dtype)
        tensors[name] = t.cpu()
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    return sum(t.numel() * t.element_size() for t in tensors.values())


def real_size_check(smoke: bool, timed_steps: int) -> dict[str, Any]:
    """Write, load and time the real-size (or, smoke, tiny) model; the JSON-ready record."""
    device = "cpu" if smoke else "cuda"
    if smoke:
        torch.set_num_threads(1)  # toy matmuls: a second thread on a busy core only stalls
    dtype = torch.float32 if smoke else torch.bfloat16
    shape = TINY if smoke else LLAMA_3_2_1B
    layout = (
        KVLayout(block_size=16, num_blocks=64, max_model_len=128, max_num_seqs=8)
        if smoke
        else KVLayout(block_size=16, num_blocks=2048, max_model_len=512, max_num_seqs=64)
    )
    sizes = (1, 4) if smoke else (1, 8, 32, 64)
    res: dict[str, Any] = {
        "shape": shape,
        "dtype": str(dtype),
        "layout": dataclasses.asdict(layout),
    }
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        res["checkpoint_bytes"] = write_random_checkpoint(Path(tmp), shape, dtype, device)
        res["write_seconds"] = time.perf_counter() - t0
        if not smoke:
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        model = load_model(tmp, device, dtype, progress=not smoke)
        if not smoke:
            torch.cuda.synchronize()
            res["load_peak_memory_mib"] = torch.cuda.max_memory_allocated() / 2**20
        res["load_seconds"] = time.perf_counter() - t0
    res["parameters"] = sum(
        t.numel() for la in model.layers for t in (la.wqkv, la.wo, la.w_gate_up, la.w_down)
    ) + model.embed.numel() * (1 if model.lm_head is model.embed else 2)
    # Two runners, one model: the weights are read-only, each runner has its own cache.
    if smoke:
        graph = TorchRunner(layout, model=model)
        graph.buckets = (1, 2, 4, 8)
        graph._graphs = StandInGraphs(graph, graph.buckets)  # type: ignore[assignment]
    else:
        graph = TorchRunner(layout, model=model, use_cuda_graphs=True)
    eager = TorchRunner(layout, model=model)
    res["graphs_captured"] = graph.stats.graphs_captured
    vocab = model.config.vocab_size
    res["timing"] = timing(graph, eager, vocab, sizes, timed_steps, layout)
    res["graph_runner_summary"] = graph.summary()
    return res
