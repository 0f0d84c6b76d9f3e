"""R6: each request's part of a pass in the shipped Scheduler is the spec's, for every input.

R5 proves steps 2-3 (owed chunks, admission) and the folds that run them. R6 proves the
rest of what ``Scheduler`` does to one request, with CrossHair on every path and
unbounded ints, against the spec's per-request functions (``densegate.spec.
scheduler_request``), the ones ``SchedulerMachine`` builds every pass from:

- ``turn (block size b)``: ``Scheduler._turn`` reads a running request as ``turn`` does
  (whether it decodes, whether that decode needs a block), changing nothing;
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
on as for the first. Taken as given: the loops that hand these steps their requests (step
1's walk over the running list, the commit's and ``update``'s over the batch): R3 (2
requests), R4 (fixed traces to 12) and the lockstep (to 12 slots) tie those.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping
from typing import Any

import z3

from densegate.impl.sched.request import Request, RequestStatus
from densegate.proofs.refinement.counted import Counted
from densegate.proofs.refinement.gate import Replay
from densegate.proofs.refinement.one_request import OnlyRequest, Stops, Tokens
from densegate.proofs.refinement.scheduler_steps import BLOCK_SIZES, boot_config
from densegate.proofs.refinement.step_checks import (
    Pre,
    Val,
    View,
    Views,
    build_checks,
    replay_views,
    snapshot,
)
from densegate.proofs.refinement.symbolic import Classes, NoTracing, guarded
from densegate.proofs.scheduler.life import request_ok
from densegate.spec.scheduler import SchedulerMachine
from densegate.spec.scheduler_request import (
    ABORTED,
    FINISHED,
    RUNNING,
    WAITING,
    Req,
    decodes,
    end_or_join,
    preempt,
    reserve_and_run,
    sample,
    take_block,
    turn,
)

__all__ = ["PARAMS", "R6_ASSUME", "R6_CHECKS", "R6_CLASSES", "SPEC", "precondition", "replay"]

SPEC = SchedulerMachine(1, 2)
_INTS = ("P", "g", "c", "b", "M", "seq", "free", "n", "tok", "index")
_BOOLS = ("stop", "queued", "running", "decode")
PARAMS = (*_INTS, *_BOOLS)
_ST = {
    RequestStatus.WAITING: WAITING,
    RequestStatus.RUNNING: RUNNING,
    RequestStatus.FINISHED: FINISHED,
    RequestStatus.ABORTED: ABORTED,
}
_FIELDS = ("status", "computed", "generated", "blocks", "free")


def precondition(v: Mapping[str, z3.ExprRef]) -> z3.BoolRef:
    """A request as the scheduler holds one (prompt and length >= 1), counts >= 0."""
    return z3.And(v["P"] >= 1, v["M"] >= 1, *[v[k] >= 0 for k in _INTS if k not in ("P", "M")])


def _r(e: Mapping[str, z3.ExprRef], st: int, c: z3.ArithRef | None = None) -> Req:
    return Req(z3.IntVal(st), e["c"] if c is None else c, e["g"], e["b"])


def _well(st: int, bs: int = 2) -> Pre:
    """The request is in state ``st`` and well-formed (S10's ``request_ok``)."""
    return lambda e: z3.And(*request_ok(e["P"], e["M"], _r(e, st), bs))


def _grows(bs: int) -> Pre:
    def pre(e: Mapping[str, z3.ExprRef]) -> z3.BoolRef:
        t = turn(_r(e, RUNNING), e["P"], bs)
        return z3.And(_well(RUNNING, bs)(e), t.grow, e["free"] >= 1)

    return pre


def _owes(e: Mapping[str, z3.ExprRef]) -> z3.BoolRef:
    """A running request with a chunk of ``n`` tokens, at most what it owes."""
    return z3.And(e["n"] >= 1, e["c"] + e["n"] <= e["P"] + e["g"])


def _admissible(bs: int) -> Pre:
    def pre(e: Mapping[str, z3.ExprRef]) -> z3.BoolRef:
        need = SchedulerMachine(1, bs).admission_blocks(e["P"], e["g"])
        return z3.And(_well(WAITING, bs)(e), _owes(e), e["free"] >= need)

    return pre


def _decoding(e: Mapping[str, z3.ExprRef]) -> z3.BoolRef:
    return z3.And(_well(RUNNING)(e), decodes(_r(e, RUNNING), e["P"]))


def _at_end(e: Mapping[str, z3.ExprRef]) -> z3.BoolRef:
    """Running, its chunk just ran to its end, below its length: it samples."""
    return z3.And(e["c"] == e["P"] + e["g"], e["g"] < e["M"])


def _live(e: Mapping[str, z3.ExprRef]) -> z3.BoolRef:
    return z3.If(e["running"], _well(RUNNING)(e), _well(WAITING)(e))


def _undoable(e: Mapping[str, z3.ExprRef]) -> z3.BoolRef:
    return z3.If(e["decode"], _decoding(e), z3.And(_well(RUNNING)(e), _owes(e)))


def _setup(cls: type, v: Mapping[str, Any], bs: int, st: RequestStatus) -> tuple[Any, Request]:
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


def _len(x: Any) -> Any:
    """A list's length read natively (``len`` of a symbolic length needs tracing)."""
    return x.n if isinstance(x, Counted) else len(x)


def _code(sched: Any, r: Request) -> View:
    got = (_ST[r.status], r.num_computed, _len(r.output_token_ids), _len(r.block_table),
           _len(sched.blocks._free))  # fmt: skip
    return dict(zip(_FIELDS, got, strict=True))


def _spec(r: Req, free: z3.ArithRef) -> View:
    return dict(zip(_FIELDS, (r.st, r.c, r.g, r.b, free), strict=True))


def _mine(v: Mapping[str, Any], val: Val, st: int) -> Req:
    return Req(z3.IntVal(st), val(v["c"]), val(v["g"]), val(v["b"]))


def _turn_views(cls: type, v: Mapping[str, Any], val: Val, bs: int) -> tuple[View, View]:
    sched, r = _setup(cls, v, bs, RequestStatus.RUNNING)
    before = snapshot(sched, sched.blocks, r)
    dec, grow = guarded(lambda: sched._turn(r), v)
    with NoTracing():
        t = turn(_mine(v, val, RUNNING), val(v["P"]), bs)
        code: View = {"decodes": dec, "needs a block": grow}
        code["unchanged"] = snapshot(sched, sched.blocks, r) == before
        return code, {"decodes": t.dec, "needs a block": t.grow, "unchanged": True}


def _take_views(cls: type, v: Mapping[str, Any], val: Val, bs: int) -> tuple[View, View]:
    sched, r = _setup(cls, v, bs, RequestStatus.RUNNING)
    guarded(lambda: sched._take_block(r), v)
    with NoTracing():
        mine = _mine(v, val, RUNNING)
        r2, free, _ = take_block(mine, val(v["free"]), turn(mine, val(v["P"]), bs))
        return _code(sched, r), _spec(r2, free)


def _preempt_views(cls: type, v: Mapping[str, Any], val: Val) -> tuple[View, View]:
    sched, r = _setup(cls, v, 2, RequestStatus.RUNNING)
    queued = bool(v["queued"])
    with NoTracing():
        other = Request("o", 1, [1], 1, 0, 0.0)
        other.head_pass = 0
        sched.running = [r]
        sched.waiting = collections.deque([other] if queued else [])
    guarded(lambda: sched._preempt(r), v)
    with NoTracing():
        mine = _mine(v, val, RUNNING)
        r2, free = preempt(mine, val(v["free"]), z3.BoolVal(True), SPEC.preempt_frees)
        code, spec = _code(sched, r), _spec(r2, free)
        code["queue"] = "front" if sched.waiting and sched.waiting[0] is r else "elsewhere"
        code["running list"] = "without it" if r not in sched.running else "with it"
        code["queued tokens"], spec["queued tokens"] = sched._queued_tokens, val(v["P"]) + r2.g
        moved = r.head_pass == sched._pass and (not queued or other.head_pass is None)
        code["head"] = "restamped" if moved else "stale"
        spec.update({"queue": "front", "running list": "without it", "head": "restamped"})
        return code, spec


def _chunk_views(
    code: View, spec: View, chunk: Any, r2: Req, P: z3.ArithRef, start: object, fed: object
) -> None:
    code.update({"samples": chunk.sample, "start": chunk.start, "fed": _len(chunk.token_ids)})
    spec.update({"samples": r2.c == P + r2.g, "start": start, "fed": fed})


def _admit_views(cls: type, v: Mapping[str, Any], val: Val, bs: int) -> tuple[View, View]:
    sched, r = _setup(cls, v, bs, RequestStatus.WAITING)
    queued, tokens = bool(v["queued"]), v["P"] + v["g"]
    with NoTracing():
        other = Request("o", 1, [1], 1, 0, 0.0)
        sched.waiting = collections.deque([r, other] if queued else [r])
        sched._queued_tokens = tokens
    chunk = guarded(lambda: sched._admit_chunk(r, v["n"]), v)
    with NoTracing():
        P, g, n = val(v["P"]), val(v["g"]), val(v["n"])
        need = SchedulerMachine(1, bs).admission_blocks(P, g)
        mine = _mine(v, val, WAITING)
        t = z3.BoolVal(True)
        r2, free = reserve_and_run(
            mine, val(v["free"]), fire=t, chunk=n, admit=t, need=need, dec=z3.BoolVal(False)
        )
        code, spec = _code(sched, r), _spec(r2, free)
        _chunk_views(code, spec, chunk, r2, P, z3.IntVal(0), n)
        code["queue"] = "popped" if list(sched.waiting) == ([other] if queued else []) else "not"
        code["running list"] = "appended" if sched.running == [r] else "other"
        code["queued tokens"], spec["queued tokens"] = sched._queued_tokens, z3.IntVal(0)
        spec.update({"queue": "popped", "running list": "appended"})
        return code, spec


def _prefill_views(cls: type, v: Mapping[str, Any], val: Val) -> tuple[View, View]:
    sched, r = _setup(cls, v, 2, RequestStatus.RUNNING)
    chunk = guarded(lambda: sched._prefill_chunk(r, v["n"]), v)
    with NoTracing():
        mine, P, n, f = _mine(v, val, RUNNING), val(v["P"]), val(v["n"]), z3.BoolVal(False)
        r2, free = reserve_and_run(
            mine, val(v["free"]), fire=z3.BoolVal(True), chunk=n, admit=f, need=z3.IntVal(0),
            dec=f,
        )  # fmt: skip
        code, spec = _code(sched, r), _spec(r2, free)
        _chunk_views(code, spec, chunk, r2, P, mine.c, n)
        return code, spec


def _decode_views(cls: type, v: Mapping[str, Any], val: Val) -> tuple[View, View]:
    sched, r = _setup(cls, v, 2, RequestStatus.RUNNING)
    chunk = guarded(lambda: sched._decode_chunk(r), v)
    with NoTracing():
        mine, P, f = _mine(v, val, RUNNING), val(v["P"]), z3.BoolVal(False)
        r2, free = reserve_and_run(
            mine, val(v["free"]), fire=f, chunk=z3.IntVal(0), admit=f, need=z3.IntVal(0),
            dec=decodes(mine, P),
        )  # fmt: skip
        code, spec = _code(sched, r), _spec(r2, free)
        _chunk_views(code, spec, chunk, r2, P, mine.c, z3.IntVal(1))
        code["prefill"], spec["prefill"] = chunk.is_prefill, z3.BoolVal(False)
        return code, spec


def _sample_views(cls: type, v: Mapping[str, Any], val: Val) -> tuple[View, View]:
    sched, r = _setup(cls, v, 2, RequestStatus.RUNNING)
    done = guarded(lambda: sched._sample(r, v["tok"], v["index"], 0.0), v)
    with NoTracing():
        mine, P, M, stop = _mine(v, val, RUNNING), val(v["P"]), val(v["M"]), val(v["stop"])
        most = z3.If(stop, mine.g + 1, M)
        r2, free = sample(mine, val(v["free"]), scheduled=z3.BoolVal(True), prompt=P, most=most)
        code, spec = _code(sched, r), _spec(r2, free)
        code["finished"], spec["finished"] = done, r2.st == FINISHED
        code["indexed"], spec["indexed"] = sched._by_seq.req is not None, r2.st != FINISHED
        return code, spec


def _abort_views(cls: type, v: Mapping[str, Any], val: Val) -> tuple[View, View]:
    running = bool(v["running"])
    st = RequestStatus.RUNNING if running else RequestStatus.WAITING
    sched, r = _setup(cls, v, 2, st)
    tokens = v["P"] + v["g"]
    with NoTracing():
        if running:
            sched.running = [r]
        else:
            sched.waiting = collections.deque([r])
            sched._queued_tokens = tokens
    guarded(lambda: sched.abort(r), v)
    with NoTracing():
        mine = _mine(v, val, RUNNING if running else WAITING)
        f = z3.BoolVal(False)
        r2, free = end_or_join(mine, val(v["free"]), abort=z3.BoolVal(True), arrive=f)
        code, spec = _code(sched, r), _spec(r2, free)
        off = r not in sched.running and r not in sched.waiting
        code["lists"], spec["lists"] = "without it" if off else "with it", "without it"
        code["queued tokens"], spec["queued tokens"] = sched._queued_tokens, z3.IntVal(0)
        code["indexed"], spec["indexed"] = sched._by_seq.req is not None, f
        return code, spec


def _undo_views(cls: type, v: Mapping[str, Any], val: Val) -> tuple[View, View]:
    sched, r = _setup(cls, v, 2, RequestStatus.RUNNING)
    if v["decode"]:
        chunk = guarded(lambda: sched._decode_chunk(r), v)
    else:
        chunk = guarded(lambda: sched._prefill_chunk(r, v["n"]), v)
    guarded(lambda: sched._undo_chunk(chunk), v)
    with NoTracing():
        return _code(sched, r), _spec(_mine(v, val, RUNNING), val(v["free"]))


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
    ("turn", _turn_views, None),
    ("take block", _take_views, _grows),
    ("admission", _admit_views, _admissible),
):
    _v, _a = _per_block(_name, _views, _pre)
    _VIEWS.update(_v)
    R6_ASSUME.update(_a)
_VIEWS.update(
    {"preempt": _preempt_views, "prefill chunk": _prefill_views, "decode chunk": _decode_views,
     "sample": _sample_views, "abort": _abort_views, "undo": _undo_views}
)  # fmt: skip
R6_ASSUME.update(
    {"preempt": _well(RUNNING), "prefill chunk": lambda e: z3.And(_well(RUNNING)(e), _owes(e)),
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
