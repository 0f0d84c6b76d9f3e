"""The collective ranks sum their per-tick vectors through, and its torch.distributed form.

``Collective`` is what a rank's loop needs (``densegate.impl.dp.rank``); tests
implement it with threads. ``TorchCollective`` runs it on a process group:
the backend is gloo, or NCCL when the runner's device is CUDA and every rank
has a GPU (``agree_backend``). Collectives wait at most ``timeout_s`` (the
first of each phase waits ``startup_timeout_s``, while ranks build their
models): a rank that died closes its sockets and is noticed at once, a rank
that hangs is noticed at the timeout. After a failure, liveness goes through
the rendezvous store, where the launcher also marks dead ranks.
"""

from __future__ import annotations

import datetime
import logging
import os
import time
from collections.abc import Sequence
from typing import Any, Protocol

__all__ = [
    "ALIVE_KEY",
    "DEAD_KEY",
    "Collective",
    "CollectiveError",
    "TorchCollective",
    "agree_backend",
]

log = logging.getLogger("densegate.dp")

ALIVE_KEY = "densegate/dp/alive/{}"
"""Store key a surviving rank sets (to how far it routed) once its group broke."""
DEAD_KEY = "densegate/dp/dead/{}"
"""Store key the launcher sets for a rank that exited abnormally or hung."""
_NCCL_VOTE = "densegate/dp/nccl/{}"


class CollectiveError(RuntimeError):
    """The collective failed or timed out: some rank is gone."""


class Collective(Protocol):
    """Sums int vectors across the ranks of one group; raises ``CollectiveError`` on failure."""

    def all_reduce_sum(self, vector: Sequence[int], *, first: bool = False) -> list[int]:
        """Element-wise sum over every rank. ``first``: the first call of a phase (ranks
        may still be building their models, so a longer timeout may apply)."""
        ...

    def survivors(self, routed: int) -> dict[int, int]:
        """After a failure: every rank known to be alive -> how many arrivals it had routed.

        ``routed`` is this rank's count, published for the others; waits at most
        a grace period for ranks that are slow to notice the failure."""
        ...


class TorchCollective:
    """``Collective`` over a torch.distributed process group, with timeouts and liveness.

    ``survivors`` publishes this rank as alive in the rendezvous store and
    waits up to ``grace_s`` for every other rank to do the same (or to be
    marked dead by the launcher); ranks heard from neither way count as dead.
    If the store itself is gone (it lived in rank 0), rank 0 is taken as dead.
    """

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

    def all_reduce_sum(self, vector: Sequence[int], *, first: bool = False) -> list[int]:
        import torch
        import torch.distributed as dist

        t = torch.tensor(list(vector), dtype=torch.int64, device=self.device)
        wait = self.startup_timeout_s if first else self.timeout_s
        try:
            work = dist.all_reduce(t, op=dist.ReduceOp.SUM, async_op=True)
            if work is None or not work.wait(timeout=datetime.timedelta(seconds=wait)):
                raise CollectiveError(f"all_reduce did not complete within {wait}s")
        except CollectiveError:
            raise
        except Exception as e:  # gloo raises RuntimeError; NCCL may raise DistBackendError
            raise CollectiveError(f"{type(e).__name__}: {e}") from e
        out: list[int] = t.tolist()
        return out

    def survivors(self, routed: int) -> dict[int, int]:
        store = self.store
        try:
            store.set_timeout(datetime.timedelta(seconds=max(self.grace_s, 0.1)))
            store.set(ALIVE_KEY.format(self.rank), str(routed))
        except Exception as e:
            log.warning("rank %d: store unreachable (%s); taking rank 0 as dead", self.rank, e)
            return {r: routed for r in range(self.world_size) if r != 0 or r == self.rank}
        alive = {self.rank: routed}
        unknown = set(range(self.world_size)) - set(alive)
        deadline = time.monotonic() + self.grace_s
        while unknown and time.monotonic() < deadline:
            for r in sorted(unknown):
                try:
                    if store.check([ALIVE_KEY.format(r)]):
                        alive[r] = int(store.get(ALIVE_KEY.format(r)))
                        unknown.discard(r)
                    elif store.check([DEAD_KEY.format(r)]):
                        unknown.discard(r)
                except Exception:
                    unknown.discard(r)
            if unknown:
                time.sleep(0.02)
        return alive


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
