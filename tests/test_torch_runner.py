"""TorchRunner driven by hand-built passes, checked against the full-recompute reference.

Float64 on the CPU throughout: batching, chunking and padding change summation
order by ~1e-15, far below any gap between the top two logits, so comparing
greedy tokens for exact equality is sound. The CUDA-graph path cannot run here;
everything it uses on the host (bucket choice, static padded inputs, the padded
decode step itself) is exercised eagerly below.
"""

from __future__ import annotations

import random

import pytest
import torch

import densegate.impl.runners.forward_inputs as forward_inputs
from densegate.impl.figures import percentile
from densegate.impl.runners.cuda_graphs import (
    DecodeInputs,
    choose_bucket,
    decode_buckets,
    fill_decode_inputs,
)
from densegate.impl.runners.model import ModelConfig, reference_generate
from densegate.impl.runners.torch_runner import (
    StepKind,
    TorchRunner,
    build_forward_inputs,
    decode_groups,
)
from densegate.impl.sched.batch import KVLayout, Runner, ScheduledBatch, SeqChunk

pytestmark = pytest.mark.usefixtures("one_torch_thread")

F64 = torch.float64
LAYOUT = KVLayout(block_size=4, num_blocks=48, max_model_len=40, max_num_seqs=8)


def new_runner() -> TorchRunner:
    return TorchRunner(LAYOUT, ModelConfig(), dtype=F64)


# -- a minimal scheduler stand-in ---------------------------------------------------


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


def test_choose_bucket() -> None:
    buckets = (1, 2, 4, 8, 16, 32)
    assert [choose_bucket(n, buckets) for n in (1, 2, 3, 4, 5, 9, 17, 32)] == [
        1, 2, 4, 4, 8, 16, 32, 32,
    ]  # fmt: skip
    assert choose_bucket(33, buckets) is None
    assert choose_bucket(3, [8, 2, 4]) == 4
    with pytest.raises(ValueError):
        choose_bucket(0, buckets)


def test_decode_buckets() -> None:
    assert decode_buckets(1) == (1,)
    assert decode_buckets(6) == (1, 2, 4, 6)
    assert decode_buckets(16) == (1, 2, 4, 8, 16)
    assert decode_buckets(40) == (1, 2, 4, 8, 16, 32, 40)
    assert decode_buckets(64) == (1, 2, 4, 8, 16, 32, 48, 64)
    with pytest.raises(ValueError):
        decode_buckets(0)


def _dchunk(seq_id: int, tok: int, pos: int, table: list[int]) -> SeqChunk:
    return SeqChunk(seq_id, [tok], pos, table, False, True)


def test_decode_inputs_are_reused_and_filled_correctly() -> None:
    inputs = DecodeInputs(4, LAYOUT, "cpu")
    ptr = inputs.flat.data_ptr()
    pad_slot, pad_block, mb = LAYOUT.num_slots, LAYOUT.num_blocks, LAYOUT.max_blocks_per_seq
    assert mb == 10
    chunks = [
        _dchunk(0, 17, 0, [5]),
        _dchunk(1, 300, 9, [7, 2, 11, 40]),  # the table is longer than position 9 needs
        _dchunk(2, 4, 4, [3, 8]),
    ]
    assert fill_decode_inputs(inputs, chunks) == 3
    assert inputs.token_ids.tolist() == [17, 300, 4, 0]
    assert inputs.positions.tolist() == [0, 9, 4, 0]
    assert inputs.slot_mapping.tolist() == [5 * 4, 11 * 4 + 1, 8 * 4, pad_slot]
    assert inputs.block_tables.tolist() == [
        [5] + [pad_block] * 9,
        [7, 2, 11] + [pad_block] * 7,
        [3, 8] + [pad_block] * 8,
        [pad_block] * 10,
    ]
    # A smaller pass reuses the same memory and overwrites stale rows with padding.
    assert fill_decode_inputs(inputs, [_dchunk(3, 9, 1, [6])]) == 1
    assert inputs.flat.data_ptr() == ptr
    assert inputs.token_ids.tolist() == [9, 0, 0, 0]
    assert inputs.positions.tolist() == [1, 0, 0, 0]
    assert inputs.slot_mapping.tolist() == [6 * 4 + 1, pad_slot, pad_slot, pad_slot]
    assert inputs.block_tables.tolist() == [[6] + [pad_block] * 9] + [[pad_block] * 10] * 3
    # The views alias the one flat buffer, so the graph sees every fill.
    for view in (inputs.token_ids, inputs.positions, inputs.slot_mapping, inputs.block_tables):
        assert view.untyped_storage().data_ptr() == inputs.flat.untyped_storage().data_ptr()


