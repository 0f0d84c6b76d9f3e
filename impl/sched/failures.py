"""A failed pass: the runner raised, or returned what the pass did not ask for.

The scheduler's part of the pass stands (the gate's decision, the pass index,
preemptions, admissions, reserved KV blocks); only the runner's part is taken
back (``Scheduler.undo``), so every request of the pass still has its work
owed and the next pass plans it. Then each such request gets one strike: with
more than ``runner_retries`` strikes in a row it ends ABORTED, naming the
failure; otherwise it runs again in the next pass. The engine raises
``PassFailed`` (chained to the runner's exception) to its caller every time.
"""

from __future__ import annotations

import operator

from densegate.impl.sched.batch import ScheduledBatch
from densegate.impl.sched.request import Request
from densegate.impl.sched.scheduler import Scheduler

__all__ = ["MalformedResult", "PassFailed", "Strikes", "checked_tokens"]

_SAMPLE = operator.attrgetter("sample")


class MalformedResult(ValueError):
    """The runner returned something other than one token id per sampled chunk."""


class PassFailed(RuntimeError):
    """Pass ``index`` failed (``__cause__``: the runner's exception); ``aborted`` lists the ids
    of the requests it ended, ``retrying`` those that run again in the next pass."""

    def __init__(self, index: int, cause: BaseException, aborted: list[str], retrying: list[str]):
        self.index = index
        self.aborted = aborted
        self.retrying = retrying
        what = f"{type(cause).__name__}: {cause}".rstrip(": ")
        super().__init__(
            f"pass {index} failed ({what}); {len(aborted)} request(s) aborted, "
            f"{len(retrying)} to run again"
        )


def checked_tokens(batch: ScheduledBatch, tokens: object, vocab: int | None) -> list[int]:
    """``tokens`` as one int per sampled chunk of ``batch``, each in ``[0, vocab)``; else
    ``MalformedResult`` saying what is wrong, before any request sees a token."""
    want = sum(map(_SAMPLE, batch.prefills)) + sum(map(_SAMPLE, batch.decodes))
    try:
        got = list(map(operator.index, tokens))  # type: ignore[call-overload]
    except TypeError as e:
        why = f"runner returned {type(tokens).__name__}, not token ids ({e})"
        raise MalformedResult(why) from None
    if len(got) != want:
        raise MalformedResult(
            f"runner returned {len(got)} token(s) for pass {batch.index}, which samples {want}"
        )
    bad = None
    if got and (min(got) < 0 or (vocab is not None and max(got) >= vocab)):  # in C first
        bad = next(t for t in got if t < 0 or (vocab is not None and t >= vocab))
    if bad is not None:
        bound = f"[0, {vocab})" if vocab is not None else ">= 0"
        raise MalformedResult(f"runner returned token id {bad}, outside the vocabulary {bound}")
    return got


class Strikes:
    """Failed passes in a row, per request; a pass that succeeds clears its requests'."""

    def __init__(self, retries: int) -> None:
        self.retries = retries
        self._count: dict[int, int] = {}

    def succeeded(self, batch: ScheduledBatch) -> None:
        if self._count:  # O(batch) only while some request has a strike
            for c in (*batch.prefills, *batch.decodes):
                self._count.pop(c.seq_id, None)

    def failed(
        self, sched: Scheduler, batch: ScheduledBatch, cause: BaseException
    ) -> tuple[list[Request], list[Request]]:
        """Undo the runner's part of ``batch``; abort the requests out of retries. Returns
        (aborted, retrying), each in batch order."""
        sched.undo(batch)
        running = {r.seq_id: r for r in sched.running}  # O(running), on a failure only
        chunks = (*batch.prefills, *batch.decodes)
        reqs = [running[c.seq_id] for c in chunks if c.seq_id in running]
        reason = f"runner failed in pass {batch.index}: {type(cause).__name__}: {cause}"
        aborted: list[Request] = []
        retrying: list[Request] = []
        for r in reqs:
            n = self._count.get(r.seq_id, 0) + 1
            if n > self.retries:
                self._count.pop(r.seq_id, None)
                sched.abort(r, reason.rstrip(": "))
                aborted.append(r)
            else:
                self._count[r.seq_id] = n
                retrying.append(r)
        return aborted, retrying

    def forget(self, r: Request) -> None:
        self._count.pop(r.seq_id, None)
