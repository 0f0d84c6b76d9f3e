"""Timing the torch runner's pass kinds over a grid, for a measured profile.

Each grid point is a synthetic ``ScheduledBatch`` (prefill chunks with given
lengths and starts, decode rows with given context lengths) run through a real
``TorchRunner``; the runner's own per-kind step timer gives the time and the
kind (eager or graph-replayed), so the profile times exactly what a run times.
The KV cache holds whatever the grid wrote: timing does not depend on values.
torch is imported only when a grid runs.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from densegate.impl.sched.batch import KVLayout, ScheduledBatch, SeqChunk
from densegate.impl.validation import check_int
from densegate.lab.cost.model import PassWork
from densegate.lab.cost.profile import Profile, Sample, fit, fit_error

__all__ = [
    "GRIDS",
    "GridPoint",
    "default_grid",
    "model_config_from_dir",
    "profile_torch",
    "small_grid",
    "time_grid",
]

PROFILE_LAYOUT = KVLayout(block_size=16, num_blocks=8704, max_model_len=4096, max_num_seqs=128)
"""Enough blocks for the largest grid point (128 decode rows of 1,024 + 2,048 prefill)."""


@dataclass(frozen=True)
class GridPoint:
    """Prefill chunks as ``(start, tokens)`` and decode rows as context lengths."""

    prefills: tuple[tuple[int, int], ...] = ()
    decodes: tuple[int, ...] = ()

    def clipped(self, max_model_len: int) -> GridPoint:
        """The point with no sequence past ``max_model_len``: a chunk shortened and moved
        back, a decode context cut (a model with few positions is profiled on its own sizes)."""
        top = max_model_len
        pre = tuple((min(s, top - min(n, top)), min(n, top)) for s, n in self.prefills)
        return GridPoint(pre, tuple(min(c, top) for c in self.decodes))


def spread(rows: int, mean: int) -> tuple[int, ...]:
    """``rows`` context lengths spread evenly over [0.2, 1.8] x ``mean``: real decode batches
    mix lengths, and the eager runner groups rows by length, so uniform rows would flatter it."""
    if rows == 1:
        return (mean,)
    return tuple(max(2, round(mean * (0.2 + 1.6 * i / (rows - 1)))) for i in range(rows))


def default_grid(token_budget: int = 2048, max_seqs: int = 128) -> list[GridPoint]:
    """Prefill-only, decode-only and mixed points spanning the bench's pass sizes."""
    grid: list[GridPoint] = []
    for chunks, tokens, start in itertools.product((1, 2, 4, 8), (16, 64, 256, 512), (0, 768)):
        if chunks * tokens <= token_budget:
            grid.append(GridPoint(((start, tokens),) * chunks))
    for rows, ctx in itertools.product((1, 8, 32, 64, max_seqs), (32, 256, 1024)):
        grid.append(GridPoint((), spread(rows, ctx)))
    for pre, rows, ctx in itertools.product(
        (((0, 64),), ((0, 512),), ((0, 256),) * 4, ((512, 1024),)), (8, 64, max_seqs), (64, 512)
    ):
        grid.append(GridPoint(pre, spread(rows, ctx)))
    return grid


def small_grid() -> list[GridPoint]:
    """A dozen points, enough to fit every kind: for smoke runs, not for a profile to trust."""
    prefill = [
        GridPoint(((s, n),) * c)
        for s, n, c in ((0, 16, 1), (0, 128, 2), (64, 64, 1), (0, 256, 1), (32, 32, 3))
    ]
    decode = [GridPoint((), (c,) * r) for r, c in ((1, 16), (4, 64), (8, 32), (2, 128))]
    mixed = [
        GridPoint(((0, n),) * c, (k,) * r)
        for n, c, r, k in (
            (16, 1, 2, 32),
            (64, 2, 4, 64),
            (32, 1, 8, 16),
            (128, 1, 1, 128),
            (48, 3, 3, 48),
            (96, 1, 6, 96),
            (8, 2, 2, 200),
        )
    ]
    return prefill + decode + mixed


GRIDS: dict[str, Callable[[], list[GridPoint]]] = {"full": default_grid, "small": small_grid}


