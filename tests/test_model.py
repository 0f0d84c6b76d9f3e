"""The seeded decoder: config checks, non-degenerate greedy output, paged logits = reference.

Float64 on the CPU throughout, so a different summation order in the paged path
(batching, chunking, gathering) moves logits by ~1e-15 and can never flip an argmax.
"""

from __future__ import annotations

import dataclasses
import random

import pytest
import torch

from densegate.impl.runners.forward_inputs import build_forward_inputs
from densegate.impl.runners.model import DecoderModel, reference_generate
from densegate.impl.runners.model_config import ModelConfig
from densegate.impl.sched.batch import KVLayout, SeqChunk

pytestmark = pytest.mark.usefixtures("one_torch_thread")

F64 = torch.float64
LAYOUT = KVLayout(block_size=4, num_blocks=32, max_model_len=64, max_num_seqs=8)


@pytest.fixture(scope="module")
def model() -> DecoderModel:
    return DecoderModel(ModelConfig(), dtype=F64)


def test_default_config_derives_head_dim() -> None:
    c = ModelConfig()
    assert (c.vocab_size, c.hidden, c.n_layers, c.n_heads, c.n_kv_heads) == (512, 64, 2, 4, 2)
    assert c.head_dim == 16
    assert ModelConfig(hidden=64, n_heads=2, head_dim=8).head_dim == 8


@pytest.mark.parametrize(
    ("field", "kwargs"),
    [
        ("vocab_size", {"vocab_size": 1}),
        ("hidden", {"hidden": 0}),
        ("hidden", {"hidden": True}),
        ("n_layers", {"n_layers": 0}),
        ("n_heads", {"n_heads": 0}),
        ("n_kv_heads", {"n_kv_heads": 3}),
        ("n_kv_heads", {"n_kv_heads": 0}),
        ("hidden", {"hidden": 66}),
        ("head_dim", {"head_dim": 7}),
        ("head_dim", {"head_dim": -2}),
        ("ffn_hidden", {"ffn_hidden": 0}),
        ("rope_theta", {"rope_theta": 0.0}),
        ("rope_theta", {"rope_theta": float("inf")}),
        ("rms_eps", {"rms_eps": -1e-6}),
        ("seed", {"seed": -1}),
        ("seed", {"seed": 1.5}),
    ],
)
def test_bad_config_names_the_field(field: str, kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=rf"ModelConfig\.{field}\b"):
        ModelConfig(**kwargs)  # type: ignore[arg-type]


def test_model_rejects_integer_dtype() -> None:
    with pytest.raises(ValueError, match="floating"):
        DecoderModel(ModelConfig(), dtype=torch.int64)


def test_reference_generate_needs_a_prompt(model: DecoderModel) -> None:
    with pytest.raises(ValueError, match="prompt"):
        reference_generate(model, [], 3)


def test_weights_are_seeded() -> None:
    a = DecoderModel(ModelConfig(seed=3), dtype=F64)
    b = DecoderModel(ModelConfig(seed=3), dtype=F64)
    c = DecoderModel(ModelConfig(seed=4), dtype=F64)
    prompt = [1, 2, 3, 4, 5]
    assert torch.equal(a.reference_logits(prompt), b.reference_logits(prompt))
    assert reference_generate(a, prompt, 8) != reference_generate(c, prompt, 8)


def test_different_prompts_give_different_continuations(model: DecoderModel) -> None:
    rng = random.Random(1)
    outs = [
        tuple(reference_generate(model, [rng.randrange(512) for _ in range(6)], 8))
        for _ in range(6)
    ]
    assert len(set(outs)) == len(outs)
    # Not stuck on one token either.
    assert all(len(set(o)) >= 3 for o in outs)


def test_next_token_depends_on_history_not_just_last_token(model: DecoderModel) -> None:
    """The paged tests compare tokens only; that is meaningful only if attention steers them."""
    rng = random.Random(2)
    nexts = {
        reference_generate(model, [rng.randrange(512) for _ in range(7)] + [42], 1)[0]
        for _ in range(8)
    }
    assert len(nexts) >= 4


