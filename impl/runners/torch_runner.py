"""The torch runner: the seeded decoder behind the scheduler's ``Runner`` interface.

Decode-only passes are the ones the dense gate protects, so on CUDA they replay
captured graphs (``cuda_graphs``); prefill and mixed passes, and decode passes
larger than the largest bucket, run eager. On the CPU the same code runs eager.
A graph must keep static shapes, so it attends over ``max_model_len`` for every
row; an eager pass need not, so it gathers only each length group's context
(``decode_groups``): that is what keeps eager passes cheap on the CPU.
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

from densegate.impl.figures import percentile
from densegate.impl.runners.cuda_graphs import (
    DecodeGraphs,
    DecodeInputs,
    choose_bucket,
    decode_buckets,
    decode_row,
    fill_decode_inputs,
)
from densegate.impl.runners.model import (
    DecodeGroup,
    DecoderModel,
    ForwardInputs,
    ModelConfig,
    PagedKVCache,
    PrefillSpan,
)
from densegate.impl.sched.batch import BatchKind, KVLayout, ScheduledBatch, SeqChunk

__all__ = [
    "KindSummary",
    "RunnerStats",
    "StepKind",
    "TorchRunner",
    "build_forward_inputs",
    "decode_forward_inputs",
    "decode_groups",
    "percentile",
]


class StepKind(enum.Enum):
    """How a pass ran; the key of the per-kind timings."""

    PREFILL = "prefill"
    MIXED = "mixed"
    DECODE_GRAPH = "decode_graph"
    DECODE_EAGER = "decode_eager"


def _ms(seconds: float | None) -> float:
    return math.nan if seconds is None else seconds * 1e3


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
            p50_ms=_ms(percentile(times, 50)),
            p99_ms=_ms(percentile(times, 99)),
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
        decodes=(DecodeGroup(0, inputs.rows, inputs.block_tables),),
        sample_rows=None,
    )


GROUP_SPLIT_POSITIONS = 1024
"""An eager decode group is split when that saves at least this many padded key
positions: about the fixed cost of one more gather + attention call per layer."""


def decode_groups(blocks_needed: Sequence[int], block_size: int) -> list[list[int]]:
    """Partition decode rows (indices into ``blocks_needed``) into groups of similar length.

    Rows are taken longest first; a new group starts when padding every remaining
    row to the current group's width would waste ``>= GROUP_SPLIT_POSITIONS``
    key positions more than cutting here. Each group gathers only its longest
    row's context, so one long sequence no longer makes every row pay for it.
    """
    order = sorted(range(len(blocks_needed)), key=lambda i: -blocks_needed[i])
    groups: list[list[int]] = []
    width = 0
    for k, i in enumerate(order):
        need = blocks_needed[i]
        remaining = len(order) - k
        if not groups or (width - need) * block_size * remaining >= GROUP_SPLIT_POSITIONS:
            groups.append([])
            width = need
        groups[-1].append(i)
    return groups


def build_forward_inputs(
    prefills: Sequence[SeqChunk],
    decodes: Sequence[SeqChunk],
    layout: KVLayout,
    device: torch.device | str,
) -> ForwardInputs:
    """A general eager pass: prefill chunks (any start, any length) then decode rows.

    Decode rows are laid out in ``decode_groups`` order, each group's block tables
    padded only to its longest row, so the eager context follows the batch's real
    lengths, never ``max_model_len``. Sampled rows still come out in
    ``ScheduledBatch.sampled()`` order: the last row of each sampling prefill
    chunk, then each sampling decode row.
    """
    bs = layout.block_size
    offsets = torch.arange(bs, dtype=torch.long)
    tokens: list[int] = []
    positions: list[int] = []
    slot_parts: list[torch.Tensor] = []
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
        row = len(tokens)
        tokens.extend(c.token_ids)
        positions.extend(range(c.start, end))
        table = torch.tensor(c.block_table[:n_blocks], dtype=torch.long)
        ctx = (table[:, None] * bs + offsets[None, :]).reshape(-1)[:end]
        slot_parts.append(ctx[c.start :])
        if c.start == 0:
            spans.append(PrefillSpan(row, n, None, None))
        else:
            keys = torch.arange(end, device=device)
            allowed = keys[None, :] <= torch.arange(c.start, end, device=device)[:, None]
            spans.append(PrefillSpan(row, n, ctx.to(device), allowed))
        if c.sample:
            sample_rows.append(row + n - 1)
    rows = [decode_row(c, layout) for c in decodes]
    groups: list[DecodeGroup] = []
    row_of = [0] * len(decodes)
    dec_slots: list[int] = []
    for members in decode_groups([len(r[3]) for r in rows], bs):
        width = len(rows[members[0]][3])
        flat: list[int] = []
        for i in members:
            tok, pos, slot, blocks = rows[i]
            row_of[i] = len(tokens)
            tokens.append(tok)
            positions.append(pos)
            dec_slots.append(slot)
            flat.extend(blocks)
            flat.extend([layout.num_blocks] * (width - len(blocks)))
        tables = torch.tensor(flat, dtype=torch.long, device=device).view(len(members), width)
        groups.append(DecodeGroup(row_of[members[0]], len(members), tables))
    sample_rows.extend(row_of[i] for i, c in enumerate(decodes) if c.sample)
    slot_parts.append(torch.tensor(dec_slots, dtype=torch.long))

    def as_tensor(xs: list[int]) -> torch.Tensor:
        return torch.tensor(xs, dtype=torch.long, device=device)

    return ForwardInputs(
        token_ids=as_tensor(tokens),
        positions=as_tensor(positions),
        slot_mapping=torch.cat(slot_parts).to(device),
        prefills=tuple(spans),
        decodes=tuple(groups),
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
    ) -> None:
        _check_layout(layout)
        if num_threads is not None and (
            isinstance(num_threads, bool) or not isinstance(num_threads, int) or num_threads < 1
        ):
            raise ValueError(f"TorchRunner num_threads must be an int >= 1, got {num_threads!r}")
        self.num_threads = num_threads
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
