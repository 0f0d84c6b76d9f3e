"""A roofline pass-time model computed from stated inputs, for GPUs this machine lacks.

Every figure it gives is *modeled*: a pass takes the longer of its FLOPs at
the achievable compute rate and its bytes (weights once, KV read and written)
at the achievable bandwidth, plus kernel-launch overhead, which an eager pass
pays per kernel and a replayed CUDA graph pays once. The inputs are printed
with every table built from it (``RooflineInputs.describe``), so each figure
traces back to a datasheet number or a stated assumption.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from densegate.impl.validation import (
    check_fraction,
    check_int,
    check_nonnegative_float,
    check_positive_float,
)
from densegate.lab.cost.model import PassWork, kind_of

__all__ = [
    "GPUS",
    "LAUNCH_US",
    "SHAPES",
    "GPUSpec",
    "ModelShape",
    "RooflineInputs",
    "RooflineModel",
]


@dataclass(frozen=True)
class GPUSpec:
    """Datasheet peaks (dense, no sparsity) and where they come from."""

    name: str
    peak_tflops: float
    """Dense BF16/FP16 tensor-core TFLOP/s."""
    hbm_tb_s: float
    source: str

    def __post_init__(self) -> None:
        for name in ("peak_tflops", "hbm_tb_s"):
            check_positive_float("GPUSpec", name, getattr(self, name))


@dataclass(frozen=True)
class ModelShape:
    """A decoder's shape (Llama-style: gated MLP, grouped-query attention)."""

    name: str
    hidden: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn_hidden: int
    vocab: int
    dtype_bytes: int = 2

    def __post_init__(self) -> None:
        for name in ("hidden", "n_layers", "n_heads", "n_kv_heads", "head_dim", "ffn_hidden"):
            check_int("ModelShape", name, getattr(self, name), 1)
        check_int("ModelShape", "vocab", self.vocab, 1)
        check_int("ModelShape", "dtype_bytes", self.dtype_bytes, 1)

    @property
    def layer_params(self) -> int:
        attn = self.hidden * self.head_dim * (2 * self.n_heads + 2 * self.n_kv_heads)
        return attn + 3 * self.hidden * self.ffn_hidden

    @property
    def params(self) -> int:
        """Weights read every pass: layers, embedding and LM head (untied)."""
        return self.n_layers * self.layer_params + 2 * self.vocab * self.hidden

    @property
    def kv_bytes_per_token(self) -> int:
        return 2 * self.n_layers * self.n_kv_heads * self.head_dim * self.dtype_bytes


GPUS: dict[str, GPUSpec] = {
    g.name: g
    for g in (
        GPUSpec("H100-SXM", 989.4, 3.35,
                "NVIDIA H100 Tensor Core GPU datasheet: H100 SXM, BF16 tensor core 1,979 "
                "TFLOPS with sparsity (989.4 dense), GPU memory bandwidth 3.35 TB/s"),
        GPUSpec("H200", 989.4, 4.8,
                "NVIDIA H200 Tensor Core GPU datasheet: H200 SXM, BF16 tensor core 1,979 "
                "TFLOPS with sparsity (989.4 dense), GPU memory bandwidth 4.8 TB/s"),
    )
}  # fmt: skip
"""The shipped GPU classes."""

SHAPES: dict[str, ModelShape] = {
    s.name: s
    for s in (
        # The shape in Meta's published Llama-3.1-8B config.json.
        ModelShape("llama-3.1-8b", 4096, 32, 32, 8, 128, 14336, 128256),
    )
}
"""The shipped model shapes."""


LAUNCH_US = 4.5
"""The assumed host launch overhead per kernel of an eager pass (us)."""


