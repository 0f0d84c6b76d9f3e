"""``benchmarks/gpu_check.py --real-size`` at toy size on the CPU: the writer, the loader, timing.

The real size (Llama-3.2-1B's shape, bf16, CUDA graphs) needs a GPU session;
this runs the same code path at toy size so the script cannot rot unnoticed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from densegate.impl.runners.checkpoint import load_model
from densegate.impl.runners.hf_config import read_config

pytestmark = pytest.mark.usefixtures("one_torch_thread")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import gpu_real_size  # noqa: E402


def test_random_checkpoint_round_trips_through_the_loader(tmp_path: Path) -> None:
    written = gpu_real_size.write_random_checkpoint(
        tmp_path, gpu_real_size.TINY, torch.float32, "cpu"
    )
    stored = load_file(str(tmp_path / "model.safetensors"))
    assert written == sum(t.numel() * 4 for t in stored.values())
    assert "lm_head.weight" not in stored  # tied, as Llama-3.2-1B
    c = read_config(tmp_path).config
    assert c.rope_scaling is not None and c.rope_scaling.kind == "llama3"
    model = load_model(tmp_path)
    q = stored["model.layers.1.self_attn.q_proj.weight"]
    v = stored["model.layers.1.self_attn.v_proj.weight"]
    assert torch.equal(model.layers[1].wqkv[: q.shape[0]], q)
    assert torch.equal(model.layers[1].wqkv[-v.shape[0] :], v)


def test_real_size_mode_runs_at_toy_size() -> None:
    res = gpu_real_size.real_size_check(smoke=True, timed_steps=3)
    t = gpu_real_size.TINY
    h, f, layers = t["hidden_size"], t["intermediate_size"], t["num_hidden_layers"]
    q, kv = t["num_attention_heads"] * t["head_dim"], t["num_key_value_heads"] * t["head_dim"]
    per_layer = h * (q + 2 * kv) + q * h + 3 * h * f
    assert res["parameters"] == layers * per_layer + t["vocab_size"] * h
    assert [row["batch"] for row in res["timing"]] == [1, 4]
    assert all(row["graph_ms_p50"] > 0 and row["eager_ms_p50"] > 0 for row in res["timing"])
    assert res["graph_runner_summary"]["graph_replays"] > 0
