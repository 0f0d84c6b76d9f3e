"""``Engine.generate`` with the torch runner: scheduling never changes greedy tokens.

The runner's first promise, through the real ``Engine`` and ``Scheduler``: the
same prompts give the same tokens with the gate on and off, with chunked and
unchunked prefill, with and without preemption by recompute, batched and one
request at a time, and all of them equal ``reference_generate`` (a plain
full-recompute forward of the same seeded model).

Why float64: those schedules change how rows are batched, chunked, grouped and
padded, so the same logit is summed in a different order. In float64 that moves
logits by ~1e-15, far below the gap between the top two logits of this model,
so exact token equality is a sound test; in float32 (~1e-7) a near-tie could flip
an argmax with no bug present.

Every scenario also asserts the evidence that it really did what it is named
for (holds, continuation chunks, mixed passes, preemptions, batch sizes), so a
configuration drift that made two scenarios identical would fail, not pass.
"""

from __future__ import annotations

import collections
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch

import densegate.impl.runners.forward_inputs as forward_inputs
import densegate.impl.runners.torch_runner as torch_runner
from densegate.impl.engine import Engine, EngineConfig
from densegate.impl.gate import Reason
from densegate.impl.runners.cuda_graphs import choose_bucket
from densegate.impl.runners.forward_inputs import decode_groups
from densegate.impl.runners.model import DecoderModel, reference_generate
from densegate.impl.runners.model_config import ModelConfig
from densegate.impl.runners.torch_runner import TorchRunner
from densegate.impl.sched.batch import ScheduledBatch
from densegate.impl.sched.plan import PassRecord

pytestmark = pytest.mark.usefixtures("one_torch_thread")

BASE: dict[str, Any] = {
    "runner": "torch",
    "dtype": "float64",
    "block_size": 4,
    "max_model_len": 64,
    "max_num_seqs": 4,
    "max_num_batched_tokens": 64,
    "num_blocks": 64,
    "max_hold_passes": 4,
}
"""Eight prompts, four sequence slots: requests queue, so the gate has something to hold."""

SCENARIOS: dict[str, dict[str, Any]] = {
    "gate_on": {},
    "gate_off": {"gate_enabled": False},
    "chunked": {"max_num_batched_tokens": 16, "long_prefill_token_threshold": 5},
    "unchunked": {"enable_chunked_prefill": False},
    "preempted": {"num_blocks": 14},
    "preempted_chunked": {
        "num_blocks": 12,
        "max_num_batched_tokens": 16,
        "long_prefill_token_threshold": 5,
    },
}

LENGTHS = [3, 21, 9, 30, 6, 14, 1, 26]
MAX_TOKENS = [9, 6, 11, 7, 10, 8, 12, 5]
SEEDS = (0, 1)


def make_prompts(seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(ModelConfig().vocab_size) for _ in range(n)] for n in LENGTHS]


@dataclass
class Run:
    """One ``generate`` and what it did: outputs, the pass log, and every batch run."""

    engine: Engine
    outputs: list[list[int]]
    batches: list[ScheduledBatch] = field(default_factory=list)

    @property
    def log(self) -> list[PassRecord]:
        return list(self.engine.scheduler.pass_log)

    @property
    def runner(self) -> TorchRunner:
        assert isinstance(self.engine.runner, TorchRunner)
        return self.engine.runner

    def continuation_chunks(self) -> int:
        """Prefill chunks that resume a partly prefilled sequence: chunking happened."""
        return sum(c.start > 0 for b in self.batches for c in b.prefills)

    def mixed_passes(self) -> int:
        return sum(r.prefill_tokens > 0 and r.decode_seqs > 0 for r in self.log)


def spy_on(engine: Engine, batches: list[ScheduledBatch]) -> None:
    """Record every batch the engine hands its runner (the runner still runs it)."""
    inner: Callable[[ScheduledBatch], Sequence[int]] = engine.runner.execute

    def execute(batch: ScheduledBatch) -> Sequence[int]:
        batches.append(batch)
        return inner(batch)

    engine.runner.execute = execute  # type: ignore[method-assign]


def run(seed: int, **overrides: Any) -> Run:
    engine = Engine(EngineConfig(**{**BASE, **overrides}))
    batches: list[ScheduledBatch] = []
    spy_on(engine, batches)
    out = engine.generate(make_prompts(seed), MAX_TOKENS)
    result = Run(engine, out, batches)
    assert len(result.log) == engine.scheduler.counters.passes  # the ring kept every pass
    return result


