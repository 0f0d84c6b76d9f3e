"""Who is still in the group after a collective failed, agreed through the rendezvous store.

The store (the launcher's, which outlives every rank) is the one linearizable
thing the ranks share, so membership is decided there, once per *epoch*
(epoch 0 is the whole world; each failure starts the next one):

1. A rank whose collective failed marks the epoch broken (``BROKEN_KEY``; peers
   still waiting in the collective poll it, so they fail at once instead of at
   their timeout) and publishes ``alive`` with how many collectives it
   completed over the whole run, the result of its last one, and its phase.
2. It waits, at most ``grace_s``, until every member of the epoch is alive,
   marked dead by the launcher (``DEAD_KEY``), gone after its last phase
   (``LEFT_KEY``), or the epoch is decided.
3. The first rank to get there proposes the members (those alive) with one
   ``compare_set``; every rank adopts the record that won. A rank neither in it
   nor left is *excluded*: it must stop (``EXCLUDED_KEY`` tells the launcher to
   kill it).

A rank that died inside a collective may let some survivors complete it while
others fail it; no survivor can be two calls ahead (call k+1 needs everyone's
k). The record carries the leaders' result, which the laggers adopt as the
outcome of their failed call, so every survivor has the same history. Calls
are counted over every phase, since the call some completed may be a phase's
last: the leaders are then in the next phase, where the record is applied
(its ``phase``), and the laggers apply it there too. A rank that left (its
last phase ended) counts as a leader whose call completed.

Each rank appends what it streams to the caller (tokens, ended requests) to
its stream key of the phase every tick. The proposer *seals* each dead rank's
stream of the record's phase (and the next) with a ``compare_set``: what is
before the seal is what the caller saw; a hung rank that resumes appends after
the seal, and is ignored.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "BROKEN_KEY",
    "DEAD_KEY",
    "EXCLUDED_KEY",
    "LEFT_KEY",
    "STREAM_KEY",
    "Agreement",
    "DictStore",
    "Store",
    "agree",
    "read_stream",
    "seal",
]

DEAD_KEY = "densegate/dp/dead/{}"
"""Set by the launcher for a rank that exited abnormally or was killed."""
EXCLUDED_KEY = "densegate/dp/excluded/{}"
"""Set for a rank the survivors agreed is gone; the launcher kills it if it still runs."""
BROKEN_KEY = "densegate/dp/e{}/broken"
"""Set by the first rank to see epoch ``e``'s collective fail."""
STREAM_KEY = "densegate/dp/stream/p{}/{}"
"""Phase ``p``'s stream of a rank (``STREAM_KEY.format(phase_index, rank)``): one JSON
line per tick that streamed anything. Per phase, so a phase's hand-over reads only
what that phase streamed."""
LEFT_KEY = "densegate/dp/left/{}"
"""Set by a rank whose last phase ended: ``[calls, last result]``, for a lagger to adopt."""
_SEAL = b"#sealed\n"
_ALIVE = "densegate/dp/e{}/alive/{}"
_DECIDED = "densegate/dp/e{}/members"


class Store(Protocol):
    """The part of ``torch.distributed.Store`` membership uses."""

    def set(self, key: str, value: str | bytes) -> None: ...
    def get(self, key: str) -> bytes: ...
    def check(self, keys: list[str]) -> bool: ...
    def compare_set(self, key: str, expected: str | bytes, desired: str | bytes) -> bytes: ...
    def append(self, key: str, value: str | bytes) -> None: ...


def _b(v: str | bytes) -> bytes:
    return v.encode() if isinstance(v, str) else v


class DictStore:
    """An in-process ``Store`` with TCPStore's semantics, for ranks run as threads."""

    def __init__(self) -> None:
        self._d: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def set(self, key: str, value: str | bytes) -> None:
        with self._lock:
            self._d[key] = _b(value)

    def get(self, key: str) -> bytes:
        with self._lock:
            return self._d[key]

    def check(self, keys: list[str]) -> bool:
        with self._lock:
            return all(k in self._d for k in keys)

    def compare_set(self, key: str, expected: str | bytes, desired: str | bytes) -> bytes:
        with self._lock:
            cur = self._d.get(key)
            if (cur is None and _b(expected) == b"") or cur == _b(expected):
                self._d[key] = _b(desired)
            return self._d.get(key, _b(expected))

    def append(self, key: str, value: str | bytes) -> None:
        with self._lock:
            self._d[key] = self._d.get(key, b"") + _b(value)


