"""The test-only plugin's collectives (``tests/support/vllm_cpu_dp.py``) on a real gloo group.

The end-to-end DP run compares arms with each other, which would not catch a wrong gather
(every arm would be wrong alike), so here two processes check ``all_gatherv`` and
``reduce_scatterv`` against what they must return, with uneven sizes, several tensors and a
dimension other than 0. Needs torch only, not vLLM: the functions take the communicator as
``self`` and read ``world_size``, ``rank_in_group`` and ``device_group`` from it.
"""

from __future__ import annotations

import os
import tempfile
import types
from typing import Any

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
mp = pytest.importorskip("torch.multiprocessing")

from tests.support.vllm_cpu_dp import _all_gatherv, _reduce_scatterv  # noqa: E402

SIZES = [3, 1]


def _rank_rows(rank: int, n: int) -> Any:
    return torch.arange(n * 4, dtype=torch.float32).reshape(n, 4) + 100 * rank


def _check(rank: int, store: str, errors: Any) -> None:
    try:
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
        comm = types.SimpleNamespace(world_size=2, rank_in_group=rank, device_group=None)
        mine = _rank_rows(rank, SIZES[rank])
        ids = torch.full((SIZES[rank], 2), rank, dtype=torch.int32)
        hidden, topk = _all_gatherv(comm, [mine, ids], 0, SIZES)
        want = torch.cat([_rank_rows(r, n) for r, n in enumerate(SIZES)])
        assert torch.equal(hidden, want)
        assert topk.dtype == torch.int32 and topk[:, 0].tolist() == [0, 0, 0, 1]
        # dim 1, one tensor in, one out
        cols = _all_gatherv(comm, mine.T.contiguous(), 1, SIZES)
        assert torch.equal(cols, want.T)
        # reduce_scatterv: every rank holds all rows; this rank gets the sum of its slice
        full = torch.arange(sum(SIZES) * 2, dtype=torch.float32).reshape(-1, 2) * (rank + 1)
        out = _reduce_scatterv(comm, full, 0, SIZES)
        base = torch.arange(sum(SIZES) * 2, dtype=torch.float32).reshape(-1, 2) * 3
        start = sum(SIZES[:rank])
        assert torch.equal(out, base[start : start + SIZES[rank]])
        assert torch.equal(full, base / 3 * (rank + 1))  # the input is left alone
        even = _reduce_scatterv(comm, full[:4], 0, None)  # no sizes: an even split
        assert torch.equal(even, base[:4][2 * rank : 2 * rank + 2])
        with pytest.raises(ValueError, match="sizes"):
            _all_gatherv(comm, mine, 0, [9, 9])
        dist.destroy_process_group()
    except BaseException as e:  # reported to the parent
        errors.put(f"rank {rank}: {type(e).__name__}: {e}")
        raise


def test_all_gatherv_and_reduce_scatterv_on_two_gloo_ranks() -> None:
    ctx = mp.get_context("spawn")
    errors = ctx.SimpleQueue()
    with tempfile.TemporaryDirectory() as d:
        store = os.path.join(d, "store")
        procs = [ctx.Process(target=_check, args=(r, store, errors)) for r in range(2)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout=120)
        alive = [p for p in procs if p.is_alive()]
        for p in alive:
            p.kill()
        found = []
        while not errors.empty():
            found.append(errors.get())
        assert not alive and found == [] and all(p.exitcode == 0 for p in procs), found