@pytest.fixture(scope="module")
def reference() -> dict[int, list[list[int]]]:
    model = DecoderModel(ModelConfig(), dtype=torch.float64)
    return {
        seed: [
            reference_generate(model, p, m)
            for p, m in zip(make_prompts(seed), MAX_TOKENS, strict=True)
        ]
        for seed in SEEDS
    }


@pytest.fixture(scope="module")
def runs() -> dict[tuple[str, int], Run]:
    return {(name, seed): run(seed, **kw) for name, kw in SCENARIOS.items() for seed in SEEDS}


# -- every schedule equals the full-recompute reference -----------------------------


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_engine_tokens_equal_reference(
    runs: dict[tuple[str, int], Run], reference: dict[int, list[list[int]]], name: str, seed: int
) -> None:
    assert runs[name, seed].outputs == reference[seed]


def test_reference_outputs_are_not_degenerate(reference: dict[int, list[list[int]]]) -> None:
    """Equality only means something if different prompts give different continuations."""
    for outs in reference.values():
        assert len({tuple(o) for o in outs}) == len(outs)
        assert [len(o) for o in outs] == MAX_TOKENS
    assert reference[0] != reference[1]


# -- pairwise: each pair differs in exactly the named respect, shown by evidence ----


@pytest.mark.parametrize("seed", SEEDS)
def test_gate_on_equals_gate_off(runs: dict[tuple[str, int], Run], seed: int) -> None:
    on, off = runs["gate_on", seed], runs["gate_off", seed]
    assert on.outputs == off.outputs
    assert on.engine.scheduler.counters.reasons[Reason.HOLD] > 0
    assert off.engine.scheduler.counters.reasons[Reason.HOLD] == 0
    assert off.engine.scheduler.counters.reasons[Reason.DISABLED] > 0
    # Holding really changed the schedule, not just the reasons.
    assert [r.prefill_tokens for r in on.log] != [r.prefill_tokens for r in off.log]


@pytest.mark.parametrize("seed", SEEDS)
def test_chunked_equals_unchunked(runs: dict[tuple[str, int], Run], seed: int) -> None:
    chunked, whole = runs["chunked", seed], runs["unchunked", seed]
    assert chunked.outputs == whole.outputs
    assert chunked.continuation_chunks() > 0
    assert chunked.mixed_passes() > 0
    assert chunked.runner.stats.kind_summary(torch_runner.StepKind.MIXED).steps > 0
    assert whole.continuation_chunks() == 0
    assert whole.engine.scheduler.counters.preemptions == 0


@pytest.mark.parametrize("seed", SEEDS)
def test_preempted_equals_not_preempted(runs: dict[tuple[str, int], Run], seed: int) -> None:
    for name, plain in (("preempted", "gate_on"), ("preempted_chunked", "chunked")):
        pre, ref = runs[name, seed], runs[plain, seed]
        assert pre.outputs == ref.outputs
        assert pre.engine.scheduler.counters.preemptions > 0
        assert ref.engine.scheduler.counters.preemptions == 0
        assert sum(m.preemptions for m in pre.engine.all_metrics()) > 0
    assert runs["preempted_chunked", seed].continuation_chunks() > 0


@pytest.mark.parametrize("seed", SEEDS)
def test_batched_equals_one_at_a_time(
    runs: dict[tuple[str, int], Run], reference: dict[int, list[list[int]]], seed: int
) -> None:
    """One engine, one request per ``generate``: its cache is reused with stale KV."""
    engine = Engine(EngineConfig(**BASE))
    singles = [
        engine.generate([p], [m])[0] for p, m in zip(make_prompts(seed), MAX_TOKENS, strict=True)
    ]
    batched = runs["gate_on", seed]
    assert singles == batched.outputs == reference[seed]
    assert max(r.decode_seqs for r in engine.scheduler.pass_log) == 1
    assert max(r.decode_seqs for r in batched.log) > 1