@dataclass(frozen=True)
class RooflineInputs:
    """Everything the roofline uses; the efficiencies and overheads are stated assumptions."""

    gpu: GPUSpec
    shape: ModelShape
    compute_efficiency: float = 0.6
    """Share of the peak FLOP/s a large GEMM reaches (assumed)."""
    bandwidth_efficiency: float = 0.8
    """Share of the peak bandwidth a weight or KV stream reaches (assumed)."""
    kernels_per_layer: int = 12
    """Kernels an eager pass launches per layer (norms, QKV, rope, attention, MLP; assumed)."""
    launch_us: float = LAUNCH_US
    """Host launch overhead per kernel of an eager pass (assumed)."""
    graph_replay_us: float = 30.0
    """A decode graph's replay, launched once (assumed)."""
    graph_max_rows: int = 128
    """Decode-only passes up to this many rows replay a graph (vLLM's default capture sizes
    reach 512; here the bench's ``max_num_seqs``)."""
    collective_us: float = 30.0
    """The per-tick all-reduce of a few ints across DP ranks over NVLink (assumed)."""

    def __post_init__(self) -> None:
        for name in ("compute_efficiency", "bandwidth_efficiency"):
            check_fraction("RooflineInputs", name, getattr(self, name))
        for name in ("launch_us", "graph_replay_us", "collective_us"):
            check_nonnegative_float("RooflineInputs", name, getattr(self, name))
        check_int("RooflineInputs", "kernels_per_layer", self.kernels_per_layer, 0)
        check_int("RooflineInputs", "graph_max_rows", self.graph_max_rows, 0)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["shape_params"] = self.shape.params
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RooflineInputs:
        d = {k: v for k, v in d.items() if k != "shape_params"}
        gpu, shape = d.pop("gpu", None), d.pop("shape", None)
        if not isinstance(gpu, dict) or not isinstance(shape, dict):
            raise ValueError(f"roofline inputs need gpu and shape objects, got {gpu!r}, {shape!r}")
        return cls(gpu=GPUSpec(**gpu), shape=ModelShape(**shape), **d)

    def describe(self) -> list[str]:
        """The inputs, one line each, for printing beside the figures they produce."""
        g, s = self.gpu, self.shape
        return [
            f"GPU {g.name}: {g.peak_tflops} dense TFLOP/s, {g.hbm_tb_s} TB/s ({g.source})",
            f"model {s.name}: {s.params / 1e9:.2f} B params, {s.n_layers} layers, hidden "
            f"{s.hidden}, {s.n_heads}/{s.n_kv_heads} heads x {s.head_dim}, ffn {s.ffn_hidden}, "
            f"vocab {s.vocab}, {s.dtype_bytes}-byte weights and KV",
            f"assumed: {self.compute_efficiency:.0%} of peak FLOP/s, "
            f"{self.bandwidth_efficiency:.0%} of peak bandwidth, {self.kernels_per_layer} "
            f"kernels/layer x {self.launch_us} us launch per eager pass, graph replay "
            f"{self.graph_replay_us} us for decode-only passes <= {self.graph_max_rows} rows, "
            f"collective {self.collective_us} us per DP tick",
        ]


@dataclass(frozen=True)
class RooflineModel:
    """``PassModel`` from ``RooflineInputs``: max(compute, memory) + launch overhead."""

    inputs: RooflineInputs
    # The formulas' constant factors, each computed in the order the formulas multiply
    # them (so every figure is the same float): a replay prices thousands of passes.
    _per_token: float = field(init=False, repr=False, compare=False)
    _per_sampled: float = field(init=False, repr=False, compare=False)
    _per_pair: float = field(init=False, repr=False, compare=False)
    _weights: int = field(init=False, repr=False, compare=False)
    _kv: int = field(init=False, repr=False, compare=False)
    _flop_s: float = field(init=False, repr=False, compare=False)
    _byte_s: float = field(init=False, repr=False, compare=False)
    _graph_s: float = field(init=False, repr=False, compare=False)
    _eager_s: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        i, s = self.inputs, self.inputs.shape
        consts = {
            "_per_token": 2.0 * s.n_layers * s.layer_params,
            "_per_sampled": 2.0 * s.hidden * s.vocab,
            "_per_pair": 4.0 * s.n_layers * s.n_heads * s.head_dim,
            "_weights": s.params * s.dtype_bytes,
            "_kv": s.kv_bytes_per_token,
            "_flop_s": i.gpu.peak_tflops * 1e12 * i.compute_efficiency,
            "_byte_s": i.gpu.hbm_tb_s * 1e12 * i.bandwidth_efficiency,
            "_graph_s": i.graph_replay_us / 1e6,
            "_eager_s": s.n_layers * i.kernels_per_layer * i.launch_us / 1e6,
        }
        for name, value in consts.items():
            object.__setattr__(self, name, value)

    @property
    def collective_ms(self) -> float:
        return self.inputs.collective_us / 1e3

    @property
    def graph_max_rows(self) -> int:
        return self.inputs.graph_max_rows

    def flops(self, w: PassWork) -> float:
        """``2 n_layers layer_params`` per token, ``2 hidden vocab`` per sampled row (the LM
        head), ``4 n_layers n_heads head_dim`` per attention pair."""
        tokens = w.prefill_tokens + w.decode_seqs
        sampled = w.prefill_chunks + w.decode_seqs
        linear = self._per_token * tokens + self._per_sampled * sampled
        return linear + self._per_pair * (w.prefill_pairs + w.decode_context)

    def bytes(self, w: PassWork) -> float:
        """Weights (``params dtype_bytes``) plus the KV read and written, per token."""
        tokens = w.prefill_tokens + w.decode_seqs
        kv = self._kv * (w.prefill_context + w.decode_context + tokens)
        return float(self._weights + kv)

    def pass_ms(self, work: PassWork) -> float:
        kind = kind_of(work, self.inputs.graph_max_rows)
        if kind is None:
            return 0.0
        compute_s = self.flops(work) / self._flop_s
        memory_s = self.bytes(work) / self._byte_s
        launch_s = self._graph_s if kind == "decode_graph" else self._eager_s
        return 1e3 * (max(compute_s, memory_s) + launch_s)
