"""What an engine reports: one ``step()``'s word on a request, and a request's timings."""

from __future__ import annotations

from dataclasses import dataclass

from densegate.impl.sched.request import Request, RequestStatus

__all__ = ["RequestMetrics", "RequestOutput", "metrics_of", "output_of"]


@dataclass(frozen=True, slots=True)
class RequestOutput:
    """What one ``step()`` says about one request."""

    request_id: str
    new_token_ids: list[int]
    status: RequestStatus
    finished: bool
    """True once the request has ended (finished, aborted or rejected)."""
    reason: str | None = None
    output_token_ids: list[int] | None = None
    """All output tokens, given once the request has ended."""


@dataclass(frozen=True, slots=True)
class RequestMetrics:
    """Per-request timings in passes (the scheduler's clock) and seconds (wall clock).

    ``ttft_passes`` counts the pass that produced the first token: a request
    added before pass p and answered in pass p has ``ttft_passes == 1``.
    """

    request_id: str
    status: RequestStatus
    prompt_tokens: int
    output_tokens: int
    arrival_pass: int
    first_token_pass: int | None
    finish_pass: int | None
    ttft_passes: int | None
    ttft_s: float | None
    tpot_s: float | None
    preemptions: int


def output_of(r: Request, new: list[int]) -> RequestOutput:
    """``r``'s output with ``new`` tokens; all of them once it has ended."""
    ended = r.status.ended
    out = list(r.output_token_ids) if ended else None
    return RequestOutput(r.request_id, new, r.status, ended, r.finish_reason, out)


def metrics_of(r: Request) -> RequestMetrics:
    ttft_p = None if r.first_token_pass is None else r.first_token_pass - r.arrival_pass + 1
    ttft_s = None if r.first_token_time is None else r.first_token_time - r.arrival_time
    tpot = None
    n = len(r.output_token_ids)
    if r.finish_time is not None and r.first_token_time is not None and n > 1:
        tpot = (r.finish_time - r.first_token_time) / (n - 1)
    return RequestMetrics(
        r.request_id, r.status, len(r.prompt_token_ids), n, r.arrival_pass,
        r.first_token_pass, r.finish_pass, ttft_p, ttft_s, tpot, r.num_preemptions,
    )  # fmt: skip
