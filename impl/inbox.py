"""The engine's input queue: ``add_request`` and ``abort`` from any thread, or mid-pass.

A pass runs the caller's code (the runner's ``execute``, a gate policy), which may
call back into the engine, and a server thread may call it at any moment. Neither
may change the scheduler under a running pass: an abort that freed a request of the
batch in flight made the next pass raise ``KeyError``, left its partner RUNNING with
nothing to run and leaked its blocks (issue 34). So a call only registers its
request (ids are taken at once, so a duplicate is refused at once) and queues the
change; whoever holds the engine applies it: the caller itself when nothing does,
else the pass that does, at its boundary (the pass's end, or the next one's start).

The calls that run passes (``step``, ``plan``, ``execute``, ``generate``) are refused
with ``EngineBusy`` from inside a pass, where they could only deadlock or corrupt
it, and while another thread runs one, which would take that driver's outputs.
"""

from __future__ import annotations

import collections
import functools
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar, cast

from densegate.impl.sched.request import Request, RequestStatus

__all__ = ["EngineBusy", "Inbox", "runs_passes"]


class EngineBusy(RuntimeError):
    """A call that runs passes was made inside a pass, or while another thread ran one."""


class Inbox:
    """The engine's requests by id, the queued adds and aborts, and the right to apply them.

    ``mutex`` guards the table, the queue and the pending aborts; it is never held
    while the caller's code runs. ``_engine`` is held by a pass, or by whoever applies
    the queue when no pass runs; ``apply`` gets each ``(abort?, request)`` in order.
    """

    def __init__(self, apply: Callable[[bool, Request], None]) -> None:
        self.mutex = threading.Lock()
        self.requests: dict[str, Request] = {}
        self._apply = apply
        self._ops: collections.deque[tuple[bool, Request]] = collections.deque()
        self._aborting: set[str] = set()  # aborts taken, not applied or ended yet
        self._next_seq = 0
        self._engine = threading.Lock()
        self._driver: int | None = None  # the thread running passes, if any

    def __len__(self) -> int:
        """Adds and aborts not applied yet."""
        return len(self._ops)

    # -- any thread -------------------------------------------------------------------
    def add(
        self,
        request_id: str | None,
        prompt: list[int],
        max_tokens: int,
        stops: frozenset[int],
        rejection: str | None,
    ) -> str:
        """Register a request under ``request_id`` (None: ``str(n)`` for the next arrival
        number no caller's id took) and queue it; ``rejection``: it ends REJECTED so."""
        with self.mutex:
            seq = self._next_seq
            if request_id is None:
                while str(seq) in self.requests:
                    seq += 1  # arrival numbers only need to increase; gaps are fine
            rid = str(seq) if request_id is None else request_id
            if rid in self.requests:
                raise ValueError(f"request_id {rid!r} is already in use; pass another, or None")
            self._next_seq = seq + 1
            req = Request(rid, seq, prompt, max_tokens, 0, time.perf_counter(), stops)
            if rejection is not None:
                req.status = RequestStatus.REJECTED
                req.finish_reason = rejection
            self.requests[rid] = req
            self._ops.append((False, req))
        self.flush()
        return rid

    def abort(self, request_id: str) -> bool:
        """Queue ``request_id``'s abort; False if it has ended or its abort is queued."""
        with self.mutex:
            req = self.requests.get(request_id)
            if req is None:
                raise KeyError(f"unknown request_id {request_id!r}")
            if req.status.ended or request_id in self._aborting:
                return False
            self._aborting.add(request_id)
            self._ops.append((True, req))
        self.flush()
        return True

    def settled(self, reqs: list[Request]) -> None:
        """These requests' aborts are done (ended, or found ended)."""
        with self.mutex:
            self._aborting.difference_update(r.request_id for r in reqs)

    def snapshot(self) -> list[Request]:
        with self.mutex:
            return list(self.requests.values())

    def flush(self) -> None:
        """Apply the queue now unless the engine is held; its holder applies it then.

        The holder checks the queue again after letting go, so an op queued while it
        let go is never stranded."""
        while self._ops and self._engine.acquire(blocking=False):
            try:
                self.drain()
            finally:
                self._engine.release()

    # -- the engine's holder ----------------------------------------------------------
    def drain(self) -> None:
        """Apply every queued op, in order; the caller holds the engine.

        An op leaves the queue once applied, so ``len`` never misses one in between."""
        ops = self._ops
        while ops:
            try:
                self._apply(*ops[0])
            finally:
                ops.popleft()

    def enter(self, call: str) -> None:
        """Take the engine to run passes in ``call``, applying the queue first."""
        me = threading.get_ident()
        with self.mutex:
            driver = self._driver
            if driver is None:
                self._driver = me
        if driver == me:
            raise EngineBusy(
                f"Engine.{call}() called from inside a pass (the runner's execute or the "
                "gate): a pass cannot run another; add_request and abort may be called, "
                "and are taken when the pass ends"
            )
        if driver is not None:
            raise EngineBusy(
                f"Engine.{call}() called while another thread runs a pass: run passes from "
                "one thread; any thread may call add_request and abort"
            )
        held = False
        try:
            self._engine.acquire()  # a flush holds it for a moment at most
            held = True
            self.drain()
        except BaseException:
            self._release(held)
            raise

    def leave(self) -> None:
        """The pass boundary: apply the queue, let the engine go, apply any op since."""
        try:
            self.drain()
        finally:
            self._release(True)

    def _release(self, held: bool) -> None:
        with self.mutex:
            self._driver = None
        if held:
            self._engine.release()
            self.flush()


_F = TypeVar("_F", bound=Callable[..., Any])


def runs_passes(method: _F) -> _F:
    """``method`` runs passes: it holds the engine (``Inbox.enter``) for its duration."""
    name = method.__name__

    @functools.wraps(method)
    def driven(self: Any, *args: Any, **kwargs: Any) -> Any:
        inbox: Inbox = self._inbox
        inbox.enter(name)
        try:
            return method(self, *args, **kwargs)
        finally:
            inbox.leave()

    return cast(_F, driven)
