"""R6: each request's part of a pass in the shipped Scheduler is the spec's, for every input.

R5 proves steps 2-3 (owed chunks, admission) and the folds that run them. R6 proves the
rest of what ``Scheduler`` does to one request, with CrossHair on every path and
unbounded ints, against the spec's per-request functions (``densegate.spec.
scheduler_request``), the ones ``SchedulerMachine`` builds every pass from:

- ``turn (block size b)``: ``Scheduler._turn`` reads a running request as ``turn`` does
  (whether it decodes, whether that decode needs a block), changing nothing;
- ``walk turn (block size b)``: one turn of step 1's walk (``_walk_turn``, on a running
  list of any length that holds the turn's request at its index and the newest at its end,
  and lets nothing else be read) is a step of S11's ``DecodeScan`` (free blocks, decodes,
  owed, preempted, its blocks, still running), its victim the newest (S12's pick), the
  next turn the next request; and a scan step for a request not running changes nothing;
- ``take block (block size b)``: ``_take_block`` on a decode that needs a block is
  ``take_block`` (one block more, one free block less), for every well-formed request;
- ``preempt``: ``_preempt`` is ``preempt`` for the victim (waiting, nothing computed, its
  blocks returned) and puts it at the queue's front, where arrival order has it;
- ``admission (block size b)``: ``_admit_chunk`` is ``reserve_and_run`` for an admitted
  request (running, ``admission_blocks`` reserved, first chunk computed) and it leaves the
  queue's head for the running list; its chunk samples exactly when the spec's ``sample``
  does (the request reached its end);
- ``prefill chunk`` / ``decode chunk``: ``_prefill_chunk`` and ``_decode_chunk`` are
  ``reserve_and_run`` for a partial prefill and a decode, their chunks sampling as above;
- ``sample``: ``_sample`` is ``sample`` (one token more; at ``max_tokens`` finished, its
  blocks returned); a stop token ends it as reaching its length would (the spec has no
  stop tokens: it is ``sample`` with ``most`` = the tokens it then has);
- ``abort``: ``abort`` of a waiting or running request is ``end_or_join``'s abort (ended,
  its blocks returned), and takes it off its list;
- ``undo``: ``_undo_chunk`` after either chunk leaves the request as it was before it.

Each holds for every request, by its own numbers and its seq id, so from the 7th request
on as for the first, and for any number running. Taken as given: the loops that hand these
steps their requests (``_plan_decodes``' loop over the walk's turns, the commit's
and ``update``'s over the batch) and the running list's arrival order: R3 (2 requests), R4
(fixed traces to 12), the lockstep (to 12 slots) and ``check_invariants`` tie those.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping
from typing import Any

import z3

from densegate.impl.sched.request import Request, RequestStatus
from densegate.proofs.refinement.gate import Replay
from densegate.proofs.refinement.one_request import (
    SPEC,
    code_view,
    length,
    req_of,
    setup,
    spec_view,
    terms,
    well,
)
from densegate.proofs.refinement.scheduler_steps import BLOCK_SIZES
from densegate.proofs.refinement.step_checks import (
    Pre,
    Val,
    View,
    Views,
    build_checks,
    replay_views,
)
from densegate.proofs.refinement.symbolic import Classes, NoTracing, guarded
from densegate.proofs.refinement.walk_views import (
    grows,
    preempt_views,
    take_views,
    turn_views,
    walk_views,
    walks,
)
from densegate.spec.scheduler import SchedulerMachine
from densegate.spec.scheduler_request import (
    FINISHED,
    RUNNING,
    WAITING,
    Req,
    decodes,
    end_or_join,
    reserve_and_run,
    sample,
)

__all__ = ["PARAMS", "R6_ASSUME", "R6_CHECKS", "R6_CLASSES", "SPEC", "precondition", "replay"]

_INTS = (
    "P",
    "g",
    "c",
    "b",
    "M",
    "seq",
    "free",
    "n",
    "tok",
    "index",
    "i",
    "Pv",
    "gv",
    "cv",
    "bv",
    "Mv",
)
_BOOLS = ("stop", "queued", "running", "decode")
PARAMS = (*_INTS, *_BOOLS)


def precondition(v: Mapping[str, z3.ExprRef]) -> z3.BoolRef:
    """A request as the scheduler holds one (prompt and length >= 1), counts >= 0."""
    ones = ("P", "M", "Pv", "Mv")
    return z3.And(*[v[k] >= 1 for k in ones], *[v[k] >= 0 for k in _INTS if k not in ones])


def _owes(e: Mapping[str, z3.ExprRef]) -> z3.BoolRef:
    """A running request with a chunk of ``n`` tokens, at most what it owes."""
    return z3.And(e["n"] >= 1, e["c"] + e["n"] <= e["P"] + e["g"])


def _admissible(bs: int) -> Pre:
    def pre(e: Mapping[str, z3.ExprRef]) -> z3.BoolRef:
        need = SchedulerMachine(1, bs).admission_blocks(e["P"], e["g"])
        return z3.And(well(WAITING, bs)(e), _owes(e), e["free"] >= need)

    return pre


def _decoding(e: Mapping[str, z3.ExprRef]) -> z3.BoolRef:
    return z3.And(well(RUNNING)(e), decodes(req_of(e, RUNNING), e["P"]))


def _at_end(e: Mapping[str, z3.ExprRef]) -> z3.BoolRef:
    """Running, its chunk just ran to its end, below its length: it samples."""
    return z3.And(e["c"] == e["P"] + e["g"], e["g"] < e["M"])


def _live(e: Mapping[str, z3.ExprRef]) -> z3.BoolRef:
    return z3.If(e["running"], well(RUNNING)(e), well(WAITING)(e))


def _undoable(e: Mapping[str, z3.ExprRef]) -> z3.BoolRef:
    return z3.If(e["decode"], _decoding(e), z3.And(well(RUNNING)(e), _owes(e)))


def _chunk_views(
    code: View, spec: View, chunk: Any, r2: Req, P: z3.ArithRef, start: object, fed: object
) -> None:
    code.update({"samples": chunk.sample, "start": chunk.start, "fed": length(chunk.token_ids)})
    spec.update({"samples": r2.c == P + r2.g, "start": start, "fed": fed})


def _admit_views(cls: type, v: Mapping[str, Any], val: Val, bs: int) -> tuple[View, View]:
    sched, r = setup(cls, v, bs, RequestStatus.WAITING)
    queued, tokens = bool(v["queued"]), v["P"] + v["g"]
    with NoTracing():
        other = Request("o", 1, [1], 1, 0, 0.0)
        sched.waiting = collections.deque([r, other] if queued else [r])
        sched._queued_tokens = tokens
    chunk = guarded(lambda: sched._admit_chunk(r, v["n"]), v)
    with NoTracing():
        P, g, n = val(v["P"]), val(v["g"]), val(v["n"])
        need = SchedulerMachine(1, bs).admission_blocks(P, g)
        mine = terms(v, val, WAITING)
        t = z3.BoolVal(True)
        r2, free = reserve_and_run(
            mine, val(v["free"]), fire=t, chunk=n, admit=t, need=need, dec=z3.BoolVal(False)
        )
        code, spec = code_view(sched, r), spec_view(r2, free)
        _chunk_views(code, spec, chunk, r2, P, z3.IntVal(0), n)
        code["queue"] = "popped" if list(sched.waiting) == ([other] if queued else []) else "not"
        code["running list"] = "appended" if sched.running == [r] else "other"
        code["queued tokens"], spec["queued tokens"] = sched._queued_tokens, z3.IntVal(0)
        spec.update({"queue": "popped", "running list": "appended"})
        return code, spec


def _prefill_views(cls: type, v: Mapping[str, Any], val: Val) -> tuple[View, View]:
    sched, r = setup(cls, v, 2, RequestStatus.RUNNING)
    chunk = guarded(lambda: sched._prefill_chunk(r, v["n"]), v)
    with NoTracing():
        mine, P, n, f = terms(v, val, RUNNING), val(v["P"]), val(v["n"]), z3.BoolVal(False)
        r2, free = reserve_and_run(
            mine, val(v["free"]), fire=z3.BoolVal(True), chunk=n, admit=f, need=z3.IntVal(0),
            dec=f,
        )  # fmt: skip
        code, spec = code_view(sched, r), spec_view(r2, free)
        _chunk_views(code, spec, chunk, r2, P, mine.c, n)
        return code, spec


def _decode_views(cls: type, v: Mapping[str, Any], val: Val) -> tuple[View, View]:
    sched, r = setup(cls, v, 2, RequestStatus.RUNNING)
    chunk = guarded(lambda: sched._decode_chunk(r), v)
    with NoTracing():
        mine, P, f = terms(v, val, RUNNING), val(v["P"]), z3.BoolVal(False)
        r2, free = reserve_and_run(
            mine, val(v["free"]), fire=f, chunk=z3.IntVal(0), admit=f, need=z3.IntVal(0),
            dec=decodes(mine, P),
        )  # fmt: skip
        code, spec = code_view(sched, r), spec_view(r2, free)
        _chunk_views(code, spec, chunk, r2, P, mine.c, z3.IntVal(1))
        code["prefill"], spec["prefill"] = chunk.is_prefill, z3.BoolVal(False)
        return code, spec


def _sample_views(cls: type, v: Mapping[str, Any], val: Val) -> tuple[View, View]:
    sched, r = setup(cls, v, 2, RequestStatus.RUNNING)
    done = guarded(lambda: sched._sample(r, v["tok"], v["index"], 0.0), v)
    with NoTracing():
        mine, P, M, stop = terms(v, val, RUNNING), val(v["P"]), val(v["M"]), val(v["stop"])
        most = z3.If(stop, mine.g + 1, M)
        r2, free = sample(mine, val(v["free"]), scheduled=z3.BoolVal(True), prompt=P, most=most)
        code, spec = code_view(sched, r), spec_view(r2, free)
        code["finished"], spec["finished"] = done, r2.st == FINISHED
        code["indexed"], spec["indexed"] = sched._by_seq.req is not None, r2.st != FINISHED
        return code, spec


def _abort_views(cls: type, v: Mapping[str, Any], val: Val) -> tuple[View, View]:
    running = bool(v["running"])
    st = RequestStatus.RUNNING if running else RequestStatus.WAITING
    sched, r = setup(cls, v, 2, st)
    tokens = v["P"] + v["g"]
    with NoTracing():
        if running:
            sched.running = [r]
        else:
            sched.waiting = collections.deque([r])
            sched._queued_tokens = tokens
    guarded(lambda: sched.abort(r), v)
    with NoTracing():
        mine = terms(v, val, RUNNING if running else WAITING)
        f = z3.BoolVal(False)
        r2, free = end_or_join(mine, val(v["free"]), abort=z3.BoolVal(True), arrive=f)
        code, spec = code_view(sched, r), spec_view(r2, free)
        off = r not in sched.running and r not in sched.waiting
        code["lists"], spec["lists"] = "without it" if off else "with it", "without it"
        code["queued tokens"], spec["queued tokens"] = sched._queued_tokens, z3.IntVal(0)
        code["indexed"], spec["indexed"] = sched._by_seq.req is not None, f
        return code, spec


def _undo_views(cls: type, v: Mapping[str, Any], val: Val) -> tuple[View, View]:
    sched, r = setup(cls, v, 2, RequestStatus.RUNNING)
    if v["decode"]:
        chunk = guarded(lambda: sched._decode_chunk(r), v)
    else:
        chunk = guarded(lambda: sched._prefill_chunk(r, v["n"]), v)
    guarded(lambda: sched._undo_chunk(chunk), v)
    with NoTracing():
        return code_view(sched, r), spec_view(terms(v, val, RUNNING), val(v["free"]))


def _at(views: Any, bs: int) -> Views:
    return lambda cls, v, val: views(cls, v, val, bs)


def _per_block(name: str, views: Any, pre: Any) -> tuple[dict[str, Views], dict[str, Pre]]:
    out: dict[str, Views] = {}
    assume: dict[str, Pre] = {}
    for bs in BLOCK_SIZES:
        key = f"{name} (block size {bs})"
        out[key] = _at(views, bs)
        if pre is not None:
            assume[key] = pre(bs)
    return out, assume


_VIEWS: dict[str, Views] = {}
R6_ASSUME: dict[str, Pre] = {}
"""Entry -> what its request is (beside ``precondition``): its state, and what the step
is handed (a decode that needs a block, a chunk within what it owes, ...)."""
for _name, _views, _pre in (
    ("turn", turn_views, None),
    ("take block", take_views, grows),
    ("walk turn", walk_views, walks),
    ("admission", _admit_views, _admissible),
):
    _v, _a = _per_block(_name, _views, _pre)
    _VIEWS.update(_v)
    R6_ASSUME.update(_a)
_VIEWS.update(
    {"preempt": preempt_views, "prefill chunk": _prefill_views, "decode chunk": _decode_views,
     "sample": _sample_views, "abort": _abort_views, "undo": _undo_views}
)  # fmt: skip
R6_ASSUME.update(
    {"preempt": well(RUNNING), "prefill chunk": lambda e: z3.And(well(RUNNING)(e), _owes(e)),
     "decode chunk": _decoding, "sample": _at_end, "abort": _live, "undo": _undoable}
)  # fmt: skip
R6_CHECKS = build_checks(
    _VIEWS, {n: bool if n in _BOOLS else int for n in PARAMS}, precondition, R6_ASSUME
)
"""Entry point -> check of a Scheduler-like class (the shipped one or a mutant)."""

R6_CLASSES: Classes = {
    "one of the first 6 requests": lambda v: v["seq"] < 6,
    "the 7th request on": lambda v: v["seq"] >= 6,
}


def replay(cls: type, via: str, witness: Mapping[str, Any]) -> Replay:
    """Run ``cls`` on the witness concretely and the spec's terms on its constants."""
    return replay_views(_VIEWS, cls, via, witness)
