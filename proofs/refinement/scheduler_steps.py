"""R5: the shipped Scheduler's prefill planning (steps 2-3) is the spec's, for any number of
requests.

``Scheduler._plan_prefill`` runs step 2 (owed chunks) and step 3 (FCFS admission) as
``scan`` of one per-request step over a list (``densegate.impl.sched.steps``). R5 proves,
with CrossHair on every path and unbounded ints:

- ``step 2`` / ``step 3 (block size b)``: the shipped step (``Scheduler._owed_step``,
  ``Scheduler._admit_step``, the request's own fields and blocks read as shipped) returns
  the spec's step (``partial_step`` with the machine's ``partial_chunk``; ``admit_step``
  with its ``admission_blocks``) for every request and running totals, leaves the
  scheduler and the request as they were, and where its totals are ``done`` the spec's
  step changes nothing (so stopping the fold early is the same fold); and the spec's step
  leaves the totals alone for a request the shipped list does not hold, so folding the
  shipped list is folding the spec's slots (step 3: one not waiting, proved beside the step;
  step 2: one that owes nothing, which the spec's ``owed`` gives 0, the step's own case
  ``left = 0``, admitted by the precondition's ``c <= P + g``);
- ``glue``: with ``scan`` replaced by a spy and every list an opaque length (any
  length), the planning calls ``scan`` twice, on its own step and on exactly the owed
  list and the queue, from the spec's start totals (``partial_start``, ``admit_start``),
  and builds the plan from the folds' results as the spec does (``observe``).

Taken as given: ``scan`` runs the step on each item in order until the totals are
``done`` (a five-line loop, tested by Hypothesis); the owed list and the queue hold their
requests in arrival order and the owed list is the running requests that do not decode
(step 1's work: each of its turns R6, for any number running; its loop R3 at 2 requests,
R4 on fixed traces; the order ``check_invariants`` at run time).
Block sizes are Python ints in the spec, so step 3 is proved at each of ``BLOCK_SIZES``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import z3

from densegate.impl.sched import scheduler as shipped
from densegate.impl.sched.block_manager import BlockManager
from densegate.impl.sched.config import SchedulerConfig
from densegate.impl.sched.request import Request, RequestStatus
from densegate.impl.sched.scheduler import Scheduler
from densegate.impl.sched.steps import AdmitTotals, PartialTotals, scan
from densegate.proofs.refinement.counted import Counted
from densegate.proofs.refinement.gate import Replay
from densegate.proofs.refinement.step_checks import (
    Val,
    View,
    Views,
    build_checks,
    replay_views,
    snapshot,
)
from densegate.proofs.refinement.symbolic import Classes, NoTracing, guarded
from densegate.spec.scheduler import RUNNING, SchedulerMachine
from densegate.spec.scheduler_request import Req, owed
from densegate.spec.scheduler_scan import AdmitScan, admit_start, admit_step, partial_start

__all__ = [
    "BLOCK_SIZES",
    "PARAMS",
    "R5_CHECKS",
    "R5_CLASSES",
    "SPEC",
    "boot_config",
    "precondition",
    "replay",
]

BLOCK_SIZES = (1, 2, 3, 4, 5, 16)
SPEC = SchedulerMachine(1, 2)
"""The machine whose hooks (``partial_chunk``, ``observe``) the steps are judged by."""
_INTS = (
    "budget", "run", "cap", "P", "g", "c", "seq", "slots", "spare", "planned",
    "T", "S", "B", "nd", "npre", "nowed", "nrun", "nwait", "free",
    "b1", "r1", "k1", "a_slots", "a_budget", "a_spare", "a_planned", "k2",
)  # fmt: skip
_BOOLS = ("stopped", "chunked", "a_stopped")
PARAMS = (*_INTS, *_BOOLS)
_LENGTHS = ("nd", "npre", "nowed", "nrun", "nwait", "free", "k1", "k2")


def precondition(v: Mapping[str, z3.ExprRef]) -> z3.BoolRef:
    """A request as the scheduler holds one (prompt >= 1, computed within its tokens), a
    chunk cap >= 1 and lists of length >= 0; every total and size else any int."""
    return z3.And(
        v["cap"] >= 1, v["P"] >= 1, v["g"] >= 0, v["c"] >= 0, v["c"] <= v["P"] + v["g"],
        v["seq"] >= 0, *[v[k] >= 0 for k in _LENGTHS],
    )  # fmt: skip


R5_CLASSES: Classes = {
    "chunked prefill": lambda v: v["chunked"],
    "unchunked prefill": lambda v: z3.Not(v["chunked"]),
    "admission stopped": lambda v: v["stopped"],
    "admission open": lambda v: z3.Not(v["stopped"]),
}


def boot_config(block_size: int) -> SchedulerConfig:
    """A one-slot config at ``block_size``: the checks set whatever else a step reads."""
    return SchedulerConfig(1, 1, block_size, 1, 1, True, None, 1, 1, False, 4096)


def _scheduler(cls: type, v: Mapping[str, Any], block_size: int) -> Any:
    """A ``cls`` scheduler (or the shipped one over ``cls``'s blocks, for a BlockManager
    mutant) whose chunk cap and chunking are the inputs'."""
    with NoTracing():
        made: Any = cls
        if issubclass(cls, BlockManager):
            sched: Any = Scheduler(boot_config(block_size))
            sched.blocks = made(1, block_size)
        else:
            sched = made(boot_config(block_size))
        sched._cap, sched._chunked = v["cap"], v["chunked"]
        return sched