@dataclass(frozen=True)
class Agreement:
    """The decided membership of the next epoch; identical on every surviving rank."""

    epoch: int
    members: list[int]
    """Surviving ranks (original numbering), sorted."""
    dead: list[int]
    adopt: tuple[int, list[int]] | None
    """``(calls, total)``: a rank that completed ``calls - 1`` collectives takes ``total``
    as the result of its failed one. None when no survivor got further than another."""
    streams: dict[int, bytes]
    """Each dead rank's sealed stream of ``phase``: what the caller saw from it there."""
    phase: int = 0
    """The phase the record is applied in: the furthest survivor's."""
    left: list[int] = dataclasses.field(default_factory=list)
    """Members that had finished their last phase: neither survivors nor dead."""


def read_stream(raw: bytes) -> list[dict[str, Any]]:
    """Records of a stream, up to its seal if it has one."""
    cut = raw.find(_SEAL)
    body = raw if cut < 0 else raw[:cut]
    return [json.loads(line) for line in body.splitlines() if line.strip()]


def seal(store: Store, rank: int, phase: int) -> bytes:
    """Seal ``rank``'s stream of ``phase`` (once; later seals find the first) and return
    what precedes it."""
    key = STREAM_KEY.format(phase, rank)
    while True:
        cur = store.get(key) if store.check([key]) else b""
        cut = cur.find(_SEAL)
        if cut >= 0:
            return cur[:cut]
        if store.compare_set(key, cur, cur + _SEAL) == cur + _SEAL:
            return cur


def agree(
    store: Store,
    epoch: int,
    rank: int,
    members: Sequence[int],
    calls: int,
    total: Sequence[int] | None,
    grace_s: float,
    phase: int = 0,
) -> Agreement:
    """Steps 1-3 of the module docstring for ``rank``, a member of ``epoch`` in ``phase``;
    ``calls`` counts its completed collectives over every phase."""
    store.set(BROKEN_KEY.format(epoch), b"1")
    store.set(_ALIVE.format(epoch, rank), json.dumps([calls, list(total or []), phase]))
    decided = _DECIDED.format(epoch)
    pending = set(members) - {rank}
    deadline = time.monotonic() + grace_s
    while pending and time.monotonic() < deadline and not store.check([decided]):
        for m in sorted(pending):
            if any(
                store.check([key.format(*a)])
                for key, a in ((_ALIVE, (epoch, m)), (DEAD_KEY, (m,)), (LEFT_KEY, (m,)))
            ):
                pending.discard(m)
        if pending:
            time.sleep(0.005)
    if not store.check([decided]):
        store.compare_set(decided, b"", json.dumps(_propose(store, epoch, members)))
    record = json.loads(store.get(decided))
    alive = [int(m) for m in record["members"]]
    left = [int(m) for m in record["left"]]
    dead = sorted(set(members) - set(alive) - set(left))
    for d in dead:
        store.set(EXCLUDED_KEY.format(d), str(epoch))
    adopt = record["adopt"]
    return Agreement(
        epoch + 1,
        alive,
        dead,
        None if adopt is None else (int(adopt[0]), [int(x) for x in adopt[1]]),
        {int(d): s.encode() for d, s in record["streams"].items()},
        int(record["phase"]),
        left,
    )


def _propose(store: Store, epoch: int, members: Sequence[int]) -> dict[str, Any]:
    alive: dict[int, tuple[int, list[int]]] = {}
    phases: list[int] = []
    left: dict[int, tuple[int, list[int]]] = {}
    for m in members:
        key = _ALIVE.format(epoch, m)
        if store.check([key]):
            c, t, p = json.loads(store.get(key))
            alive[m] = (int(c), t)
            phases.append(int(p))
        elif store.check([LEFT_KEY.format(m)]):
            c, t = json.loads(store.get(LEFT_KEY.format(m)))
            left[m] = (int(c), t)
    ran = {**alive, **left}
    top = max(c for c, _ in ran.values())
    behind = [m for m, (c, _) in ran.items() if c < top]
    if any(ran[m][0] < top - 1 for m in behind):  # impossible for an all-reduce
        raise RuntimeError(f"survivors more than one collective apart: {ran}")
    adopt = next(([c, t] for c, t in ran.values() if c == top), None) if behind else None
    phase = max(phases)
    dead = [d for d in members if d not in ran]
    for d in dead:  # the next phase too: a rank that got there first streams nothing more
        seal(store, d, phase + 1)
    streams = {d: seal(store, d, phase).decode() for d in dead}
    return {
        "members": sorted(alive),
        "left": sorted(left),
        "adopt": adopt,
        "streams": streams,
        "phase": phase,
    }
