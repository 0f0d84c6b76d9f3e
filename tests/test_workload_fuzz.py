"""Whole workloads through the Engine: every request ends once, nothing leaks or idles.

The ``nightly`` profile runs this at 10,000 workloads.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import event, given, settings
from hypothesis import strategies as st

from densegate.impl import Engine, EngineConfig, RequestStatus
from tests.support.profiles import examples


@st.composite
def workloads(draw: st.DrawFn) -> tuple[EngineConfig, list[tuple[int, list[int], int]], set[int]]:
    chunked = draw(st.booleans())
    seqs = draw(st.integers(1, 6))
    max_len = draw(st.integers(4, 48))
    budget = draw(st.integers(max(seqs, 1 if chunked else max_len), max(seqs, max_len) + 24))
    block = draw(st.sampled_from([1, 2, 4, 8]))
    per_seq = -(-max_len // block)
    cfg = EngineConfig(
        max_num_seqs=seqs,
        max_num_batched_tokens=budget,
        block_size=block,
        num_blocks=draw(st.integers(max(1, per_seq // 2), 2 * per_seq)),
        max_model_len=max_len,
        enable_chunked_prefill=chunked,
        long_prefill_token_threshold=draw(st.none() | st.integers(1, budget)) if chunked else None,
        dense_tokens=draw(st.integers(1, budget)),
        max_hold_passes=draw(st.integers(1, 6)),
        gate_enabled=draw(st.sampled_from([True, True, True, False])),
        pass_log_size=8,
    )
    n = draw(st.integers(1, 16))
    reqs = []
    for _ in range(n):
        # Mostly admissible; some not, on purpose: they must end REJECTED, not vanish.
        bad = draw(st.integers(0, 9)) == 0
        plen = draw(st.integers(0, max_len + 2) if bad else st.integers(1, max_len // 2))
        most = draw(st.integers(-1, max_len) if bad else st.integers(1, max_len // 2))
        reqs.append((draw(st.integers(0, 8)), [7] * plen, most))
    aborts = set(draw(st.lists(st.integers(0, n - 1), max_size=3)))
    return cfg, reqs, aborts


@settings(max_examples=examples(ci=300, nightly=10_000))
@given(workloads())
def test_every_request_ends_exactly_once(
    w: tuple[EngineConfig, list[tuple[int, list[int], int]], set[int]],
) -> None:
    cfg, reqs, aborts = w
    eng = Engine(cfg)
    ended: Counter[str] = Counter()
    ids: list[str] = []
    pending = sorted(range(len(reqs)), key=lambda i: reqs[i][0])
    k = 0
    for _ in range(10_000):
        while k < len(pending) and (
            reqs[pending[k]][0] <= eng.scheduler.pass_index or not eng.scheduler.has_work()
        ):
            i = pending[k]
            rid = eng.add_request(reqs[i][1], reqs[i][2], request_id=f"r{i}")
            ids.append(rid)
            if i in aborts and eng.request(rid).status is RequestStatus.WAITING:
                eng.abort(rid)
            k += 1
        had_work = eng.scheduler.has_work()
        before = eng.scheduler.pass_index
        for out in eng.step():
            if out.finished:
                ended[out.request_id] += 1
                assert out.output_token_ids is not None
        eng.scheduler.check_invariants()
        if had_work:
            rec = eng.scheduler.pass_log[-1]
            assert rec.index == before
            assert rec.prefill_tokens + rec.decode_seqs > 0, f"idle pass {rec}"
        if k == len(pending) and not eng.has_unfinished():
            break
    else:
        raise AssertionError("workload did not drain in 10,000 passes")
    assert sorted(ended) == sorted(ids) and set(ended.values()) == {1}
    for rid in ids:
        r = eng.request(rid)
        if r.status is RequestStatus.FINISHED:
            assert len(r.output_token_ids) == r.max_tokens
        elif r.status is RequestStatus.REJECTED:
            assert r.finish_reason and eng.rejection(r.prompt_token_ids, r.max_tokens)
        else:
            assert r.status is RequestStatus.ABORTED
    assert eng.scheduler.blocks.num_free == cfg.num_blocks
    statuses = Counter(eng.request(rid).status.name for rid in ids)
    event(f"some finished: {statuses['FINISHED'] > 0}")
    event(f"preempted: {eng.scheduler.counters.preemptions > 0}")
    event(f"held: {any(r.name == 'HOLD' for r in eng.scheduler.counters.reasons)}")
