"""Checkpoints written by transformers, read by ``checkpoint.load_model``: same logits, tokens.

Shapes cover GQA with 2 and 1 KV heads, ``head_dim != hidden / heads``, tied and
untied embeddings, llama3 and linear RoPE scaling, theta 1e4 and 5e5, eps 1e-5
and 1e-6, and both config dialects (transformers 5.x ``rope_parameters`` and
4.x top-level ``rope_theta``/``rope_scaling``).

Tolerance: float64 logits within 1e-10 of transformers' (patched to float64 in
its two float32 steps, see ``tests/support/hf_llama.py``; observed ~1e-14: summation
order only). Greedy tokens must be identical to ``generate(do_sample=False)``,
through the real ``Engine`` with chunked prefill, preemption by recompute and
several requests at once, gate on and off. The last test shows the check can
fail: four plausible loader bugs each break it.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Any

import pytest
import torch

from densegate.impl.engine import Engine, EngineConfig
from densegate.impl.gate import Reason
from densegate.impl.runners.checkpoint import load_model
from densegate.impl.runners.model import DecoderModel, reference_generate
from densegate.impl.runners.rope import inv_freq
from tests.support.hf_llama import (
    LLAMA3,
    hf_float64,
    hf_greedy,
    hf_logits,
    make_checkpoint,
    to_4x_config,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

ATOL = 1e-10
SHAPES: dict[str, dict[str, Any]] = {
    "gqa2_untied_theta5e5_eps1e-6": {"kv_heads": 2, "theta": 5e5},
    "mqa1_tied_theta1e4_eps1e-5": {"kv_heads": 1, "tied": True, "eps": 1e-5},
    "head_dim16_gqa2_untied_eps1e-5": {"head_dim": 16, "eps": 1e-5, "seed": 1},
    "llama3_rope_mqa1_tied_theta5e5": {
        "head_dim": 16,
        "kv_heads": 1,
        "tied": True,
        "theta": 5e5,
        "rope": LLAMA3,
        "seed": 2,
    },
    "linear_rope_4x_config": {"rope": {"rope_type": "linear", "factor": 2.0}, "seed": 3},
}
LENGTHS = [3, 21, 9, 30, 6, 14]
MAX_TOKENS = [9, 6, 11, 7, 10, 8]
ENGINE: dict[str, Any] = {
    "dtype": "float64",
    "block_size": 4,
    "max_num_seqs": 3,
    "max_num_batched_tokens": 16,
    "long_prefill_token_threshold": 5,
    "num_blocks": 16,
    "max_hold_passes": 4,
}
"""Six prompts, three slots, 16-token passes, 5-token chunks, KV for ~60 tokens: requests
queue (the gate holds), long prompts are chunked, and decodes preempt one another."""


@dataclasses.dataclass
class Case:
    path: Path
    hf: Any
    prompts: list[list[int]]
    greedy: list[list[int]]


def _prompts(vocab: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(vocab) for _ in range(n)] for n in LENGTHS]


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Case]:
    out = {}
    for name, kw in SHAPES.items():
        path = make_checkpoint(tmp_path_factory.mktemp(name), **kw)
        hf = hf_float64(path)
        if name.endswith("4x_config"):
            to_4x_config(path)  # transformers already read the 5.x form: ours reads 4.x
        prompts = _prompts(96, len(out))
        greedy = [hf_greedy(hf, p, n) for p, n in zip(prompts, MAX_TOKENS, strict=True)]
        out[name] = Case(path, hf, prompts, greedy)
    return out


@pytest.mark.parametrize("name", list(SHAPES))
def test_logits_match_transformers(cases: dict[str, Case], name: str) -> None:
    case = cases[name]
    model = load_model(case.path, dtype=torch.float64)
    for p in case.prompts[1:4]:
        want = hf_logits(case.hf, p)
        torch.testing.assert_close(model.reference_logits(p), want, rtol=0, atol=ATOL)


def test_greedy_outputs_are_not_degenerate(cases: dict[str, Case]) -> None:
    """Token equality means something only if the tokens vary with the prompt."""
    for case in cases.values():
        assert len({tuple(g) for g in case.greedy}) >= 4
        assert len({t for g in case.greedy for t in g}) >= 8


@pytest.mark.parametrize("gate", [True, False], ids=["gate_on", "gate_off"])
@pytest.mark.parametrize("name", list(SHAPES))
def test_engine_tokens_equal_transformers_generate(
    cases: dict[str, Case], name: str, gate: bool
) -> None:
    case = cases[name]
    engine = Engine(EngineConfig(model=str(case.path), gate_enabled=gate, **ENGINE))
    assert engine.generate(case.prompts, MAX_TOKENS) == case.greedy
    # Evidence the schedule was as hard as claimed.
    counters = engine.scheduler.counters
    log = list(engine.scheduler.pass_log)
    assert counters.preemptions > 0
    assert any(r.prefill_tokens and r.decode_seqs for r in log)  # mixed passes
    assert max(r.decode_seqs for r in log) >= 2
    assert (counters.reasons[Reason.HOLD] > 0) is gate
    for rid in (m.request_id for m in engine.all_metrics()):
        assert engine.request(rid).finish_reason == "length"


def test_eos_stops_as_transformers_does(tmp_path: Path) -> None:
    """EOS = a token greedy decoding reaches mid-way: both stop there, EOS included."""
    kw: dict[str, Any] = {"kv_heads": 2, "seed": 4}
    plain = make_checkpoint(tmp_path / "plain", **kw)
    prompt = _prompts(96, 9)[1]
    free_run = hf_greedy(hf_float64(plain), prompt, 12)
    k = next(i for i in range(2, 12) if free_run[i] not in free_run[:i])
    eos = free_run[k]
    path = make_checkpoint(tmp_path / "eos", eos=eos, **kw)
    hf = hf_float64(path)
    want = hf_greedy(hf, prompt, 12, stop=True)
    assert want == free_run[: k + 1]
    engine = Engine(EngineConfig(model=str(path), **ENGINE))
    assert engine.eos_token_ids == {eos}
    assert engine.generate([prompt], 12) == [want]
    assert engine.request("0").finish_reason == "stop"
    assert engine.generate([prompt], 12, ignore_eos=True) == [free_run]
    assert engine.request("1").finish_reason == "length"
    # Every prompt at once, through chunking and preemption: each stops where transformers does.
    prompts = [*_prompts(96, 9), prompt]
    limits = [*MAX_TOKENS, 12]
    wants = [hf_greedy(hf, p, n, stop=True) for p, n in zip(prompts, limits, strict=True)]
    assert engine.generate(prompts, limits) == wants
    reasons = [engine.request(str(i)).finish_reason for i in range(2, 2 + len(prompts))]
    assert reasons == ["stop" if w[-1] == eos else "length" for w in wants]
    assert engine.scheduler.counters.preemptions > 0


def _swap_gate_up(model: DecoderModel) -> None:
    f = model.config.ffn_hidden

    def swap(w: torch.Tensor) -> torch.Tensor:
        return torch.cat((w[f:], w[:f]))

    model.layers = tuple(
        dataclasses.replace(la, w_gate_up=swap(la.w_gate_up)) for la in model.layers
    )


def _head_rows(model: DecoderModel, perm_q: torch.Tensor, perm_k: torch.Tensor) -> None:
    """Reorder wqkv's Q and K rows (``perm_*`` index rows of Q and of K)."""
    c = model.config
    q, kv = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
    rows = torch.cat((perm_q, q + perm_k, torch.arange(q + kv, q + 2 * kv)))
    model.layers = tuple(dataclasses.replace(la, wqkv=la.wqkv[rows]) for la in model.layers)