def _chunk(seq_id: int, toks: list[int], start: int, n: int, table: list[int]) -> SeqChunk:
    return SeqChunk(seq_id, toks[start : start + n], start, table, True, start + n == len(toks))


def test_paged_logits_equal_reference_logits_across_chunks(model: DecoderModel) -> None:
    """Every row's logits, not just the argmax: two prefill chunks over scattered blocks."""
    toks = [7, 300, 12, 99, 5, 400, 61, 2, 250, 8, 17]
    table = [9, 2, 30, 15]
    cache = model.new_cache(LAYOUT)
    got = []
    for start, n in ((0, 6), (6, 5)):
        inp = build_forward_inputs([_chunk(0, toks, start, n, table)], [], LAYOUT, "cpu")
        got.append(model.paged_logits(cache, dataclasses.replace(inp, sample_rows=None)))
    want = model.reference_logits(toks)
    torch.testing.assert_close(torch.cat(got), want, rtol=0, atol=1e-10)


def test_corrupting_a_cached_slot_changes_the_decode(model: DecoderModel) -> None:
    """Honesty check: the decode really reads the cache (else paging bugs would pass)."""
    toks = [11, 22, 33, 44, 55, 66, 77]
    table = [4, 5]
    cache = model.new_cache(LAYOUT)
    model.paged_logits(
        cache, build_forward_inputs([_chunk(0, toks, 0, 6, table)], [], LAYOUT, "cpu")
    )
    dec = SeqChunk(0, [toks[6]], 6, table, False, True)
    clean = model.paged_logits(cache, build_forward_inputs([], [dec], LAYOUT, "cpu"))
    cache.k[:, 4 * 4 + 1] += 3.0  # position 1 lives in block 4, offset 1
    dirty = model.paged_logits(cache, build_forward_inputs([], [dec], LAYOUT, "cpu"))
    assert not torch.allclose(clean, dirty)


def test_context_slots_map_pad_blocks_onto_the_pad_slot(model: DecoderModel) -> None:
    cache = model.new_cache(LAYOUT)
    pad = LAYOUT.num_blocks
    tables = torch.tensor([[3, 0] + [pad] * 14, [pad] * 16])
    slots = cache.context_slots(tables)
    assert slots.shape == (2, LAYOUT.max_model_len)
    assert slots[0, :8].tolist() == [12, 13, 14, 15, 0, 1, 2, 3]
    assert set(slots[0, 8:].tolist()) == set(slots[1].tolist()) == {cache.pad_slot}
    assert cache.pad_slot == LAYOUT.num_slots == cache.k.shape[1] - 1


def test_context_slots_of_a_narrower_table_cover_only_its_blocks(model: DecoderModel) -> None:
    """The eager decode context: as many positions as the table has blocks, no more."""
    cache = model.new_cache(LAYOUT)
    pad = LAYOUT.num_blocks
    slots = cache.context_slots(torch.tensor([[3, 0], [7, pad]]))
    assert slots.tolist() == [[12, 13, 14, 15, 0, 1, 2, 3], [28, 29, 30, 31] + [cache.pad_slot] * 4]
    with pytest.raises(ValueError, match="max_blocks_per_seq"):
        cache.context_slots(torch.zeros(1, LAYOUT.max_blocks_per_seq + 1, dtype=torch.long))


def test_only_continuation_chunks_gather_their_context() -> None:
    """A chunk from position 0 attends to its own K/V; a later chunk gathers 0..end-1."""
    toks = list(range(10, 21))
    first = build_forward_inputs([_chunk(0, toks, 0, 6, [9, 2, 30])], [], LAYOUT, "cpu")
    later = build_forward_inputs([_chunk(0, toks, 6, 5, [9, 2, 30])], [], LAYOUT, "cpu")
    (a,), (b,) = first.prefills, later.prefills
    assert a.ctx_slots is None and a.allowed is None
    assert b.ctx_slots is not None and b.allowed is not None
    assert b.ctx_slots.tolist() == [36, 37, 38, 39, 8, 9, 10, 11, 120, 121, 122]
    assert b.allowed.shape == (5, 11) and b.allowed[0].tolist() == [True] * 7 + [False] * 4
    assert later.slot_mapping.tolist() == [10, 11, 120, 121, 122]
