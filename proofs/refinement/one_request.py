"""One request as R6 hands it to the shipped Scheduler, and its stand-ins for lists and index.

CrossHair runs a check on symbolic ints: a token list of symbolic length, a stop set holding
a symbolic token or a dict keyed by a symbolic seq id would each be walked or hashed, which
realizes the symbol (one value, not every value). These hold just what the scheduler's
per-request steps read of them: lengths, slices of lengths, membership as an input, one key.
``setup`` builds a Scheduler holding one such request; ``code_view`` and ``spec_view`` read
what a step left of it on each side.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import z3

from densegate.impl.sched.request import Request, RequestStatus
from densegate.proofs.refinement.counted import Counted
from densegate.proofs.refinement.scheduler_steps import boot_config
from densegate.proofs.refinement.step_checks import Pre, Val, View
from densegate.proofs.refinement.symbolic import NoTracing
from densegate.proofs.scheduler.life import request_ok
from densegate.spec.scheduler import SchedulerMachine
from densegate.spec.scheduler_request import ABORTED, FINISHED, RUNNING, WAITING, Req

__all__ = [
    "FIELDS",
    "SPEC",
    "STATUS",
    "Ends",
    "OnlyRequest",
    "Stops",
    "Tokens",
    "code_view",
    "length",
    "newest_other",
    "req_of",
    "setup",
    "spec_view",
    "terms",
    "well",
]

SPEC = SchedulerMachine(1, 2)
"""The machine whose hooks (``preempt_frees``) R6's block-size-free checks are judged by."""
STATUS = {
    RequestStatus.WAITING: WAITING,
    RequestStatus.RUNNING: RUNNING,
    RequestStatus.FINISHED: FINISHED,
    RequestStatus.ABORTED: ABORTED,
}
FIELDS = ("status", "computed", "generated", "blocks", "free")


class Tokens(Counted):
    """A token list reduced to its length, sliced and joined as ``Request.tokens`` does;
    an element read is token 0 (the spec has no token values)."""

    __slots__ = ()

    def __getitem__(self, i: object) -> object:  # type: ignore[override]
        return super().__getitem__(i) if isinstance(i, slice) else 0

    def __add__(self, other: Tokens) -> Tokens:
        return Tokens(self.n + other.n)


class Stops:
    """The stop set: whether the sampled token is in it is the check's input ``stop``."""

    __slots__ = ("stop",)

    def __init__(self, stop: object) -> None:
        self.stop = stop

    def __contains__(self, tok: object) -> bool:
        return bool(self.stop)


class OnlyRequest:
    """The scheduler's seq-id index holding one request (a dict would realize the id)."""

    __slots__ = ("key", "req")

    def __init__(self, key: object, req: Request | None) -> None:
        self.key, self.req = key, req

    def get(self, key: object, default: object = None) -> object:
        return self.req if self.req is not None and key == self.key else default

    def pop(self, key: object, default: object = None) -> object:
        got = self.get(key, default)
        if got is self.req:
            self.req = None
        return got


class Ends:
    """The running list as one turn of step 1's walk sees it: ``n`` requests, the one whose
    turn it is at index ``i`` (``front``) and the newest at the end (``back``: the same
    request when it is the last). Reading any other element, or the end once the newest is
    removed, raises, which fails the check: a turn reads its own request and one victim."""

    __slots__ = ("back", "front", "gone", "i", "n")

    def __init__(self, n: object, i: object, front: Request, back: Request) -> None:
        self.n, self.i, self.front, self.back, self.gone = n, i, front, back, False

    def __len__(self) -> int:
        return self.n  # type: ignore[return-value]

    def __getitem__(self, k: object) -> Request:
        if k == -1 and not self.gone:
            return self.back
        if k == self.i and not (self.gone and self.front is self.back):
            return self.front
        raise IndexError(f"the walk read running[{k}]: only its own turn and the newest")

    def remove(self, x: object) -> None:
        if x is not self.back or self.gone:
            raise ValueError("the walk removed a request other than the newest running one")
        self.n -= 1  # type: ignore[operator]
        self.gone = True


def req_of(e: Mapping[str, z3.ExprRef], st: int, c: z3.ArithRef | None = None) -> Req:
    return Req(z3.IntVal(st), e["c"] if c is None else c, e["g"], e["b"])


def well(st: int, bs: int = 2) -> Pre:
    """The request is in state ``st`` and well-formed (S10's ``request_ok``)."""
    return lambda e: z3.And(*request_ok(e["P"], e["M"], req_of(e, st), bs))


def setup(cls: type, v: Mapping[str, Any], bs: int, st: RequestStatus) -> tuple[Any, Request]:
    with NoTracing():
        sched: Any = cls(boot_config(bs))
        sched.blocks._free = Counted(v["free"])
        r = Request("r", 0, Tokens(v["P"]), v["M"], 0, 0.0, Stops(v["stop"]))  # type: ignore[arg-type]
        r.seq_id = v["seq"]
        r.output_token_ids = Tokens(v["g"])  # type: ignore[assignment]
        r.num_computed, r.status = v["c"], st
        r.block_table = Counted(v["b"])  # type: ignore[assignment]
        sched._by_seq = OnlyRequest(v["seq"], r)
        return sched, r


def length(x: Any) -> Any:
    """A list's length read natively (``len`` of a symbolic length needs tracing)."""
    return x.n if isinstance(x, Counted) else len(x)


def code_view(sched: Any, r: Request) -> View:
    got = (STATUS[r.status], r.num_computed, length(r.output_token_ids), length(r.block_table),
           length(sched.blocks._free))  # fmt: skip
    return dict(zip(FIELDS, got, strict=True))


def spec_view(r: Req, free: z3.ArithRef) -> View:
    return dict(zip(FIELDS, (r.st, r.c, r.g, r.b, free), strict=True))


def terms(v: Mapping[str, Any], val: Val, st: int) -> Req:
    return Req(z3.IntVal(st), val(v["c"]), val(v["g"]), val(v["b"]))


def newest_other(v: Mapping[str, Any]) -> Request:
    """The newest running request, when it is not the one whose turn it is."""
    r = Request("v", 1, Tokens(v["Pv"]), v["Mv"], 0, 0.0)  # type: ignore[arg-type]
    r.seq_id = v["seq"]  # its own id is not read: identity tells the requests apart
    r.output_token_ids = Tokens(v["gv"])  # type: ignore[assignment]
    r.num_computed, r.status = v["cv"], RequestStatus.RUNNING
    r.block_table = Counted(v["bv"])  # type: ignore[assignment]
    return r