def test_several_decode_groups_equal_reference(
    monkeypatch: pytest.MonkeyPatch, reference: dict[int, list[list[int]]]
) -> None:
    """Eager decode rows grouped by length (one group per distinct block count here)."""
    monkeypatch.setattr(forward_inputs, "GROUP_SPLIT_POSITIONS", 1)
    r = run(0, **SCENARIOS["chunked"])
    assert r.outputs == reference[0]
    bs = BASE["block_size"]
    n_groups = [len(decode_groups([c.start // bs + 1 for c in b.decodes], bs)) for b in r.batches]
    assert max(n_groups) > 1
    # Groups reorder rows; the mixed passes also interleave prefill rows before them.
    assert any(g > 1 and b.prefills for g, b in zip(n_groups, r.batches, strict=True))


# -- runner counters against the scheduler's pass log --------------------------------


def _kind_tokens(log: list[PassRecord]) -> dict[str, int]:
    """Real tokens per step kind, from the scheduler's own record of each pass."""
    out: collections.Counter[str] = collections.Counter()
    for r in log:
        if r.prefill_tokens and r.decode_seqs:
            out["mixed"] += r.prefill_tokens + r.decode_seqs
        elif r.prefill_tokens:
            out["prefill"] += r.prefill_tokens
        elif r.decode_seqs:
            out["decode"] += r.decode_seqs
    return dict(out)


@pytest.mark.parametrize("name", ["chunked", "preempted_chunked"])
def test_cpu_counters_and_summary_match_pass_log(
    runs: dict[tuple[str, int], Run], name: str
) -> None:
    r = runs[name, 0]
    st = r.runner.stats
    decode_only = [p for p in r.log if p.decode_seqs and not p.prefill_tokens]
    with_prefill = [p for p in r.log if p.prefill_tokens]
    assert (st.graph_replays, st.graphs_captured, st.padded_rows) == (0, 0, 0)
    assert r.runner.buckets == ()
    assert st.eager_decode_steps == len(decode_only) > 0
    assert st.prefill_or_mixed_steps == len(with_prefill) > 0
    kinds = r.runner.summary()["kinds"]
    assert isinstance(kinds, dict)
    want = _kind_tokens(r.log)
    assert set(kinds) == {"prefill", "mixed", "decode_eager"}
    assert kinds["prefill"]["tokens"] == want["prefill"]
    assert kinds["mixed"]["tokens"] == want["mixed"]
    assert kinds["decode_eager"]["tokens"] == want["decode"]
    assert kinds["decode_eager"]["steps"] == len(decode_only)
    assert sum(k["steps"] for k in kinds.values()) == len(r.batches)


class EagerGraphs:
    """CPU stand-in for ``DecodeGraphs``: "replaying" runs the static graph body eagerly.

    Lets the engine drive the runner's graph branch (bucket choice, padded rows,
    counters, the decode_graph kind) where no GPU exists.
    """

    def __init__(self, runner: TorchRunner, buckets: Sequence[int]) -> None:
        self.runner = runner
        self.buckets = frozenset(buckets)
        self.replays: collections.Counter[int] = collections.Counter()

    def __contains__(self, bucket: object) -> bool:
        return bucket in self.buckets

    def replay(self, bucket: int) -> torch.Tensor:
        self.replays[bucket] += 1
        out: torch.Tensor = self.runner._decode_step(self.runner.decode_inputs(bucket))
        return out


def test_graph_branch_counts_real_tokens_and_covers_bucketed_passes(
    reference: dict[int, list[list[int]]],
) -> None:
    """What ``benchmarks/gpu_check.py`` checks on CUDA, with the graph body run eagerly:
    replays == decode-only passes within the largest bucket, padding counted apart."""
    engine = Engine(EngineConfig(**{**BASE, **SCENARIOS["chunked"]}))
    runner = engine.runner
    assert isinstance(runner, TorchRunner)
    buckets = (2, 3)  # max_num_seqs is 4: 1 row pads to 2, 4 rows fall back to eager
    fake = EagerGraphs(runner, buckets)
    runner._graphs = fake  # type: ignore[assignment]
    runner.buckets = buckets
    assert engine.generate(make_prompts(0), MAX_TOKENS) == reference[0]
    log = list(engine.scheduler.pass_log)
    decode_only = [p.decode_seqs for p in log if p.decode_seqs and not p.prefill_tokens]
    within = [n for n in decode_only if n <= max(buckets)]
    st = runner.stats
    assert within and len(within) < len(decode_only)  # both branches really ran
    assert st.graph_replays == sum(fake.replays.values()) == len(within)
    assert st.eager_decode_steps == len(decode_only) - len(within)
    padded = sum((choose_bucket(n, buckets) or 0) - n for n in within)
    assert st.padded_rows == padded > 0
    kinds = runner.summary()["kinds"]
    assert isinstance(kinds, dict)
    assert kinds["decode_graph"]["tokens"] == sum(within)  # real rows, never the bucket
    assert kinds["decode_graph"]["steps"] == len(within)
    assert kinds["decode_eager"]["tokens"] == sum(decode_only) - sum(within)