def _request(v: Mapping[str, Any], status: RequestStatus) -> Request:
    with NoTracing():
        r = Request("r", 0, Counted(v["P"]), 1, 0, 0.0)  # type: ignore[arg-type]
        r.seq_id = v["seq"]
        r.output_token_ids = Counted(v["g"])  # type: ignore[assignment]
        r.num_computed = v["c"] if status is RequestStatus.RUNNING else 0
        r.status = status
        return r


def _owed_views(cls: type, v: Mapping[str, Any], val: Val) -> tuple[View, View]:
    sched = _scheduler(cls, v, 2)
    r = _request(v, RequestStatus.RUNNING)
    acc0 = PartialTotals(v["budget"], v["run"])
    before = snapshot(sched, r)
    acc, n = guarded(lambda: sched._owed_step(acc0, r), v)
    done = acc0.done
    with NoTracing():
        budget, run, cap, P = val(v["budget"]), val(v["run"]), val(v["cap"]), val(v["P"])
        mine = Req(z3.IntVal(RUNNING), val(v["c"]), val(v["g"]), z3.IntVal(0))
        b2, n2 = _partial(budget, owed(mine, P, z3.BoolVal(False)), cap)
        code: View = {"budget": acc.budget, "run": acc.run, "tokens": n, "done": True}
        code["unchanged"] = snapshot(sched, r) == before
        spec: View = {"budget": b2, "run": run + n2, "tokens": n2}
        spec["done"] = z3.Implies(val(done), z3.And(b2 == budget, n2 == 0))
        spec["unchanged"] = True
        return code, spec


def _partial(budget: z3.ArithRef, left: z3.ArithRef, cap: z3.ArithRef) -> tuple[Any, Any]:
    n = SPEC.partial_chunk(left, cap, budget)
    return budget - n, n


def _admit_views(cls: type, v: Mapping[str, Any], val: Val, bs: int) -> tuple[View, View]:
    sched = _scheduler(cls, v, bs)
    r = _request(v, RequestStatus.WAITING)
    acc0 = AdmitTotals(v["slots"], v["budget"], v["spare"], v["planned"], v["stopped"])
    before = snapshot(sched, r)
    acc, n = guarded(lambda: sched._admit_step(acc0, r), v)
    done = acc0.done
    with NoTracing():
        m = SchedulerMachine(1, bs)
        P, g, chunked, cap = val(v["P"]), val(v["g"]), val(v["chunked"]), val(v["cap"])
        false = z3.BoolVal(False)
        slots, budget, spare, planned, stopped = (val(v[k]) for k in AdmitTotals._fields)
        start = AdmitScan(slots, budget, spare, planned, stopped, false, false, false)

        def step(waiting: z3.BoolRef) -> tuple[AdmitScan, z3.BoolRef, z3.ArithRef]:
            return admit_step(
                start, waiting=waiting, total=P + g, need=m.admission_blocks(P, g),
                chunked=chunked, cap=cap, quiet=z3.BoolVal(True),
                allowed=m.admission_allowed(start.planned),
            )  # fmt: skip

        nxt, ok, n2 = step(z3.BoolVal(True))
        idle, idle_ok, _ = step(false)
        keys = ("slots", "budget", "spare", "planned", "stopped")
        code: View = {k: getattr(acc, k) for k in keys}
        spec: View = {k: getattr(nxt, k) for k in keys}
        code["tokens"], spec["tokens"] = n, z3.If(ok, n2, 0)
        stays = [getattr(nxt, k) == getattr(start, k) for k in keys]
        code["done"], spec["done"] = True, z3.Implies(val(done), z3.And(*stays, z3.Not(ok)))
        code["unchanged"], spec["unchanged"] = snapshot(sched, r) == before, True
        rest = [getattr(idle, k) == getattr(start, k) for k in keys]
        code["others skipped"], spec["others skipped"] = True, z3.And(*rest, z3.Not(idle_ok))
        return code, spec


class _Sizes:
    """The two config fields planning reads; any other read raises, failing the check."""

    __slots__ = ("max_num_batched_tokens", "max_num_seqs")

    def __init__(self, tokens: object, seqs: object) -> None:
        self.max_num_batched_tokens, self.max_num_seqs = tokens, seqs


