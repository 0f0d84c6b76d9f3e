"""The collective ranks sum their per-tick vectors through, and its torch.distributed form.

``Collective`` is what a rank's loop needs (``densegate.impl.dp.rank``); tests
implement it with threads. ``TorchCollective`` runs it on a process group:
the backend is gloo, or NCCL when the runner's device is CUDA and every rank
has a GPU (``agree_backend``). A rank that died closes its sockets and is
noticed at once; a rank that hangs is noticed ``timeout_s`` plus at most
``DETECTION_MARGIN_S`` after the call could have completed; a slower rank (a
pass that takes less than the timeout) is simply waited for.

In every phase, its first call included, "could have completed" means once
every member is in the call's phase: each rank marks the store (``READY_KEY``)
as soon as it has built the phase's engine (``begin_phase``), and the first
call of a phase waits for every member's mark at most ``startup_timeout_s``
(building a model may take minutes), then ``timeout_s`` from the moment all
are marked. So a hang right before a phase's first collective is noticed as
fast as one anywhere else, and only a rank that never finishes building takes
the startup timeout. After a failure the survivors agree on who is left
through the rendezvous store and go on over a new group.
"""

from __future__ import annotations

import datetime
import json
import os
import time
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from densegate.impl.dp.membership import BROKEN_KEY, LEFT_KEY, STREAM_KEY, Agreement, agree

__all__ = [
    "DETECTION_MARGIN_S",
    "READY_KEY",
    "Collective",
    "CollectiveError",
    "Excluded",
    "PhasedCollective",
    "StoreUnavailable",
    "TorchCollective",
    "agree_backend",
]

_NCCL_VOTE = "densegate/dp/nccl/{}"
_POKE_S = 0.02
"""How often a waiting collective looks for a peer's broken flag and ready marks."""
DETECTION_MARGIN_S = 0.5
"""What a hang's detection may take beyond ``timeout_s``: the 20 ms store poll, plus
room for a loaded machine's scheduling (benchmarks/dp_faults.py --hangs measures it)."""
READY_KEY = "densegate/dp/ready/p{}/{}"
"""Set by a rank once it has built phase ``p``'s engine (``READY_KEY.format(p, rank)``)."""


class CollectiveError(RuntimeError):
    """The collective failed or timed out: some rank is gone."""


class Excluded(RuntimeError):
    """The survivors agreed this rank is gone (it was too slow to answer); it must stop."""


class StoreUnavailable(RuntimeError):
    """The rendezvous store is gone (it lived in a dead rank): survivors cannot agree."""


class Collective(Protocol):
    """Sums int vectors across the ranks of one group; raises ``CollectiveError`` on failure."""

    def all_reduce_sum(self, vector: Sequence[int], *, first: bool = False) -> list[int]:
        """Element-wise sum over every member. ``first``: the first call of a phase (ranks
        may still be building their models; a ``PhasedCollective`` waits for them)."""
        ...

    def publish(self, record: bytes) -> None:
        """Append one tick's stream record (``densegate.impl.dp.readmission``) where
        survivors can read it if this rank dies."""
        ...

    def recover(self, calls: int, total: Sequence[int] | None) -> Agreement:
        """After a failure: agree on the survivors and regroup over them.

        ``calls`` collectives completed here over every phase, the last with result
        ``total``.
        Raises ``Excluded`` or ``StoreUnavailable``; a later call failing with
        ``CollectiveError`` means another member died: recover again."""
        ...


@runtime_checkable
class PhasedCollective(Collective, Protocol):
    """A ``Collective`` that also knows phases, as one that survives a failure in any phase
    must: streams per phase, the first call's wait, and leaving for good. The rank loop
    uses these when the collective has them (an in-process bench's need not)."""

    def begin_phase(self, index: int) -> None:
        """This rank has built phase ``index``'s engine: publish into its stream from now
        on, let the others' first call of it start counting ``timeout_s``, and tell them
        this phase when recovering (``calls`` then counts every phase's collectives; the
        agreement is applied in the furthest survivor's phase)."""
        ...

    def leave(self, calls: int, total: Sequence[int] | None) -> None:
        """Every phase ended here after ``calls`` collectives, the last with ``total``: a
        peer that failed that last call adopts it instead of waiting for this rank."""
        ...


