"""A request's life: WAITING -> RUNNING (prefill, maybe chunked) -> decoding -> an end.

Every request ends exactly once, FINISHED, ABORTED or REJECTED, with a reason,
so an engine can account for each one it was given. A FINISHED request says
why: ``"stop"`` (it sampled one of its ``stop_token_ids``, EOS included unless
it ignores EOS) or ``"length"`` (it reached ``max_tokens``).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

from densegate.impl.validation import is_int

__all__ = ["FINISH_LENGTH", "FINISH_STOP", "Request", "RequestStatus", "stop_set"]

FINISH_LENGTH = "length"
FINISH_STOP = "stop"


def stop_set(
    stop_token_ids: Iterable[object], eos_token_ids: Iterable[int], vocab: int | None = None
) -> frozenset[int]:
    """The tokens that end a request: its own stop ids (each in ``[0, vocab)``: one outside
    could never be sampled) plus the EOS ids it does not ignore."""
    if isinstance(stop_token_ids, (str, bytes)) or not hasattr(stop_token_ids, "__iter__"):
        raise ValueError(f"stop_token_ids must be a list of ints, got {stop_token_ids!r}")
    stops: list[int] = []
    for t in stop_token_ids:
        if not is_int(t) or t < 0 or (vocab is not None and t >= vocab):
            bound = ">= 0" if vocab is None else f"in [0, {vocab}), the vocabulary"
            raise ValueError(f"stop_token_ids must hold ints {bound}, got {t!r}")
        stops.append(t)
    return frozenset(stops).union(eos_token_ids)


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"
    ABORTED = "aborted"
    REJECTED = "rejected"

    __hash__ = object.__hash__  # as Reason's (densegate.impl.gate): identity, in C

    @property
    def ended(self) -> bool:
        return self in _ENDED


_ENDED = frozenset({RequestStatus.FINISHED, RequestStatus.ABORTED, RequestStatus.REJECTED})


class Request:
    """Scheduler-side state of one request.

    ``num_computed`` tokens have their KV in ``block_table``. After every sampled
    token ``num_computed == num_tokens - 1``: the last token is fed by the next
    decode. A preemption by recompute drops all KV (``num_computed = 0``) and
    keeps the generated tokens, which are prefilled again with the prompt.
    """

    __slots__ = (
        "arrival_pass",
        "arrival_time",
        "block_table",
        "finish_pass",
        "finish_reason",
        "finish_time",
        "first_token_pass",
        "first_token_time",
        "head_pass",
        "max_tokens",
        "num_computed",
        "num_preemptions",
        "output_token_ids",
        "prompt_token_ids",
        "request_id",
        "seq_id",
        "status",
        "stop_token_ids",
        "token_times",
    )

    def __init__(
        self,
        request_id: str,
        seq_id: int,
        prompt_token_ids: list[int],
        max_tokens: int,
        arrival_pass: int,
        arrival_time: float,
        stop_token_ids: frozenset[int] = frozenset(),
    ) -> None:
        self.request_id = request_id
        self.seq_id = seq_id
        self.prompt_token_ids = prompt_token_ids
        self.max_tokens = max_tokens
        self.stop_token_ids = stop_token_ids
        """Sampling one of these ends the request (the token is kept in the output)."""
        self.output_token_ids: list[int] = []
        self.status = RequestStatus.WAITING
        self.num_computed = 0
        self.block_table: list[int] = []
        self.num_preemptions = 0
        self.arrival_pass = arrival_pass
        self.arrival_time = arrival_time
        self.first_token_pass: int | None = None
        self.head_pass: int | None = None
        """Pass at which it last became the head of the queue (for the TTFT bound)."""
        self.first_token_time: float | None = None
        self.finish_pass: int | None = None
        self.finish_time: float | None = None
        self.finish_reason: str | None = None
        self.token_times: list[float] = []

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def is_decoding(self) -> bool:
        """Prefill done and a token sampled: the next pass feeds one token."""
        return bool(self.output_token_ids) and self.num_computed == self.num_tokens - 1

    def tokens(self, start: int, stop: int) -> list[int]:
        n = len(self.prompt_token_ids)
        if stop <= n:
            return self.prompt_token_ids[start:stop]
        return (self.prompt_token_ids + self.output_token_ids)[start:stop]

    def __repr__(self) -> str:
        return (
            f"Request({self.request_id!r}, {self.status.name}, "
            f"prompt={len(self.prompt_token_ids)}, out={len(self.output_token_ids)}/"
            f"{self.max_tokens}, computed={self.num_computed})"
        )