def _items(x: object, owed_list: object, queue: object) -> str:
    return "the owed list" if x is owed_list else "the queue" if x is queue else type(x).__name__


def _glue_views(cls: type, v: Mapping[str, Any], val: Val) -> tuple[View, View]:
    sched = _scheduler(cls, v, 2)
    with NoTracing():
        sched.config = _Sizes(v["T"], v["S"])
        sched._dense = v["B"]
        sched.running, sched.waiting = _Whole(v["nrun"]), _Whole(v["nwait"])
        sched.blocks._free = Counted(v["free"])
        decodes, preempted, owed_list = _Whole(v["nd"]), _Whole(v["npre"]), _Whole(v["nowed"])
        kept = (_Whole(v["k1"]), _Whole(v["k2"]))
        results = [
            (PartialTotals(v["b1"], v["r1"]), kept[0]),
            (AdmitTotals(v["a_slots"], v["a_budget"], v["a_spare"], v["a_planned"], v["a_stopped"]),
             kept[1]),
        ]  # fmt: skip
        calls: list[tuple[Any, Any, Any]] = []

        def spy(step: Any, acc: Any, items: Any) -> Any:
            calls.append((step, acc, items))
            return results[len(calls) - 1] if len(calls) <= 2 else results[1]

        setattr(shipped, "scan", spy)  # noqa: B010 (the spy stands where planning looks)
    try:
        plan = guarded(lambda: sched._plan_prefill(decodes, preempted, owed_list), v)
    finally:
        with NoTracing():
            setattr(shipped, "scan", scan)  # noqa: B010
    with NoTracing():
        code: View = {"folds": len(calls)}
        spec: View = {"folds": 2}
        T, S, nd = val(v["T"]), val(v["S"]), val(v["nd"])
        want = [
            ("step 2", sched._owed_step, "the owed list", PartialTotals,
             (partial_start(T, nd), z3.IntVal(0))),
            ("step 3", sched._admit_step, "the queue", AdmitTotals,
             _fields(admit_start(S - val(v["nrun"]), val(v["b1"]), val(v["free"]), val(v["r1"]),
                                 val(v["npre"]) == 0))),
        ]  # fmt: skip
        for (name, step, items, kind, start), call in zip(want, calls, strict=False):
            code[f"{name} step"] = "own" if call[0] == step else repr(call[0])
            spec[f"{name} step"] = "own"
            code[f"{name} over"] = _items(call[2], owed_list, sched.waiting)
            spec[f"{name} over"] = items
            code[f"{name} totals"] = type(call[1]).__name__
            spec[f"{name} totals"] = kind.__name__
            if type(call[1]) is kind:
                for k, x in zip(kind._fields, start, strict=True):
                    code[f"{name} start {k}"], spec[f"{name} start {k}"] = getattr(call[1], k), x
        lists = {"decodes": decodes, "preempted": preempted, "partials": kept[0],
                 "admits": kept[1]}  # fmt: skip
        for k, x in lists.items():
            code[k], spec[k] = "kept" if getattr(plan, k) is x else "other", "kept"
        w, _ = SPEC.observe({"B": val(v["B"])}, _Planned(val(v["a_planned"]), nd))  # type: ignore[arg-type]
        code["planned"], spec["planned"] = plan.prefill_tokens, val(v["a_planned"])
        code["w"], spec["w"] = plan.waiting_tokens, w
        code["index"], spec["index"] = plan.index, z3.IntVal(sched._pass)
        return code, spec


def _fields(scan: AdmitScan) -> tuple[Any, ...]:
    """The spec's admission totals the shipped ones hold, in their order."""
    return tuple(getattr(scan, k) for k in AdmitTotals._fields)


class _Whole(Counted):
    """A list the planning glue must hand on whole: reading an element fails the check."""

    __slots__ = ()

    def __iter__(self) -> Any:
        raise TypeError("the planning glue read a list's elements (only scan may)")


class _Planned:
    """What the spec's ``observe`` reads of a plan."""

    def __init__(self, planned: z3.ArithRef, d: z3.ArithRef) -> None:
        self.planned, self.d = planned, d


def _admit(bs: int) -> Views:
    return lambda cls, v, val: _admit_views(cls, v, val, bs)


_VIEWS: dict[str, Views] = {"step 2": _owed_views}
_VIEWS.update({f"step 3 (block size {bs})": _admit(bs) for bs in BLOCK_SIZES})
_VIEWS["glue"] = _glue_views
R5_CHECKS = build_checks(_VIEWS, {n: bool if n in _BOOLS else int for n in PARAMS}, precondition)
"""Entry point -> check of a Scheduler-like class (the shipped one or a mutant)."""


def replay(cls: type, via: str, witness: Mapping[str, Any]) -> Replay:
    """Run ``cls`` on the witness concretely and the spec's terms on its constants."""
    return replay_views(_VIEWS, cls, via, witness)
