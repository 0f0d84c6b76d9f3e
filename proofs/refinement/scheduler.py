"""R3: the shipped ``Scheduler`` plans a pass as ``densegate.spec.scheduler`` does.

The abstraction is the spec's own: request slot ``i`` is the ``i``-th request;
``st``/``c``/``g``/``b`` are its status, ``num_computed``, output length and
block count, ``free`` the free blocks, ``P``/``M`` its prompt length and
``max_tokens``. From every configuration the spec admits and every state its
invariant allows (``invariant_of``: S8 proves it inductive for 3 requests; a run
of fewer is one where the rest never arrive), a Scheduler built from that state
plans one pass (``plan``, then ``observe``, both as shipped) and shows the gate
the spec's ``(w, d) = (min(planned prefill, B), decodes)``; it also decodes, preempts, chunks and
admits exactly the slots the spec's plan does, and leaves the spec's block
counts, ``num_computed`` and free blocks after step 1. Ints are unbounded.

Bounded: ``SLOTS`` requests and block size ``BLOCK_SIZE`` (the spec fixes both
per machine; 67 paths for two requests, 480 for three, with ``min`` as one term:
``densegate.proofs.refinement.branchless``).
Arrivals and aborts (step 0) are not executed: the state is the one after them,
which the invariant covers too. Taken as given: lists are their lengths
(``Counted``), since CrossHair walks a list of symbolic length element by element
and never finishes; planning reads nothing else of them, and any other use would
raise and fail the check. The config is built without its validating constructor
and the Scheduler natively from a concrete one, then given the state's config and
what its constructor derives from it; the ``inputs`` check runs both constructors
symbolically and proves they leave exactly that, so the plan check's paths do not
fork on chunking before planning does.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Mapping
from typing import Any

import z3
from crosshair.libimpl.builtinslib import SymbolicBool

from densegate.impl.sched.config import SchedulerConfig
from densegate.impl.sched.request import Request, RequestStatus
from densegate.impl.sched.scheduler import Scheduler
from densegate.proofs.refinement.counted import Counted
from densegate.proofs.refinement.mutate import CodeMutant
from densegate.proofs.refinement.symbolic import (
    Classes,
    NoTracing,
    admit,
    fail,
    guarded,
    holds,
    keyword_signature,
    pinned,
    reached,
    sample,
    term,
)
from densegate.proofs.scheduler.per_slot import invariant_of
from densegate.spec.properties import statement
from densegate.spec.scheduler import RUNNING, WAITING, SchedulerMachine

__all__ = [
    "BLOCK_SIZE",
    "R3_CHECKS",
    "R3_CLASSES",
    "R3_MUTANTS",
    "R3_PRECONDITION",
    "SLOTS",
    "STATEMENT",
    "code_view",
    "config_for",
    "constant",
    "spec_vars",
    "spec_view",
]

SLOTS = 2
BLOCK_SIZE = 2
SPEC = SchedulerMachine(SLOTS, BLOCK_SIZE)
_INVARIANT = invariant_of(SPEC)
PARAMS = ("S", "T", "N", "L", "cap", "B", "K", "chunked", "enabled")
_BOOLS = ("chunked", "enabled")


_CONFIG_FIELDS = (
    "max_num_seqs", "max_num_batched_tokens", "block_size", "num_blocks", "max_model_len",
    "enable_chunked_prefill", "long_prefill_token_threshold", "dense_tokens",
    "max_hold_passes", "gate_enabled", "pass_log_size",
)  # fmt: skip


def config_for(v: Mapping[str, Any], validated: bool) -> SchedulerConfig:
    """The scheduler's config for parameters ``v``; ``validated`` runs its constructor.

    Unvalidated, the chunk cap is ``cap`` whether or not chunking is on (no branch):
    ``chunk_cap`` ignores it when chunking is off, and the inputs check reads it."""
    chunked = v["chunked"]
    values: tuple[Any, ...] = (
        v["S"], v["T"], BLOCK_SIZE, v["N"], v["L"], chunked,
        (v["cap"] if chunked else None) if validated else v["cap"], v["B"], v["K"], v["enabled"],
        4096,
    )  # fmt: skip
    if validated:
        return SchedulerConfig(*values)
    with NoTracing():
        config: Any = object.__new__(SchedulerConfig)
        for name, value in zip(_CONFIG_FIELDS, values, strict=True):
            object.__setattr__(config, name, value)
        return config  # type: ignore[no-any-return]


class _NoGate:
    """Planning never asks the gate; the check does not build one (its config is R1's)."""


_BOOT = SchedulerConfig(1, 1, BLOCK_SIZE, 1, 1, True, None, 1, 1, False, 4096)
"""The concrete config a check's Scheduler is constructed with, natively (one block: the
constructor lists num_blocks block ids); the check then gives it the state's config,
blocks and what the constructor derives from the config (``_DERIVED``)."""
_DERIVED = ("_dense", "_cap", "_chunked")
_KEYS = [tuple(f"{k}{i}" for k in ("st", "c", "g", "b", "P", "M")) for i in range(SLOTS)]


def derived(v: Mapping[str, Any]) -> tuple[Any, ...]:
    """``_DERIVED`` as the spec reads the parameters: dense_tokens B, chunk cap, chunking."""
    return (v["B"], v["cap"], v["chunked"])


def build(cls: type, v: Mapping[str, Any]) -> tuple[Any, list[Request]]:
    """A ``cls`` scheduler in the abstract state ``v``; one Request a slot, the waiting ones
    queued by ``add``. Constructed natively from ``_BOOT``; the inputs check proves the
    constructor, given the state's config, leaves the same (``constructed``)."""
    with NoTracing():
        sched = cls(_BOOT, _NoGate())
        sched.config = config_for(v, False)
        for name, value in zip(_DERIVED, derived(v), strict=True):
            setattr(sched, name, value)
        sched.blocks.num_blocks = v["N"]
        sched.blocks._free = Counted(v["free"])
        reqs, where = [], []
        for i, (st, c, g, b, P, M) in enumerate(_KEYS):
            r = Request(str(i), i, Counted(v[P]), v[M], 0, 0.0)  # type: ignore[arg-type]
            r.output_token_ids = Counted(v[g])  # type: ignore[assignment]
            r.num_computed = v[c]
            reqs.append(r)
            where.append((term(v[st]) == RUNNING, term(v[st]) == WAITING, Counted(v[b])))
    for r, (running, waiting, table) in zip(reqs, where, strict=True):
        if holds(running):
            with NoTracing():
                r.status = RequestStatus.RUNNING
                r.block_table = table  # type: ignore[assignment]
                sched.running.append(r)
        elif holds(waiting):
            sched.add(r)
    return sched, reqs


def constructed(sched: Any) -> dict[str, Any]:
    """What ``build`` takes from its native construction: all the constructor leaves but
    the config, the gate and ``_DERIVED`` (the blocks as their fields)."""
    with NoTracing():
        out = {k: x for k, x in vars(sched).items() if k not in ("config", "gate", *_DERIVED)}
        bm = sched.blocks
        out["blocks"] = (bm.num_blocks, bm.block_size, list(bm._free))
        out["pass_log"] = (list(sched.pass_log), sched.pass_log.maxlen)
        return out


Terms = dict[str, z3.ExprRef]
_NO_EVENTS = {f"{k}{i}": z3.BoolVal(False) for k in ("arrive", "abort") for i in range(SLOTS)}
_SLOT = ("st", "c", "g", "b")


def spec_vars(
    v: Mapping[str, Any], term: Callable[[Any], z3.ExprRef] = term
) -> tuple[Terms, Terms]:
    """The spec's parameters and state for the check's arguments (``term`` reads one)."""
    p = {k: term(v[k]) for k in PARAMS}
    p.update({f"{k}{i}": term(v[f"{k}{i}"]) for k in ("P", "M") for i in range(SLOTS)})
    s: Terms = {"h": z3.IntVal(0), "free": term(v["free"])}
    s.update({f"{k}{i}": term(v[f"{k}{i}"]) for k in _SLOT for i in range(SLOTS)})
    return p, s


def constant(x: object) -> z3.ExprRef:
    return z3.BoolVal(x) if isinstance(x, bool) else z3.IntVal(x)


_SPEC: dict[tuple[int, ...], tuple[Terms, Terms, z3.BoolRef, dict[str, z3.ExprRef]]] = {}


def _spec(v: Mapping[str, Any]) -> tuple[z3.BoolRef, dict[str, z3.ExprRef]]:
    """The spec's parameter constraints and invariant, and its view of the plan, over the
    check's symbols: built once, then found by the symbols' terms (the same on every path)."""
    with NoTracing():
        p, s = spec_vars(v)
        key = tuple(t.get_id() for t in (*p.values(), *s.values()))
        if key not in _SPEC:
            _SPEC[key] = (p, s, z3.And(SPEC.param_ok(p), _INVARIANT(p, s)), spec_view(p, s))
        return _SPEC[key][2:]


def _precondition(env: Mapping[str, z3.ExprRef]) -> z3.BoolRef:
    """The checks' precondition as one formula over their arguments' terms."""
    p, s = spec_vars(env, term=lambda x: x)
    return z3.And(SPEC.param_ok(p), _INVARIANT(p, s))


R3_PRECONDITION = _precondition
"""What R3's checks admit: the spec's parameter constraints and its invariant."""

R3_CLASSES: Classes = {
    "chunked prefill": lambda v: v["chunked"],
    "unchunked prefill": lambda v: z3.Not(v["chunked"]),
    "gate on": lambda v: v["enabled"],
    "gate off": lambda v: z3.Not(v["enabled"]),
}
"""The configuration classes R3's scope names; each must be reached by an explored path."""


def _admitted(v: Mapping[str, Any]) -> bool:
    """The spec's parameter constraints and its invariant, as one branch."""
    with NoTracing():
        return SymbolicBool(_spec(v)[0])  # type: ignore[return-value]


def _length(x: object) -> object:
    return x.n if isinstance(x, Counted) else len(x)  # type: ignore[arg-type]


def code_view(sched: Any, reqs: list[Request], plan: Any, seen: Any) -> dict[str, Any]:
    """What the code's plan decides, named as in the spec (values, symbolic or not)."""
    chunks = {id(r): n for r, n in (*plan.partials, *plan.admits)}
    admitted = {id(r) for r, _ in plan.admits}
    decoding = {id(r) for r in plan.decodes}
    view = {
        "w": seen.waiting_tokens,
        "d": seen.decode_seqs,
        "preempted": len(plan.preempted),
        "free": _length(sched.blocks._free),
    }
    running = {id(r) for r in sched.running}
    queue = [id(r) for r in sched.waiting]
    view["queue_order"] = queue == [id(r) for r in reqs if id(r) in set(queue)]
    view["queued_tokens"] = sched.queued_tokens
    for i, r in enumerate(reqs):
        view[f"running{i}"] = id(r) in running and r.status is RequestStatus.RUNNING
        view[f"queued{i}"] = id(r) in set(queue) and r.status is RequestStatus.WAITING
        view[f"decode{i}"] = id(r) in decoding
        view[f"chunk{i}"] = chunks.get(id(r), 0)
        view[f"admit{i}"] = id(r) in admitted
        view[f"b{i}"] = _length(r.block_table)
        view[f"c{i}"] = r.num_computed
    return view


def spec_view(p: Terms, s: Terms) -> dict[str, z3.ExprRef]:
    """The same, as the spec's terms: steps 0-3 with no arrival or abort."""
    plan = SPEC.plan(p, s, _NO_EVENTS)
    w, d = SPEC.observe(p, plan)
    view = {"w": w, "d": d, "preempted": plan.preempted, "free": plan.free}
    # the waiting queue is the waiting slots in arrival order, and holds their tokens
    view["queue_order"] = z3.BoolVal(True)
    view["queued_tokens"] = z3.Sum(
        [z3.If(plan.st[i] == WAITING, p[f"P{i}"] + plan.g[i], 0) for i in range(SLOTS)]
    )
    for i in range(SLOTS):
        view[f"running{i}"] = plan.st[i] == RUNNING
        view[f"queued{i}"] = plan.st[i] == WAITING
        view[f"decode{i}"] = plan.decoding[i]
        view[f"chunk{i}"] = plan.chunk[i]
        view[f"admit{i}"] = plan.admit[i]
        view[f"b{i}"] = plan.b[i]
        view[f"c{i}"] = plan.c[i]
    return view


def _differences(v: Mapping[str, Any], code: Mapping[str, Any]) -> list[tuple[str, z3.BoolRef]]:
    """(name, code == spec) for everything the plan decides, as terms."""
    spec = _spec(v)[1]
    return [(k, term(code[k]) == spec[k]) for k in spec]


def _signature(slots: int) -> inspect.Signature:
    """The check's arguments: the parameters, free blocks, then each slot's state and lengths."""
    names = [*PARAMS, "free"] + [f"{k}{i}" for i in range(slots) for k in (*_SLOT, "P", "M")]
    return keyword_signature({n: bool if n in _BOOLS else int for n in names})


def _check(
    cls: type,
    at: Mapping[str, Any] | None = None,
    pre: Callable[[Mapping[str, z3.ExprRef]], z3.BoolRef] | None = None,
) -> Callable[..., None]:
    """One pass planned by ``cls`` (the shipped Scheduler or a mutant) against the spec;
    ``at``: only on inputs that agree with it (a mutant's ``focus``, a partial state);
    ``pre``: another precondition than ``R3_PRECONDITION`` (a test's planted one)."""

    def check(**v: Any) -> None:
        assert _admitted(v) if pre is None else admit(pre, **v)
        assert at is None or pinned(v, at)
        sched, reqs = guarded(lambda: build(cls, v), v)
        plan = guarded(sched.plan, v)
        seen = guarded(lambda: sched.observe(plan), v)
        with NoTracing():
            eqs = _differences(v, code_view(sched, reqs, plan, seen))
            same = SymbolicBool(z3.And(*[e for _, e in eqs]))
        if not same:
            fail(v, "differs from the spec on " + ", ".join(k for k, e in eqs if not holds(e)))
        reached(v)
        sample(v)

    check.__signature__ = _signature(SLOTS)  # type: ignore[attr-defined]
    return check


def _inputs_check(cls: type) -> Callable[..., None]:
    """The config's validating constructor accepts every admitted parameter set and reads
    it as the spec does (dense_tokens B, chunk cap, the gate's (B, K, enabled)), so the
    plan check may build it unvalidated."""

    def check(**v: Any) -> None:
        assert _admitted(v)
        config = guarded(lambda: config_for(v, True), v)
        gate = guarded(config.gate_config, v)
        with NoTracing():
            one_block = copy.copy(config)  # the constructor lists num_blocks block ids
            object.__setattr__(one_block, "num_blocks", 1)
        made = guarded(lambda: cls(one_block, _NoGate()), v)
        got = (config.dense, config.chunk_cap, gate.dense_tokens, gate.max_hold_passes)
        got += tuple(getattr(made, name) for name in _DERIVED)
        want = (v["B"], v["cap"], v["B"], v["K"], *derived(v))
        with NoTracing():
            same = [term(a) == term(b) for a, b in zip(got, want, strict=True)]
            same.append(term(gate.enabled) == term(v["enabled"]))
            ok = SymbolicBool(z3.And(*same))
            booted = constructed(cls(_BOOT, _NoGate()))
        if not ok:
            fail(v, "the config reads its parameters otherwise than the spec")
        if constructed(made) != booted:
            fail(v, "the constructor leaves other state for this config than the plan check's")
        reached(v)

    check.__signature__ = _signature(SLOTS)  # type: ignore[attr-defined]
    return check


R3_CHECKS: dict[str, Callable[..., Callable[..., None]]] = {
    "plan": _check,
    "inputs": _inputs_check,
}
"""Entry point -> check of a Scheduler-like class (the shipped one or a mutant)."""


def _m(name: str, description: str, method: str, old: str, new: str, **focus: object) -> CodeMutant:
    where = {"plan": focus} if focus else {}
    return CodeMutant(name, description, Scheduler, method, old, new, where)


R3_MUTANTS: tuple[CodeMutant, ...] = (
    _m("observes_raw_queue",
       "the gate sees the queue's tokens (capped), not what the pass would admit",
       "observe", "GateInput(plan.waiting_tokens,",
       "GateInput(min(self.queued_tokens, self._dense),"),
    _m("not_capped", "the observation is the planned prefill, not capped at dense_tokens",
       "_plan_prefill", "min(planned, self._dense)", "planned"),
    _m("decodes_count_partials", "the decode count includes the partial prefills",
       "observe", "len(plan.decodes))", "len(plan.decodes) + len(plan.partials))"),
    _m("admits_after_preemption", "a pass that preempted still admits from the queue",
       "_plan_prefill", "len(preempted) > 0", "False",
       free=0, st0=RUNNING, st1=RUNNING),  # a decode preempts the other running request
    _m("preempted_lost", "a preempted request is marked waiting but never queued again",
       "_preempt", "self.waiting.appendleft(r)", "pass"),
    _m("queued_tokens_stale",
       "a preemption does not add the request's tokens back to the queue's count",
       "_preempt", "self._queued_tokens += r.num_tokens", "pass"),
    _m("preempts_oldest", "KV exhaustion preempts the oldest running request, not the newest",
       "_walk_turn", "victim = running[-1]", "victim = running[0]"),
)  # fmt: skip
"""Broken Schedulers R3 must refute, each with a state on which it plans otherwise."""

STATEMENT = statement("R3")
