"""The torch runner: the seeded decoder behind the scheduler's ``Runner`` interface.

Decode-only passes are the ones the dense gate protects, so on CUDA they replay
captured graphs (``cuda_graphs``); prefill and mixed passes, and decode passes
larger than the largest bucket, run eager. On the CPU the same code runs eager.
Step times are kept per kind with real token counts only (never padded rows), so
tokens/s and p50/p99 per kind can be compared between gate settings.
"""

from __future__ import annotations

import enum
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from densegate.impl.batch import BatchKind, KVLayout, ScheduledBatch, SeqChunk
from densegate.impl.cuda_graphs import (
    DecodeGraphs,
    DecodeInputs,
    choose_bucket,
    decode_buckets,
    decode_row,
    fill_decode_inputs,
)
from densegate.impl.model import (
    DecoderModel,
    ForwardInputs,
    ModelConfig,
    PagedKVCache,
    PrefillSpan,
)

__all__ = [
    "KindSummary",
    "RunnerStats",
    "StepKind",
    "TorchRunner",
    "build_forward_inputs",
    "decode_forward_inputs",
    "percentile",
]


class StepKind(enum.Enum):
    """How a pass ran; the key of the per-kind timings."""

    PREFILL = "prefill"
    MIXED = "mixed"
    DECODE_GRAPH = "decode_graph"
    DECODE_EAGER = "decode_eager"


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (``q`` in [0, 100]); NaN for no values."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q must be in [0, 100], got {q}")
    if not values:
        return math.nan
    xs = sorted(values)
    rank = (len(xs) - 1) * q / 100
    lo = math.floor(rank)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (rank - lo)


@dataclass(frozen=True, slots=True)
class KindSummary:
    """Steps of one kind: ``tokens`` are real tokens fed (prefill tokens + decode rows)."""

    steps: int
    tokens: int
    seconds: float
    tokens_per_s: float
    p50_ms: float
    p99_ms: float

    def as_dict(self) -> dict[str, float]:
        return {
            "steps": self.steps,
            "tokens": self.tokens,
            "seconds": self.seconds,
            "tokens_per_s": self.tokens_per_s,
            "p50_ms": self.p50_ms,
            "p99_ms": self.p99_ms,
        }


@dataclass(slots=True)
class RunnerStats:
    """Counters and per-kind step times of a ``TorchRunner``."""

    graph_replays: int = 0
    eager_decode_steps: int = 0
    prefill_or_mixed_steps: int = 0
    graphs_captured: int = 0
    padded_rows: int = 0
    step_seconds: dict[StepKind, list[float]] = field(
        default_factory=lambda: {k: [] for k in StepKind}
    )
    step_tokens: dict[StepKind, int] = field(default_factory=lambda: dict.fromkeys(StepKind, 0))

    def record(self, kind: StepKind, seconds: float, tokens: int) -> None:
        self.step_seconds[kind].append(seconds)
        self.step_tokens[kind] += tokens

    def kind_summary(self, kind: StepKind) -> KindSummary:
        times = self.step_seconds[kind]
        total = sum(times)
        tokens = self.step_tokens[kind]
        return KindSummary(
            steps=len(times),
            tokens=tokens,
            seconds=total,
            tokens_per_s=tokens / total if total > 0 else 0.0,
            p50_ms=percentile(times, 50) * 1e3,
            p99_ms=percentile(times, 99) * 1e3,
        )

    def summary(self) -> dict[str, object]:
        """JSON-ready counters plus ``kinds``: per kind that ran, the ``KindSummary`` fields."""
        kinds = {k.value: self.kind_summary(k).as_dict() for k in StepKind if self.step_seconds[k]}
        return {
            "graph_replays": self.graph_replays,
            "eager_decode_steps": self.eager_decode_steps,
            "prefill_or_mixed_steps": self.prefill_or_mixed_steps,
            "graphs_captured": self.graphs_captured,
            "padded_rows": self.padded_rows,
            "kinds": kinds,
        }


def decode_forward_inputs(inputs: DecodeInputs) -> ForwardInputs:
    """The decode-only pass over static buffers: the body of every decode graph."""
    return ForwardInputs(
        token_ids=inputs.token_ids,
        positions=inputs.positions,
        slot_mapping=inputs.slot_mapping,
        prefills=(),
        decode_row_start=0,
        decode_block_tables=inputs.block_tables,
        sample_rows=None,
    )


