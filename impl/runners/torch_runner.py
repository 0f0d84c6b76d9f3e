"""The torch runner: a ``DecoderModel`` behind the scheduler's ``Runner`` interface.

Decode-only passes are the ones the dense gate protects, so on CUDA they replay
captured graphs (``cuda_graphs``); prefill and mixed passes, and decode passes
larger than the largest bucket, run eager. On the CPU the same code runs eager.
A graph must keep static shapes, so it attends over ``max_model_len`` for every
row; an eager pass need not (``forward_inputs.decode_groups``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch

from densegate.impl.runners.cuda_graphs import (
    DecodeGraphs,
    DecodeInputs,
    choose_bucket,
    decode_buckets,
    fill_decode_inputs,
)
from densegate.impl.runners.forward_inputs import build_forward_inputs, decode_forward_inputs
from densegate.impl.runners.model import DecoderModel
from densegate.impl.runners.model_config import ModelConfig
from densegate.impl.runners.paged_kv import PagedKVCache
from densegate.impl.runners.runner_stats import RunnerStats, StepKind
from densegate.impl.sched.batch import BatchKind, KVLayout, ScheduledBatch, SeqChunk
from densegate.impl.validation import check_int, check_optional_int

__all__ = ["TorchRunner", "check_cuda", "runner_for"]


def _check_layout(layout: KVLayout) -> None:
    for name in ("block_size", "num_blocks", "max_model_len", "max_num_seqs"):
        check_int("KVLayout", name, getattr(layout, name), 1)


class TorchRunner:
    """Runs scheduled passes through ``DecoderModel`` over a paged KV cache; greedy sampling.

    ``model`` is a built model (a loaded checkpoint; it fixes device and dtype);
    without one, a seeded model of ``model_config`` is drawn.

    ``use_cuda_graphs`` defaults to on for CUDA devices and must stay off on
    others. ``buckets`` overrides the decode batch sizes captured as graphs.

    ``num_threads`` sets torch's intra-op threads around each pass (restored
    after it); ``None`` leaves torch alone. On the CPU the default model's ops
    are tiny, so one thread is usually fastest, and much faster when the cores
    are shared: a second OpenMP thread waiting on a busy core stalls every op.
    """

    def __init__(
        self,
        layout: KVLayout,
        model_config: ModelConfig | None = None,
        device: str = "cpu",
        dtype: torch.dtype = torch.float32,
        use_cuda_graphs: bool | None = None,
        buckets: Sequence[int] | None = None,
        num_threads: int | None = None,
        model: DecoderModel | None = None,
    ) -> None:
        _check_layout(layout)
        if model is not None:
            if model_config is not None and model_config != model.config:
                raise ValueError("TorchRunner: give model or model_config, not two different ones")
            device, dtype = str(model.device), model.dtype
        check_optional_int("TorchRunner", "num_threads", num_threads, 1)
        self.num_threads = num_threads
        self.layout = layout
        self.device = torch.device(device)
        on_cuda = self.device.type == "cuda"
        check_cuda(device)
        if use_cuda_graphs is None:
            use_cuda_graphs = on_cuda
        elif use_cuda_graphs and not on_cuda:
            raise ValueError(
                f"TorchRunner use_cuda_graphs=True needs a CUDA device, got {device!r}"
            )
        if model is None:
            model = DecoderModel(model_config or ModelConfig(), self.device, dtype)
        self.model = model
        limit = model.config.max_position_embeddings
        if limit and layout.max_model_len > limit:
            raise ValueError(
                f"max_model_len {layout.max_model_len} exceeds the model's "
                f"max_position_embeddings {limit}"
            )
        self.cache: PagedKVCache = self.model.new_cache(layout)
        self.stats = RunnerStats()
        self._inputs: dict[int, DecodeInputs] = {}
        self._graphs: DecodeGraphs | None = None
        self.buckets: tuple[int, ...] = ()
        if use_cuda_graphs:
            chosen = decode_buckets(layout.max_num_seqs) if buckets is None else tuple(buckets)
            if not chosen:
                raise ValueError("TorchRunner.buckets must name at least one size, got none")
            for b in chosen:
                check_int("TorchRunner", "buckets", b, 1)
            self.buckets = tuple(sorted(set(chosen)))
            self._graphs = DecodeGraphs(self._decode_step, self.decode_inputs, self.buckets)
            self.stats.graphs_captured = len(self.buckets)

    @property
    def config(self) -> ModelConfig:
        return self.model.config

    def decode_inputs(self, rows: int) -> DecodeInputs:
        """The static decode buffers for ``rows`` rows, created once and reused forever."""
        inputs = self._inputs.get(rows)
        if inputs is None:
            inputs = self._inputs[rows] = DecodeInputs(rows, self.layout, self.device)
        return inputs

    def _decode_step(self, inputs: DecodeInputs) -> torch.Tensor:
        out: torch.Tensor = self.model.paged_greedy(self.cache, decode_forward_inputs(inputs))
        return out

    def run_decode(self, chunks: Sequence[SeqChunk], rows: int | None = None) -> list[int]:
        """Decode ``chunks`` through the static graph body, padded to ``rows`` rows.

        Replays the captured graph when ``rows`` is a captured bucket, else runs the
        very same static step eagerly (full ``max_model_len`` context: for checking
        the graph body, not for speed); tokens of sampling chunks only, in order.
        """
        n = len(chunks)
        rows = n if rows is None else rows
        if rows < n:
            raise ValueError(f"rows={rows} < {n} decode chunks")
        inputs = self.decode_inputs(rows)
        fill_decode_inputs(inputs, chunks)
        if self._graphs is not None and rows in self._graphs:
            out = self._graphs.replay(rows)
        else:
            out = self._decode_step(inputs)
        tokens: list[int] = out[:n].tolist()
        return [t for c, t in zip(chunks, tokens, strict=True) if c.sample]

    def run_eager(self, prefills: Sequence[SeqChunk], decodes: Sequence[SeqChunk]) -> list[int]:
        """Any pass, eagerly, with the decode context cut to the longest decode row."""
        inp = build_forward_inputs(prefills, decodes, self.layout, self.device)
        tokens: list[int] = self.model.paged_greedy(self.cache, inp).tolist()
        return tokens

    def execute(self, batch: ScheduledBatch) -> list[int]:
        if batch.kind is BatchKind.EMPTY:
            return []
        if self.num_threads is None:
            return self._execute(batch)
        before = torch.get_num_threads()
        torch.set_num_threads(self.num_threads)
        try:
            return self._execute(batch)
        finally:
            torch.set_num_threads(before)

    def _execute(self, batch: ScheduledBatch) -> list[int]:
        kind = batch.kind
        t0 = time.perf_counter()
        n = len(batch.decodes)
        bucket = None
        if kind is BatchKind.DECODE and self._graphs is not None:
            bucket = choose_bucket(n, self.buckets)
        if bucket is not None:
            tokens = self.run_decode(batch.decodes, bucket)
            step = StepKind.DECODE_GRAPH
            self.stats.graph_replays += 1
            self.stats.padded_rows += bucket - n
        else:
            tokens = self.run_eager(batch.prefills, batch.decodes)
            if kind is BatchKind.DECODE:
                step = StepKind.DECODE_EAGER
                self.stats.eager_decode_steps += 1
            else:
                step = StepKind.MIXED if kind is BatchKind.MIXED else StepKind.PREFILL
                self.stats.prefill_or_mixed_steps += 1
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.stats.record(step, time.perf_counter() - t0, batch.num_prefill_tokens + n)
        return tokens

    def summary(self) -> dict[str, object]:
        """``stats.summary()``: counters and per-kind tokens/s, p50/p99 step times."""
        return self.stats.summary()


def check_cuda(device: str) -> None:
    """``ValueError`` in one line when ``device`` is a GPU torch cannot see (no GPU, a CPU
    build of torch, or ``cuda:N`` past the last one): not torch's traceback."""
    if not device.startswith("cuda"):
        return
    if not torch.cuda.is_available():
        raise ValueError(
            f"device {device!r}: torch sees no CUDA GPU here (torch {torch.__version__}, "
            "torch.cuda.is_available() is False); use device cpu"
        )
    index = device.partition(":")[2]
    if index and int(index) >= torch.cuda.device_count():
        raise ValueError(f"device {device!r}: torch sees {torch.cuda.device_count()} GPU(s)")


def runner_for(
    layout: KVLayout,
    model: object,
    device: str,
    dtype: str,
    num_threads: int | None,
    check_finite: bool = True,
) -> TorchRunner:
    """The engine's torch runner: ``model`` is a checkpoint directory, a ``ModelConfig`` or
    None (the tiny seeded default); ``dtype="auto"`` is the checkpoint's (float32 if seeded);
    ``check_finite``: refuse a checkpoint's NaN or infinite weights."""
    from densegate.impl.runners.hf_config import checkpoint_dir

    path = checkpoint_dir(model)
    check_cuda(device)  # before a checkpoint's weights are allocated on it
    if path is not None:
        from densegate.impl.runners.checkpoint import load_model

        want = None if dtype == "auto" else getattr(torch, dtype)
        loaded = load_model(path, device, want, check_finite=check_finite)
        return TorchRunner(layout, device=device, num_threads=num_threads, model=loaded)
    if model is not None and not isinstance(model, ModelConfig):
        raise ValueError(f"model must be a checkpoint directory or a ModelConfig, got {model!r}")
    torch_dtype = torch.float32 if dtype == "auto" else getattr(torch, dtype)
    return TorchRunner(layout, model, device=device, dtype=torch_dtype, num_threads=num_threads)
