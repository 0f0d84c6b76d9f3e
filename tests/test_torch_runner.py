"""TorchRunner driven by hand-built passes, checked against the full-recompute reference.

Float64 on the CPU throughout: batching, chunking and padding change summation
order by ~1e-15, far below any gap between the top two logits, so comparing
greedy tokens for exact equality is sound. The CUDA-graph path cannot run here;
its padded decode step is run eagerly below, and the rest of its host side
(buckets, static inputs) in ``test_runner_host_side``.
"""

from __future__ import annotations

import random

import pytest
import torch

import densegate.impl.runners.forward_inputs as forward_inputs
from densegate.impl.runners.forward_inputs import build_forward_inputs, decode_groups
from densegate.impl.runners.runner_stats import StepKind
from densegate.impl.sched.batch import KVLayout, Runner, SeqChunk
from tests.support.runner_harness import (
    Blocks,
    Seq,
    decode,
    expected,
    make_seqs,
    new_runner,
    prefill,
    run,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# -- correctness against the reference ----------------------------------------------


def test_runner_satisfies_protocol() -> None:
    assert isinstance(new_runner(), Runner)


def test_prefill_then_batched_decode_matches_reference() -> None:
    rng = random.Random(0)
    runner, pool = new_runner(), Blocks(rng)
    seqs = make_seqs(rng, [3, 9, 1, 6], 10)  # lengths straddle the 4-token blocks
    run(runner, [prefill(pool, s, 99) for s in seqs])
    while not seqs[0].done:
        run(runner, [], [decode(pool, s) for s in seqs])
    for s in seqs:
        assert s.out == expected(runner, s)


def test_batched_decode_equals_one_at_a_time() -> None:
    rng = random.Random(1)
    lengths = [5, 2, 8]
    batched, single = new_runner(), new_runner()
    pool_b, pool_s = Blocks(random.Random(7)), Blocks(random.Random(8))
    seqs_b = make_seqs(rng, lengths, 8)
    seqs_s = [Seq(s.seq_id, list(s.prompt), s.max_new) for s in seqs_b]
    run(batched, [prefill(pool_b, s, 99) for s in seqs_b])
    for s in seqs_s:
        run(single, [prefill(pool_s, s, 99)])
    while not seqs_b[0].done:
        run(batched, [], [decode(pool_b, s) for s in seqs_b])
        for s in seqs_s:
            run(single, [], [decode(pool_s, s)])
    assert [s.out for s in seqs_b] == [s.out for s in seqs_s]
    assert batched.stats.eager_decode_steps * len(lengths) == single.stats.eager_decode_steps


def test_chunked_prefill_equals_unchunked() -> None:
    rng = random.Random(2)
    whole, chunked = new_runner(), new_runner()
    (a,) = make_seqs(rng, [11], 6)
    b = Seq(0, list(a.prompt), 6)
    pool_a, pool_b = Blocks(random.Random(3)), Blocks(random.Random(4))
    run(whole, [prefill(pool_a, a, 99)])
    for n in (3, 5):  # chunk ends at 3 and 8: neither on a block boundary
        assert run(chunked, [prefill(pool_b, b, n)]) == []
    assert b.cached == 8 and not b.out
    run(chunked, [prefill(pool_b, b, 99)])
    while not a.done:
        run(whole, [], [decode(pool_a, a)])
        run(chunked, [], [decode(pool_b, b)])
    assert a.out == b.out == expected(whole, a)


def test_recompute_after_preemption_continues_identically() -> None:
    rng = random.Random(5)
    runner, pool = new_runner(), Blocks(rng)
    victim, other = make_seqs(rng, [6, 5], 12)
    run(runner, [prefill(pool, victim, 99), prefill(pool, other, 99)])
    for _ in range(4):
        run(runner, [], [decode(pool, victim), decode(pool, other)])
    old_blocks = list(victim.blocks)
    pool.release(victim)  # preempted: its blocks go back and `other` reuses them
    for _ in range(4):  # the 4th decode reaches position 12: a new block, freshly freed
        run(runner, [], [decode(pool, other)])
    assert set(other.blocks) & set(old_blocks)
    # Recompute prompt + generated tokens from start 0, in two chunks, on new blocks.
    assert run(runner, [prefill(pool, victim, 7)], [decode(pool, other)]) == [other.out[-1]]
    run(runner, [prefill(pool, victim, 99)], [decode(pool, other)])
    assert victim.blocks != old_blocks
    while not victim.done:
        run(runner, [], [decode(pool, victim), *([decode(pool, other)] if not other.done else [])])
    assert victim.out == expected(runner, victim)
    assert other.out == expected(runner, other)


def test_mixed_passes_match_reference() -> None:
    rng = random.Random(6)
    runner, pool = new_runner(), Blocks(rng)
    a, b, c = make_seqs(rng, [4, 7, 10], 7)
    run(runner, [prefill(pool, a, 99)])
    run(runner, [prefill(pool, b, 99)], [decode(pool, a)])
    run(runner, [prefill(pool, c, 6)], [decode(pool, a), decode(pool, b)])
    run(runner, [prefill(pool, c, 99)], [decode(pool, a), decode(pool, b)])
    while not a.done:
        run(runner, [], [decode(pool, s) for s in (a, b, c)])
    for s in (b, c):
        while not s.done:
            run(runner, [], [decode(pool, s)])
    for s in (a, b, c):
        assert s.out == expected(runner, s)
    assert runner.stats.prefill_or_mixed_steps == 4
    assert len(runner.stats.step_seconds[StepKind.MIXED]) == 3


@pytest.mark.parametrize("split", [None, 1])
@pytest.mark.parametrize("seed", range(5))
def test_random_workload_matches_reference(
    seed: int, split: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Random chunking, mixing, preemption and block reuse: every output equals the reference.

    ``split=1`` puts every distinct decode length in its own eager group.
    """
    if split is not None:
        monkeypatch.setattr(forward_inputs, "GROUP_SPLIT_POSITIONS", split)
    rng = random.Random(100 + seed)
    runner, pool = new_runner(), Blocks(rng)
    seqs = make_seqs(rng, [rng.randint(1, 14) for _ in range(5)], rng.randint(3, 10))
    waiting = list(seqs)
    running: list[Seq] = []
    while waiting or running:
        if running and rng.random() < 0.1:
            victim = running.pop(rng.randrange(len(running)))
            pool.release(victim)
            waiting.insert(0, victim)
        decodes = [decode(pool, s) for s in running if rng.random() < 0.8]
        prefills = [prefill(pool, s, rng.randint(1, 6)) for s in waiting[:2]]
        if not prefills and not decodes:
            continue
        run(runner, prefills, decodes)
        for s, c in prefills:
            if c.sample:
                waiting.remove(s)
                running.append(s)
        for s in [s for s in running if s.done]:
            running.remove(s)
            pool.release(s)
    for s in seqs:
        assert s.out[: s.max_new] == expected(runner, s)


# -- eager decode: grouped by length, context cut to the group's longest row ---------


def test_decode_groups() -> None:
    assert decode_groups([], 16) == []
    assert decode_groups([3], 16) == [[0]]
    # Longest first; equal lengths never split; a short tail splits off once the
    # padding it would cost reaches GROUP_SPLIT_POSITIONS (1024 positions).
    assert decode_groups([2, 2, 2], 16) == [[0, 1, 2]]
    assert decode_groups([10, 200, 12, 190], 16) == [[1, 3], [2, 0]]
    assert decode_groups([70, 5], 16) == [[0], [1]]  # (70 - 5) * 16 * 1 = 1040 >= 1024
    assert decode_groups([68, 5], 16) == [[0, 1]]  # 1008 < 1024: one group is cheaper
    # Many short rows behind one longer one: the waste counts every remaining row.
    assert decode_groups([1] * 22 + [4], 16) == [[22], list(range(22))]  # 3 * 16 * 22 >= 1024
    assert decode_groups([1] * 21 + [4], 16) == [[21, *range(21)]]  # 3 * 16 * 21 < 1024


def test_eager_decode_context_follows_lengths_not_max_model_len() -> None:
    layout = KVLayout(block_size=4, num_blocks=64, max_model_len=4096, max_num_seqs=8)
    assert layout.max_blocks_per_seq == 1024
    decodes = [SeqChunk(i, [1], pos, list(range(i * 8, i * 8 + 8)), False, True)
               for i, pos in enumerate([2, 30, 5])]  # fmt: skip
    inp = build_forward_inputs([], decodes, layout, "cpu")
    assert [(g.n_rows, tuple(g.block_tables.shape)) for g in inp.decodes] == [(3, (3, 8))]
    # Rows are laid out longest first; sampled rows come back in batch order.
    assert inp.positions.tolist() == [30, 5, 2]
    assert inp.sample_rows is not None and inp.sample_rows.tolist() == [2, 0, 1]


def test_grouped_eager_decode_equals_static_graph_body(monkeypatch: pytest.MonkeyPatch) -> None:
    """Eager (grouped, cut context) and the full-width static step: same tokens, same cache."""
    monkeypatch.setattr(forward_inputs, "GROUP_SPLIT_POSITIONS", 1)
    rng = random.Random(12)
    eager, static = new_runner(), new_runner()
    pool_e, pool_s = Blocks(random.Random(13)), Blocks(random.Random(13))
    seqs_e = make_seqs(rng, [1, 14, 5, 22, 9], 6)
    seqs_s = [Seq(s.seq_id, list(s.prompt), s.max_new) for s in seqs_e]
    run(eager, [prefill(pool_e, s, 99) for s in seqs_e])
    run(static, [prefill(pool_s, s, 99) for s in seqs_s])
    groups_seen = 0
    while not seqs_e[0].done:
        chunks = [decode(pool_e, s) for s in seqs_e]
        groups_seen = max(groups_seen, len(decode_groups([c.start // 4 + 1 for _, c in chunks], 4)))
        run(eager, [], chunks)
        chunks_s = [decode(pool_s, s) for s in seqs_s]
        for (s, c), t in zip(chunks_s, static.run_decode([c for _, c in chunks_s]), strict=True):
            s.cached, s.out = c.start + 1, [*s.out, t]
    assert groups_seen >= 4
    assert [s.out for s in seqs_e] == [s.out for s in seqs_s]
    torch.testing.assert_close(eager.cache.k, static.cache.k, rtol=0, atol=1e-12)
    torch.testing.assert_close(eager.cache.v, static.cache.v, rtol=0, atol=1e-12)
    for s in seqs_e:
        assert s.out == expected(eager, s)


# -- padding, buckets, static buffers -----------------------------------------------


def test_padded_decode_rows_are_harmless() -> None:
    """The graph body, run eagerly with padding: same tokens, writes only real slots + pad slot."""
    rng = random.Random(9)
    padded, plain = new_runner(), new_runner()
    pool_p, pool_q = Blocks(random.Random(10)), Blocks(random.Random(10))
    seqs_p = make_seqs(rng, [5, 3, 9], 4)
    seqs_q = [Seq(s.seq_id, list(s.prompt), s.max_new) for s in seqs_p]
    run(padded, [prefill(pool_p, s, 99) for s in seqs_p])
    run(plain, [prefill(pool_q, s, 99) for s in seqs_q])
    for _ in range(3):
        chunks_p = [decode(pool_p, s) for s in seqs_p]
        chunks_q = [decode(pool_q, s) for s in seqs_q]
        real_slots = [c.block_table[c.start // 4] * 4 + c.start % 4 for _, c in chunks_p]
        before = padded.cache.k.clone(), padded.cache.v.clone()
        out_p = padded.run_decode([c for _, c in chunks_p], rows=8)
        out_q = plain.run_decode([c for _, c in chunks_q])
        assert out_p == out_q
        for (s, c), t in zip(chunks_p, out_p, strict=True):
            s.cached, s.out = c.start + 1, [*s.out, t]
        for (s, c), t in zip(chunks_q, out_q, strict=True):
            s.cached, s.out = c.start + 1, [*s.out, t]
        for cache_before, cache_after in zip(before, (padded.cache.k, padded.cache.v), strict=True):
            changed = (cache_before != cache_after).flatten(2).any(-1).any(0)
            written = set(torch.nonzero(changed).flatten().tolist())
            assert written <= {*real_slots, padded.cache.pad_slot}
            assert set(real_slots) <= written
        # Every real slot holds exactly what the unpadded runner wrote there.
        pad = padded.cache.pad_slot
        torch.testing.assert_close(
            padded.cache.k[:, :pad], plain.cache.k[:, :pad], rtol=0, atol=1e-12
        )
    assert padded.cache.k[:, padded.cache.pad_slot].abs().sum() > 0  # padded rows did run
    for s in seqs_p:
        assert s.out == expected(padded, s)
