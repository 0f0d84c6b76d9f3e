"""TorchRunner's host side: decode buckets, static decode inputs, counters and construction.

Everything the CUDA-graph path uses on the host (bucket choice, static padded
inputs, the decode step's freedom from host syncs) is exercised here on the CPU.
"""

from __future__ import annotations

import random

import pytest
import torch

from densegate.impl.figures import percentile
from densegate.impl.runners.cuda_graphs import (
    DecodeInputs,
    choose_bucket,
    decode_buckets,
    fill_decode_inputs,
)
from densegate.impl.runners.model_config import ModelConfig
from densegate.impl.runners.torch_runner import (
    TorchRunner,
)
from densegate.impl.sched.batch import KVLayout, ScheduledBatch, SeqChunk
from tests.support.runner_harness import (
    LAYOUT,
    Blocks,
    decode,
    make_seqs,
    new_runner,
    prefill,
    run,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


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