def _meta_interleaved(model: DecoderModel) -> None:
    """Q/K rows in Meta's interleaved-pair layout, i.e. the HF permute was skipped."""
    c = model.config
    half = c.head_dim // 2
    within = torch.stack((torch.arange(half), torch.arange(half) + half), dim=1).reshape(-1)

    def per_head(n: int) -> torch.Tensor:
        return torch.cat([h * c.head_dim + within for h in range(n)])

    _head_rows(model, per_head(c.n_heads), per_head(c.n_kv_heads))


def _wrong_gqa_pairing(model: DecoderModel) -> None:
    """Query head h reads KV head h % n_kv instead of h // group (Q rows and wo columns
    permuted alike, so only the pairing changes)."""
    c = model.config
    group = c.n_heads // c.n_kv_heads
    order = [0] * c.n_heads  # position -> original head
    for h in range(c.n_heads):
        order[(h % c.n_kv_heads) * group + h // c.n_kv_heads] = h
    heads = torch.tensor(order)
    cols = (heads[:, None] * c.head_dim + torch.arange(c.head_dim)).reshape(-1)
    _head_rows(model, cols, torch.arange(c.n_kv_heads * c.head_dim))
    model.layers = tuple(dataclasses.replace(la, wo=la.wo[:, cols]) for la in model.layers)


def _wrong_theta(model: DecoderModel) -> None:
    model.inv_freq = inv_freq(dataclasses.replace(model.config, rope_theta=1e4))


MUTANTS = {
    "swapped_gate_up": _swap_gate_up,
    "meta_interleaved_qk": _meta_interleaved,
    "wrong_gqa_pairing": _wrong_gqa_pairing,
    "wrong_theta": _wrong_theta,
}


@pytest.mark.parametrize("mutant", [None, *MUTANTS])
def test_the_differential_check_catches_loader_bugs(
    cases: dict[str, Case], mutant: str | None
) -> None:
    """Control (None) passes; each mutant moves logits far past ATOL and changes tokens."""
    case = cases["gqa2_untied_theta5e5_eps1e-6"]
    model = load_model(case.path, dtype=torch.float64)
    if mutant is not None:
        MUTANTS[mutant](model)
    p = case.prompts[3]
    gap = (model.reference_logits(p) - hf_logits(case.hf, p)).abs().max().item()
    ours = [reference_generate(model, q, n) for q, n in zip(case.prompts, MAX_TOKENS, strict=True)]
    if mutant is None:
        assert gap <= ATOL and ours == case.greedy
    else:
        assert gap > 1e-2 and ours != case.greedy
