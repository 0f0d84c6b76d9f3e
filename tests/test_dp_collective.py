"""How long the torch collective waits, and for what: its deadlines over a store.

A work handle that never completes stands in for an all-reduce a hung peer never
joins, and ``DictStore`` for TCPStore, so each deadline is told apart by the
error it raises (never by how long it took: benchmarks/dp_faults.py --hangs
measures that on real ranks).
"""

from __future__ import annotations

import threading

import pytest

from densegate.impl.dp.collective import (
    READY_KEY,
    CollectiveError,
    PhasedCollective,
    TorchCollective,
)
from densegate.impl.dp.membership import BROKEN_KEY, LEFT_KEY, STREAM_KEY, DictStore


class _Never:
    """A work handle whose all-reduce never completes."""

    def is_completed(self) -> bool:
        return False

    def wait(self) -> None:
        raise AssertionError("wait() on work that never completed")


def collective(timeout_s: float, startup_timeout_s: float, world: int = 2) -> TorchCollective:
    return TorchCollective(0, world, DictStore(), timeout_s, startup_timeout_s)


def test_a_phase_s_first_call_waits_the_timeout_once_every_rank_has_built_its_engine() -> None:
    """Phase 1, every rank ready: a hung peer is noticed at --dp-timeout, not at the
    startup timeout (a 30 s startup timeout would make this test time out instead)."""
    c = collective(0.2, 30.0)
    c.begin_phase(1)
    c.store.set(READY_KEY.format(1, 1), b"1")
    with pytest.raises(CollectiveError, match=r"within 0\.2s after every rank had built phase 1"):
        c._wait(_Never(), first=True)


def test_a_rank_that_never_builds_its_engine_is_named_at_the_startup_timeout() -> None:
    c = collective(30.0, 0.2, world=3)
    c.begin_phase(2)
    c.store.set(READY_KEY.format(2, 2), b"1")
    with pytest.raises(CollectiveError, match=r"rank\(s\) \[1\] did not build phase 2's engine"):
        c._wait(_Never(), first=True)


def test_the_timeout_counts_from_the_last_rank_ready() -> None:
    """A rank slower to build than the timeout is waited for (it is building, not hung);
    once it is ready, the timeout applies."""
    c = collective(0.3, 30.0)
    c.begin_phase(0)
    late = threading.Timer(0.6, c.store.set, (READY_KEY.format(0, 1), b"1"))
    late.start()
    try:
        with pytest.raises(CollectiveError, match=r"after every rank had built phase 0"):
            c._wait(_Never(), first=True)
    finally:
        late.cancel()
    assert c.store.check([READY_KEY.format(0, 1)])  # it raised only after the mark


def test_later_calls_wait_the_timeout_and_a_broken_flag_ends_any_wait() -> None:
    c = collective(0.2, 30.0)
    c.begin_phase(0)
    with pytest.raises(CollectiveError, match=r"^all_reduce did not complete within 0\.2s$"):
        c._wait(_Never(), first=False)
    c = collective(30.0, 30.0)
    c.begin_phase(0)
    c.store.set(BROKEN_KEY.format(0), b"1")
    with pytest.raises(CollectiveError, match="a peer found the group broken"):
        c._wait(_Never(), first=True)  # the flag, not a 30 s timeout


def test_streams_and_the_left_mark_are_per_phase_and_per_rank() -> None:
    c = collective(1.0, 1.0)
    assert isinstance(c, PhasedCollective)
    c.begin_phase(2)
    c.publish(b'{"t": 0, "tok": {}, "end": {}}\n')
    c.leave(7, [1, 2])
    store = c.store
    assert store.check([STREAM_KEY.format(2, 0)]) and not store.check([STREAM_KEY.format(0, 0)])
    assert store.get(LEFT_KEY.format(0)) == b"[7, [1, 2]]"