class TorchCollective:
    """``Collective`` over torch.distributed, with timeouts, liveness and shrinking.

    Epoch 0 runs on the default process group (gloo, or NCCL). While a call
    waits it polls the epoch's broken flag in the store, so a rank that is not
    a neighbour of the dead one in the ring fails at once too. ``recover``
    agrees on the survivors (``densegate.impl.dp.membership``) and builds a new
    gloo group over them, on CPU tensors, under a store prefix of the new epoch
    (gloo's own timeout there, as on the default group, is the longer of the two
    timeouts: the waits above are what bound a call).
    """

    keeps_stream = True
    """Its ``publish`` keeps the records for survivors (the rank loop reads this and skips
    building them for a collective that says False, such as an in-process bench's)."""

    def __init__(
        self,
        rank: int,
        world_size: int,
        store: Any,
        timeout_s: float,
        startup_timeout_s: float,
        device: str = "cpu",
        grace_s: float | None = None,
    ) -> None:
        self.rank = rank
        self.world_size = world_size
        self.store = store
        self.timeout_s = timeout_s
        self.startup_timeout_s = startup_timeout_s
        self.device = device
        self.grace_s = timeout_s if grace_s is None else grace_s
        self.epoch = 0
        self.members = list(range(world_size))
        self.phase = 0
        self._group: Any = None  # None: the default group

    def begin_phase(self, index: int) -> None:
        self.phase = index
        self.store.set(READY_KEY.format(index, self.rank), b"1")

    def leave(self, calls: int, total: Sequence[int] | None) -> None:
        try:
            self.store.set(LEFT_KEY.format(self.rank), json.dumps([calls, list(total or [])]))
        except Exception:  # the store died with rank 0: nobody is left to adopt from us
            return

    def all_reduce_sum(self, vector: Sequence[int], *, first: bool = False) -> list[int]:
        import torch
        import torch.distributed as dist

        device = self.device if self._group is None else "cpu"
        t = torch.tensor(list(vector), dtype=torch.int64, device=device)
        try:
            if self._group is None:
                work = dist.all_reduce(t, op=dist.ReduceOp.SUM, async_op=True)
            else:
                work = self._group.allreduce([t])
            if work is None:
                raise CollectiveError("all_reduce returned no work handle")
            self._wait(work, first)
        except CollectiveError:
            raise
        except Exception as e:  # gloo raises RuntimeError; NCCL may raise DistBackendError
            raise CollectiveError(f"{type(e).__name__}: {e}") from e
        out: list[int] = t.tolist()
        return out

    def _wait(self, work: Any, first: bool) -> None:
        """Until done, a peer marks the epoch broken, or the deadline: ``timeout_s`` from
        the start, or for a phase's ``first`` call from when every member was ready (at
        most ``startup_timeout_s`` waiting for that)."""
        start = time.monotonic()
        poke = start
        broken = BROKEN_KEY.format(self.epoch)
        ready = [READY_KEY.format(self.phase, m) for m in self.members] if first else []
        deadline = start + (self.startup_timeout_s if first else self.timeout_s)
        pause = 0.0
        while not work.is_completed():
            now = time.monotonic()
            if now > deadline:
                raise CollectiveError(self._late(first, ready, now - start))
            if now >= poke:
                poke = now + _POKE_S
                if self.store.check([broken]):
                    raise CollectiveError("a peer found the group broken")
                if ready and self.store.check(ready):
                    ready = []
                    deadline = now + self.timeout_s
            time.sleep(pause)
            pause = min(0.001, pause + 0.0001)
        work.wait()

    def _late(self, first: bool, ready: Sequence[str], waited: float) -> str:
        """Why the deadline passed: ``ready`` holds the marks still missing."""
        if not first:
            return f"all_reduce did not complete within {self.timeout_s}s"
        if not ready:
            return (
                f"all_reduce did not complete within {self.timeout_s}s after every rank had "
                f"built phase {self.phase}'s engine (waited {waited:.2f}s in all)"
            )
        late = [
            m for m, key in zip(self.members, ready, strict=True) if not self.store.check([key])
        ]
        return (
            f"rank(s) {late} did not build phase {self.phase}'s engine within the startup "
            f"timeout {self.startup_timeout_s}s"
        )

    def publish(self, record: bytes) -> None:
        self.store.append(STREAM_KEY.format(self.phase, self.rank), record)

    def recover(self, calls: int, total: Sequence[int] | None) -> Agreement:
        import torch.distributed as dist

        try:
            self.store.set_timeout(datetime.timedelta(seconds=max(self.grace_s, 1.0)))
            agreed = agree(
                self.store,
                self.epoch,
                self.rank,
                self.members,
                calls,
                total,
                self.grace_s,
                self.phase,
            )
        except Exception as e:
            raise StoreUnavailable(f"{type(e).__name__}: {e}") from e
        if self.rank not in agreed.members:
            raise Excluded(f"rank {self.rank} was agreed gone in epoch {self.epoch}")
        self.epoch, self.members = agreed.epoch, agreed.members
        prefix = dist.PrefixStore(f"densegate/dp/pg{self.epoch}", self.store)  # type: ignore[attr-defined]
        try:
            self._group = dist.ProcessGroupGloo(
                prefix,
                agreed.members.index(self.rank),
                len(agreed.members),
                datetime.timedelta(seconds=max(self.timeout_s, self.startup_timeout_s)),
            )
        except Exception as e:  # a survivor died while the group formed
            self._group = _Broken(f"{type(e).__name__}: {e}")
        return agreed


class _Broken:
    """A group that could not form: every call fails, so the caller recovers again."""

    def __init__(self, why: str) -> None:
        self.why = why

    def allreduce(self, tensors: Any) -> Any:
        raise CollectiveError(f"the survivors' group did not form: {self.why}")


def agree_backend(store: Any, rank: int, world: int, device: str, choice: str) -> str:
    """NCCL only if every rank, on every machine, has a GPU of its own; else gloo.

    Each rank votes through the rendezvous store and all read every vote, so
    machines with and without enough GPUs still pick the same backend.
    """
    if choice != "auto":
        return choice
    import torch

    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    mine = (
        device.startswith("cuda")
        and torch.cuda.is_available()
        and torch.cuda.device_count() >= local_world
    )
    store.set(_NCCL_VOTE.format(rank), "1" if mine else "0")
    votes = [store.get(_NCCL_VOTE.format(r)) for r in range(world)]
    return "nccl" if all(v == b"1" for v in votes) else "gloo"
