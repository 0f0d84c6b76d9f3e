"""A minimal scheduler stand-in for driving ``TorchRunner`` by hand-built passes.

Sequences get blocks in shuffled order and freed blocks are reused first
(stale KV), so a paging bug shows up as wrong tokens against ``expected``.
"""

from __future__ import annotations

import random

import torch

from densegate.impl.runners.model import reference_generate
from densegate.impl.runners.model_config import ModelConfig
from densegate.impl.runners.torch_runner import TorchRunner
from densegate.impl.sched.batch import KVLayout, ScheduledBatch, SeqChunk

F64 = torch.float64
LAYOUT = KVLayout(block_size=4, num_blocks=48, max_model_len=40, max_num_seqs=8)


def new_runner() -> TorchRunner:
    return TorchRunner(LAYOUT, ModelConfig(), dtype=F64)


class Seq:
    def __init__(self, seq_id: int, prompt: list[int], max_new: int) -> None:
        self.seq_id = seq_id
        self.prompt = prompt
        self.max_new = max_new
        self.out: list[int] = []
        self.blocks: list[int] = []
        self.cached = 0

    @property
    def tokens(self) -> list[int]:
        return self.prompt + self.out

    @property
    def done(self) -> bool:
        return len(self.out) >= self.max_new


class Blocks:
    """Hands out blocks in shuffled order and reuses freed ones first (stale KV)."""

    def __init__(self, rng: random.Random) -> None:
        self.free = list(range(LAYOUT.num_blocks))
        rng.shuffle(self.free)

    def grow(self, seq: Seq, length: int) -> None:
        while len(seq.blocks) * LAYOUT.block_size < length:
            seq.blocks.append(self.free.pop())

    def release(self, seq: Seq) -> None:
        self.free.extend(seq.blocks)
        seq.blocks = []
        seq.cached = 0


def prefill(pool: Blocks, seq: Seq, n: int) -> tuple[Seq, SeqChunk]:
    toks, start = seq.tokens, seq.cached
    n = min(n, len(toks) - start)
    pool.grow(seq, start + n)
    end = start + n
    return seq, SeqChunk(seq.seq_id, toks[start:end], start, seq.blocks, True, end == len(toks))


def decode(pool: Blocks, seq: Seq) -> tuple[Seq, SeqChunk]:
    toks = seq.tokens
    assert seq.cached == len(toks) - 1
    pool.grow(seq, len(toks))
    return seq, SeqChunk(seq.seq_id, [toks[-1]], len(toks) - 1, seq.blocks, False, True)


def run(
    runner: TorchRunner,
    prefills: list[tuple[Seq, SeqChunk]],
    decodes: list[tuple[Seq, SeqChunk]] = (),  # type: ignore[assignment]
) -> list[int]:
    batch = ScheduledBatch(0, [c for _, c in prefills], [c for _, c in decodes])
    out = list(runner.execute(batch))
    sampled = [s for s, c in [*prefills, *decodes] if c.sample]
    assert len(out) == len(sampled)
    for s, c in [*prefills, *decodes]:
        s.cached = c.start + len(c.token_ids)
    for s, t in zip(sampled, out, strict=True):
        s.out.append(t)
    return out


def make_seqs(rng: random.Random, lengths: list[int], max_new: int) -> list[Seq]:
    return [Seq(i, [rng.randrange(512) for _ in range(n)], max_new) for i, n in enumerate(lengths)]


def expected(runner: TorchRunner, seq: Seq) -> list[int]:
    return reference_generate(runner.model, seq.prompt, seq.max_new)