def build_forward_inputs(
    prefills: Sequence[SeqChunk],
    decodes: Sequence[SeqChunk],
    layout: KVLayout,
    device: torch.device | str,
) -> ForwardInputs:
    """A general eager pass: prefill chunks (any start, any length) then decode rows.

    Sampled rows come out in ``ScheduledBatch.sampled()`` order: the last row of
    each sampling prefill chunk, then each sampling decode row.
    """
    bs, mb = layout.block_size, layout.max_blocks_per_seq
    tokens: list[int] = []
    positions: list[int] = []
    slots: list[int] = []
    spans: list[PrefillSpan] = []
    sample_rows: list[int] = []
    for c in prefills:
        n = len(c.token_ids)
        end = c.start + n
        if n == 0 or c.start < 0:
            raise ValueError(f"prefill chunk of seq {c.seq_id}: start {c.start}, {n} tokens")
        if end > layout.max_model_len:
            raise ValueError(
                f"seq {c.seq_id}: {end} positions exceed max_model_len {layout.max_model_len}"
            )
        n_blocks = -(-end // bs)
        if len(c.block_table) < n_blocks:
            raise ValueError(
                f"seq {c.seq_id}: block table of {len(c.block_table)} blocks does not cover "
                f"{end} positions"
            )
        table = list(c.block_table[:n_blocks])
        row = len(tokens)
        tokens.extend(c.token_ids)
        positions.extend(range(c.start, end))
        slots.extend(table[p // bs] * bs + p % bs for p in range(c.start, end))
        table_t = torch.tensor(table, dtype=torch.long, device=device)
        offsets = torch.arange(bs, dtype=torch.long, device=device)
        ctx_slots = (table_t[:, None] * bs + offsets[None, :]).reshape(-1)[:end]
        keys = torch.arange(end, device=device)
        allowed = keys[None, :] <= torch.arange(c.start, end, device=device)[:, None]
        spans.append(PrefillSpan(row, n, ctx_slots, allowed))
        if c.sample:
            sample_rows.append(row + n - 1)
    decode_row_start = len(tokens)
    decode_tables: list[int] = []
    for c in decodes:
        tok, pos, slot, blocks = decode_row(c, layout)
        if c.sample:
            sample_rows.append(len(tokens))
        tokens.append(tok)
        positions.append(pos)
        slots.append(slot)
        decode_tables.extend(blocks)
        decode_tables.extend([layout.num_blocks] * (mb - len(blocks)))

    def as_tensor(xs: list[int]) -> torch.Tensor:
        return torch.tensor(xs, dtype=torch.long, device=device)

    return ForwardInputs(
        token_ids=as_tensor(tokens),
        positions=as_tensor(positions),
        slot_mapping=as_tensor(slots),
        prefills=tuple(spans),
        decode_row_start=decode_row_start,
        decode_block_tables=as_tensor(decode_tables).view(len(decodes), mb) if decodes else None,
        sample_rows=as_tensor(sample_rows),
    )


def _check_layout(layout: KVLayout) -> None:
    for name in ("block_size", "num_blocks", "max_model_len", "max_num_seqs"):
        value = getattr(layout, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"KVLayout.{name} must be an int >= 1, got {value!r}")


class TorchRunner:
    """Runs scheduled passes through ``DecoderModel`` over a paged KV cache; greedy sampling.

    ``use_cuda_graphs`` defaults to on for CUDA devices and must stay off on
    others. ``buckets`` overrides the decode batch sizes captured as graphs.
    """

    def __init__(
        self,
        layout: KVLayout,
        model_config: ModelConfig | None = None,
        device: str = "cpu",
        dtype: torch.dtype = torch.float32,
        use_cuda_graphs: bool | None = None,
        buckets: Sequence[int] | None = None,
    ) -> None:
        _check_layout(layout)
        self.layout = layout
        self.device = torch.device(device)
        on_cuda = self.device.type == "cuda"
        if on_cuda and not torch.cuda.is_available():
            raise ValueError(f"TorchRunner device={device!r} but CUDA is not available")
        if use_cuda_graphs is None:
            use_cuda_graphs = on_cuda
        elif use_cuda_graphs and not on_cuda:
            raise ValueError(
                f"TorchRunner use_cuda_graphs=True needs a CUDA device, got {device!r}"
            )
        self.model = DecoderModel(model_config or ModelConfig(), self.device, dtype)
        self.cache: PagedKVCache = self.model.new_cache(layout)
        self.stats = RunnerStats()
        self._inputs: dict[int, DecodeInputs] = {}
        self._graphs: DecodeGraphs | None = None
        self.buckets: tuple[int, ...] = ()
        if use_cuda_graphs:
            chosen = decode_buckets(layout.max_num_seqs) if buckets is None else tuple(buckets)
            if not chosen or any(
                isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in chosen
            ):
                raise ValueError(f"TorchRunner buckets must be ints >= 1, got {buckets!r}")
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
        """Decode ``chunks``, padded to ``rows`` static rows (default: no padding).

        Replays the captured graph when ``rows`` is a captured bucket, else runs the
        very same step eagerly; tokens of sampling chunks only, in order.
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

    def execute(self, batch: ScheduledBatch) -> list[int]:
        kind = batch.kind
        if kind is BatchKind.EMPTY:
            return []
        t0 = time.perf_counter()
        if kind is BatchKind.DECODE:
            n = len(batch.decodes)
            bucket = choose_bucket(n, self.buckets) if self._graphs is not None else None
            tokens = self.run_decode(batch.decodes, bucket)
            real = n
            if bucket is not None:
                step = StepKind.DECODE_GRAPH
                self.stats.graph_replays += 1
                self.stats.padded_rows += bucket - n
            else:
                step = StepKind.DECODE_EAGER
                self.stats.eager_decode_steps += 1
        else:
            inp = build_forward_inputs(batch.prefills, batch.decodes, self.layout, self.device)
            tokens = self.model.paged_greedy(self.cache, inp).tolist()
            real = batch.num_prefill_tokens + len(batch.decodes)
            step = StepKind.MIXED if kind is BatchKind.MIXED else StepKind.PREFILL
            self.stats.prefill_or_mixed_steps += 1
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.stats.record(step, time.perf_counter() - t0, real)
        return tokens

    def summary(self) -> dict[str, object]:
        """``stats.summary()``: counters and per-kind tokens/s, p50/p99 step times."""
        return self.stats.summary()
