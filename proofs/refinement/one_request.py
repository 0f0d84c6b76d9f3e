"""Stand-ins R6 hands the shipped Scheduler for one request's lists and index.

CrossHair runs a check on symbolic ints: a token list of symbolic length, a stop set holding
a symbolic token or a dict keyed by a symbolic seq id would each be walked or hashed, which
realizes the symbol (one value, not every value). These hold just what the scheduler's
per-request steps read of them: lengths, slices of lengths, membership as an input, one key.
"""

from __future__ import annotations

from densegate.impl.sched.request import Request
from densegate.proofs.refinement.counted import Counted

__all__ = ["OnlyRequest", "Stops", "Tokens"]


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
