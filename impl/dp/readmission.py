"""A dead rank's requests, handed to the survivors: which, to whom, and from which token.

Every survivor holds the same routing table and, from the agreement
(``densegate.impl.dp.membership``), the same sealed streams of the dead ranks,
so each computes the same hand-over alone; no extra collective is needed.

* A request the dead rank streamed as ended (finished, rejected, aborted) ended
  there: the caller saw it end, and it is counted once, for the dead rank.
* Every other request the router had sent to a dead rank is an *orphan*. Orphans
  are routed again, in arrival order, by the run's own router rule over the
  survivors (least-loaded starts from the loads of the last agreed tick), and
  re-admitted by recompute, as a preempted request is: the survivor prefills the
  prompt followed by the tokens the caller already saw, and streams only the
  tokens after them. So the caller sees each output position exactly once, and
  with greedy sampling the request's whole output is what one rank would give.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from densegate.impl.dp.membership import read_stream
from densegate.impl.dp.router import Router
from densegate.impl.engine import RequestOutput

__all__ = ["Handover", "StreamView", "hand_over", "stream_record"]


def stream_record(tick: int, outputs: Iterable[RequestOutput]) -> bytes | None:
    """One tick's line of a rank's stream: new tokens and ended requests (None if nothing)."""
    tokens: dict[str, list[int]] = {}
    ended: dict[str, str] = {}
    for out in outputs:
        if out.new_token_ids:
            tokens.setdefault(out.request_id, []).extend(out.new_token_ids)
        if out.finished:
            ended[out.request_id] = out.status.name
    if not tokens and not ended:
        return None
    return (json.dumps({"t": tick, "tok": tokens, "end": ended}) + "\n").encode()


@dataclass
class StreamView:
    """What the caller saw from some ranks' streams, request by request."""

    tokens: dict[str, list[int]] = field(default_factory=dict)
    ended: dict[str, tuple[int, str]] = field(default_factory=dict)
    """Request -> (rank whose stream ended it, status)."""

    def add(self, rank: int, raw: bytes) -> None:
        for rec in read_stream(raw):
            for rid, toks in rec["tok"].items():
                self.tokens.setdefault(rid, []).extend(int(t) for t in toks)
            for rid, status in rec["end"].items():
                self.ended[rid] = (rank, str(status))


@dataclass(frozen=True)
class Handover:
    """What every survivor does about one agreement's dead ranks."""

    ended_on_dead: dict[str, tuple[int, str]]
    targets: dict[str, tuple[int, int]]
    """Orphan -> (dead rank it was on, survivor it moves to), in arrival order."""
    router: Router
    """The router over the survivors, to keep routing later arrivals with."""


def hand_over(
    assignment: Mapping[str, int],
    dead: Sequence[int],
    members: Sequence[int],
    view: StreamView,
    router_kind: str,
    loads: Sequence[int],
    cost: Mapping[str, int],
) -> Handover:
    """Route the dead ranks' unended requests over ``members`` (``loads`` in member order).

    ``view`` holds every stream sealed so far (earlier deaths included), so an
    orphan re-admitted once and orphaned again resumes after every token seen.
    """
    router = Router(router_kind, len(members))
    router.observe(loads)
    gone = set(dead)
    ended = {rid: e for rid, e in view.ended.items() if e[0] in gone}
    targets: dict[str, tuple[int, int]] = {}
    for rid in sorted(assignment, key=int):
        src = assignment[rid]
        if src in gone and rid not in view.ended:
            seen = len(view.tokens.get(rid, ()))
            targets[rid] = (src, members[router.route(cost[rid] + seen)])
    return Handover(ended, targets, router)