def _batch(point: GridPoint, layout: KVLayout, index: int) -> ScheduledBatch:
    bs = layout.block_size
    next_block = 0
    batch = ScheduledBatch(index)

    def table(positions: int) -> list[int]:
        nonlocal next_block
        n = -(-positions // bs)
        blocks = [(next_block + i) % layout.num_blocks for i in range(n)]
        next_block += n
        return blocks

    seq = 0
    for start, n in point.prefills:
        batch.prefills.append(SeqChunk(seq, [1 + seq % 7] * n, start, table(start + n), True, True))
        seq += 1
    for ctx in point.decodes:
        batch.decodes.append(SeqChunk(seq, [2], ctx - 1, table(ctx), False, True))
        seq += 1
    return batch


def time_grid(
    runner: Any,
    grid: Sequence[GridPoint],
    repeats: int = 5,
    progress: Callable[[str], None] | None = None,
    seed: int = 0,
) -> list[Sample]:
    """One sample per point: the median of ``repeats`` timed runs.

    The grid runs once to warm up, then ``repeats`` rounds, each in a fresh
    shuffled order: on a shared machine a burst of contention then lands on
    different points in different rounds, and the median drops it.
    """
    check_int("time_grid", "repeats", repeats, 1)
    layout = runner.layout
    batches = [_batch(p, layout, 0) for p in grid]
    times: list[list[float]] = [[] for _ in grid]
    kinds = [""] * len(grid)
    rng = random.Random(seed)
    for rnd in range(repeats + 1):
        order = list(range(len(grid)))
        rng.shuffle(order)
        for i in order:
            before = {s: len(v) for s, v in runner.stats.step_seconds.items()}
            runner.execute(batches[i])
            (step,) = [s for s, v in runner.stats.step_seconds.items() if len(v) > before[s]]
            kinds[i] = step.value
            if rnd:
                times[i].append(1e3 * runner.stats.step_seconds[step][-1])
        if progress is not None:
            progress(
                f"round {rnd}/{repeats} of {len(grid)} grid points"
                + (" (warm-up)" if not rnd else "")
            )
    return [
        Sample(kinds[i], PassWork.from_batch(batches[i]), statistics.median(times[i]))
        for i in range(len(grid))
    ]


def model_config_from_dir(directory: str | Path) -> Any:
    """The ``ModelConfig`` of a Hugging Face checkpoint's ``config.json`` (the runner's own
    reader). Only the shape is used: timing depends on it, not on the weights' values."""
    from densegate.impl.runners.hf_config import read_config

    try:
        return read_config(directory).config
    except (ValueError, OSError) as e:
        raise ValueError(f"{directory}: cannot read a model shape ({e})") from e


def profile_torch(
    device: str = "cpu",
    model_config: Any = None,
    *,
    threads: int | None = 1,
    repeats: int = 5,
    grid: Sequence[GridPoint] | None = None,
    collective_ms: float = 0.0,
    progress: Callable[[str], None] | None = None,
    max_model_len: int | None = None,
) -> Profile:
    """Time ``default_grid`` (or ``grid``) on a fresh ``TorchRunner`` and fit the model.

    ``max_model_len`` (default: 4096, or the model's ``max_position_embeddings`` if smaller)
    bounds the grid (``GridPoint.clipped``), so a model with few positions is profiled too.
    """
    import platform

    import torch

    from densegate.impl.runners.model_config import ModelConfig
    from densegate.impl.runners.torch_runner import TorchRunner

    positions = (model_config or ModelConfig()).max_position_embeddings
    limit = max_model_len or min(PROFILE_LAYOUT.max_model_len, positions or 4096)
    points = [g.clipped(limit) for g in (default_grid() if grid is None else grid)]
    layout = dataclasses.replace(PROFILE_LAYOUT, max_model_len=limit)
    runner = TorchRunner(layout, model_config, device=device, num_threads=threads)
    samples = time_grid(runner, points, repeats, progress)
    graph_rows = max(runner.buckets, default=0)
    model = fit(samples, graph_rows, collective_ms)
    cfg = runner.config
    inputs: dict[str, Any] = {
        "device": device,
        "device_name": torch.cuda.get_device_name(device)
        if device.startswith("cuda")
        else platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "threads": threads,
        "model": {
            "hidden": cfg.hidden,
            "n_layers": cfg.n_layers,
            "n_heads": cfg.n_heads,
            "n_kv_heads": cfg.n_kv_heads,
            "ffn_hidden": cfg.ffn_hidden,
            "vocab_size": cfg.vocab_size,
        },
        "dtype": "float32",
        "repeats": repeats,
        "max_model_len": limit,
        "cuda_graph_rows": graph_rows,
    }
    return Profile(
        f"measured-{device}", "measured", inputs, model, samples, fit_error(model, samples)
    )