def test_decode_inputs_reject_bad_rows() -> None:
    inputs = DecodeInputs(2, LAYOUT, "cpu")
    with pytest.raises(ValueError, match="do not fit"):
        fill_decode_inputs(inputs, [_dchunk(i, 1, 0, [i]) for i in range(3)])
    with pytest.raises(ValueError, match="1 token"):
        fill_decode_inputs(inputs, [SeqChunk(0, [1, 2], 0, [0], False, True)])
    with pytest.raises(ValueError, match="cover"):
        fill_decode_inputs(inputs, [_dchunk(0, 1, 4, [0])])
    with pytest.raises(ValueError, match="max_model_len"):
        fill_decode_inputs(inputs, [_dchunk(0, 1, 40, list(range(11)))])


def test_runner_reuses_its_static_inputs() -> None:
    runner = new_runner()
    assert runner.decode_inputs(4) is runner.decode_inputs(4)
    assert runner.decode_inputs(4) is not runner.decode_inputs(2)


def test_prefill_chunk_not_covered_by_blocks_is_rejected() -> None:
    runner = new_runner()
    bad = SeqChunk(0, [1] * 6, 0, [3], True, True)
    with pytest.raises(ValueError, match="cover"):
        runner.execute(ScheduledBatch(0, [bad]))


# -- counters, timings, construction ------------------------------------------------


def test_counters_and_summary_on_cpu() -> None:
    rng = random.Random(11)
    runner, pool = new_runner(), Blocks(rng)
    a, b = make_seqs(rng, [5, 7], 20)
    run(runner, [prefill(pool, a, 99)])  # prefill: 5 tokens
    run(runner, [prefill(pool, b, 3)], [decode(pool, a)])  # mixed: 3 + 1
    run(runner, [prefill(pool, b, 99)], [decode(pool, a)])  # mixed: 4 + 1
    for _ in range(3):
        run(runner, [], [decode(pool, a), decode(pool, b)])  # decode: 2 each
    assert runner.execute(ScheduledBatch(0)) == []  # empty: not a step
    st = runner.stats
    assert (st.graph_replays, st.graphs_captured, st.padded_rows) == (0, 0, 0)
    assert (st.eager_decode_steps, st.prefill_or_mixed_steps) == (3, 3)
    assert runner.buckets == ()
    summary = runner.summary()
    kinds = summary["kinds"]
    assert isinstance(kinds, dict)
    assert set(kinds) == {"prefill", "mixed", "decode_eager"}
    assert (kinds["prefill"]["steps"], kinds["prefill"]["tokens"]) == (1, 5)
    assert (kinds["mixed"]["steps"], kinds["mixed"]["tokens"]) == (2, 9)
    assert (kinds["decode_eager"]["steps"], kinds["decode_eager"]["tokens"]) == (3, 6)
    for k in kinds.values():
        assert k["tokens_per_s"] > 0 and 0 < k["p50_ms"] <= k["p99_ms"]
    assert summary["eager_decode_steps"] == 3 and summary["graph_replays"] == 0


def test_percentile() -> None:
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([float(i) for i in range(101)], 99) == 99.0
    assert percentile([5.0], 99) == 5.0
    assert percentile([], 50) is None
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_construction_errors() -> None:
    with pytest.raises(ValueError, match="use_cuda_graphs"):
        TorchRunner(LAYOUT, use_cuda_graphs=True)
    with pytest.raises(ValueError, match=r"KVLayout\.block_size"):
        TorchRunner(KVLayout(0, 4, 16, 2))
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA"):
            TorchRunner(LAYOUT, device="cuda")


def test_num_threads_applies_during_a_pass_only(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="num_threads"):
        TorchRunner(LAYOUT, num_threads=0)
    with pytest.raises(ValueError, match="num_threads"):
        TorchRunner(LAYOUT, num_threads=True)
    runner = TorchRunner(LAYOUT, num_threads=3)
    seen: list[int] = []
    inner = runner.model.paged_greedy

    def spy(*args: object) -> torch.Tensor:
        seen.append(torch.get_num_threads())
        return inner(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(runner.model, "paged_greedy", spy)
    before = torch.get_num_threads()
    assert before != 3
    runner.execute(ScheduledBatch(0, [SeqChunk(0, [1, 2, 3], 0, [0], True, True)]))
    assert seen == [3]
    assert torch.get_num_threads() == before
    assert TorchRunner(LAYOUT).num_threads is None


def test_default_runner_is_float32_eager() -> None:
    runner = TorchRunner(LAYOUT)
    assert runner.model.dtype == torch.float32 and runner.cache.k.dtype == torch.float32
    assert runner.cache.k.shape == (2, LAYOUT.num_slots + 1, 2, 16)
    assert runner.config == ModelConfig()


def test_decode_step_needs_no_tensor_data() -> None:
    """CPU proxy for "nothing syncs the host inside the graph": the captured step runs on
    the meta device, where any ``.item()``, ``nonzero`` or data-dependent shape raises."""
    runner = TorchRunner(LAYOUT, device="meta")
    inputs = runner.decode_inputs(4)
    fill_decode_inputs(inputs, [SeqChunk(0, [3], 5, [1, 2], False, True)])
    out = runner._decode_step(inputs)
    assert out.device.type == "meta" and out.shape == (4,) and out.dtype == torch.long
