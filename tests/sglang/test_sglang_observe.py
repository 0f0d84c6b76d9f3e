"""The pass observation against SGLang's own admission: ``observe`` counts what the real
``PrefillAdder`` then admits, on real ``Req`` objects, a real KV allocator and a real
scheduler's ``get_num_allocatable_reqs``.

Each case builds the same state twice (requests are mutated by admission): once
for ``observe`` on a ``Scheduler.__new__`` scheduler, once for SGLang's
``PrefillAdder`` walking the waiting queue the way ``_get_new_batch_prefill_raw``
does (``init_next_round_input``, ``add_one_req`` until it stops), with no
delayer. No prefix cache (its hits are what ``observe`` over-counts, by design).
"""

from __future__ import annotations

import os
from array import array
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.sglang.conftest import HAS_SGLANG, SKIP_REASON
from tests.support.sglang_ranks import model_dir

pytestmark = pytest.mark.skipif(not HAS_SGLANG, reason=SKIP_REASON)

MAX_NEW = 16


@dataclass(frozen=True)
class Case:
    prompts: tuple[int, ...]
    kv_tokens: int = 20_000
    chunk: int | None = 1024
    budget: int = 4096
    running: int = 0
    """Running requests, each with ``max_new_tokens=500`` and nothing decoded yet."""


CASES = {
    "chunk-cuts-the-second": Case((300, 1200, 700, 2000)),
    "no-chunking-input-cap": Case((300, 1200, 700, 2000), chunk=None),
    "kv-stops-admission": Case((300, 600, 200), kv_tokens=1000, chunk=None),
    "running-reserve": Case((300, 400, 300), kv_tokens=2000, chunk=None, running=3),
    "kv-refuses-a-chunkable-request": Case((300, 900, 300), kv_tokens=1000, chunk=512),
    "empty-queue": Case(()),
}


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> None:
    os.environ["HF_HUB_OFFLINE"] = "1"
    from sglang.srt.runtime_context import get_parallel

    from tests.support.sglang_plugin_probe import publish_one_rank

    publish_one_rank(str(model_dir(Path(tmp_path_factory.mktemp("model")))))
    get_parallel().override_permanently(pp_max_micro_batch_size=64)


def _req(i: int, n: int, new: int) -> Any:
    from sglang.srt.managers.schedule_batch import Req
    from sglang.srt.sampling.sampling_params import SamplingParams

    params = SamplingParams(max_new_tokens=new)
    params.normalize(None)
    return Req(f"r{i}", "", array("q", [1 + j % 200 for j in range(n)]), params)


def _state(case: Case) -> tuple[Any, Any, list[Any], Any]:
    import torch
    from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator
    from sglang.srt.mem_cache.radix_cache import RadixCache

    alloc = TokenToKVPoolAllocator(
        size=case.kv_tokens, dtype=torch.int64, device="cpu", kvcache=None, need_sort=False
    )
    tree = RadixCache.create_simulated(disable=True)
    running = [_req(100 + i, 50, 500) for i in range(case.running)]
    batch = SimpleNamespace(
        reqs=running, batch_is_full=False, batch_size=lambda: len(running), is_empty=lambda: False
    )
    waiting = [_req(i, n, MAX_NEW) for i, n in enumerate(case.prompts)]
    return alloc, tree, waiting, batch


def _observed(case: Case, limit: int = 10**9) -> Any:
    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.managers.scheduler_components.new_token_ratio_tracker import (
        NewTokenRatioTracker,
    )

    from densegate.integrations.sglang.observe import observe

    alloc, tree, waiting, batch = _state(case)
    s = Scheduler.__new__(Scheduler)
    s.waiting_queue, s.chunked_req, s.is_mixed_chunk = waiting, None, False
    s.max_prefill_tokens, s.chunked_prefill_size = case.budget, case.chunk
    s.max_running_requests, s.page_size = 64, 1
    s.token_to_kv_pool_allocator, s.tree_cache = alloc, tree
    s.new_token_ratio_tracker = NewTokenRatioTracker.from_config()
    s.req_to_token_pool = SimpleNamespace(available_size=lambda: 64)
    s.beam_coordinator = SimpleNamespace(pending_member_rows=lambda _batch: 0)
    return observe(s, batch, limit), s.new_token_ratio_tracker.current


def _admitted(case: Case, ratio: float) -> int:
    from sglang.srt.managers.schedule_policy import AddReqResult, PrefillAdder

    alloc, tree, waiting, batch = _state(case)
    adder = PrefillAdder(
        1, tree, alloc, batch, ratio, case.budget, case.chunk, 0, 0, max_running_requests=64
    )
    for req in waiting:
        req.init_next_round_input(tree)
        if adder.add_one_req(req, has_chunked_req=False, truncation_align_size=None) != (
            AddReqResult.CONTINUE
        ):
            break
    return sum(r.extend_end - r.prefix_len for r in adder.can_run_list)


@pytest.mark.parametrize("name", list(CASES))
def test_observe_counts_what_sglangs_adder_admits(published: None, name: str) -> None:
    case = CASES[name]
    obs, ratio = _observed(case)
    assert obs.prefill_tokens == _admitted(case, ratio)
    assert obs.decode_seqs == case.running
    assert obs.partial_prefill is False


def test_the_cases_differ(published: None) -> None:
    """The cases reach different stopping rules: their admitted totals are not all alike."""
    totals = {name: _admitted(c, 0.7) for name, c in CASES.items() if c.prompts}
    assert len(set(totals.values())) == len(totals), totals


def test_the_walk_stops_at_the_limit(published: None) -> None:
    case = CASES["no-chunking-input-cap"]
    obs, _ = _observed(case, limit=1)
    assert obs.prefill_tokens == case.prompts[0]  # one admission reached the limit


def test_a_chunk_continuation_is_counted_and_flagged(published: None) -> None:
    from sglang.srt.managers.scheduler import Scheduler

    from densegate.integrations.sglang.observe import observe

    case = Case((300,))
    alloc, tree, waiting, batch = _state(case)
    chunked = _req(9, 3000, MAX_NEW)
    chunked.prefix_len = 1024  # its first chunk ran
    s = Scheduler.__new__(Scheduler)
    s.waiting_queue, s.chunked_req, s.is_mixed_chunk = waiting, chunked, False
    s.max_prefill_tokens, s.chunked_prefill_size = 4096, 1024
    s.max_running_requests, s.page_size = 64, 1
    s.token_to_kv_pool_allocator, s.tree_cache = alloc, tree
    s.new_token_ratio_tracker = SimpleNamespace(current=0.7)
    s.req_to_token_pool = SimpleNamespace(available_size=lambda: 64)
    s.beam_coordinator = SimpleNamespace(pending_member_rows=lambda _batch: 0)
    obs = observe(s, batch, 10**9)
    # The owed 1976 tokens are cut to the 1024-token chunk, which leaves no chunk for admissions.
    assert (obs.prefill_tokens, obs.partial_prefill) == (1024, True)
