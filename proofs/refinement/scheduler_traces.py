"""R4's traces, and the shipped Scheduler run beside the spec scheduler on each, pass by pass.

R3 explores every path, but of 2 requests at block size 2; a bug that needs more
than 6 requests at once or a block size that is not a power of two passes it. A
trace here fixes a configuration, the requests' lengths and, each pass, how many
requests arrive and which one the engine aborts. ``lockstep`` runs the shipped
Scheduler through its public API (abort, add, schedule, update with a NullRunner)
beside the spec machine at ``SLOTS`` slots (8 requests leave 4 slots that never
arrive) evaluated on constants, compares every output and the whole next state each
pass, and keeps the spec's side; ``first_difference`` replays the recorded arrivals
and aborts on another Scheduler (a broken variant) and names the first pass it leaves
the spec. Up to that pass the variant's state is the spec's, so the recorded spec
pass is the spec's step from the variant's own state: no second evaluation.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from densegate.impl.sched.batch import NullRunner
from densegate.impl.sched.block_manager import blocks_for
from densegate.impl.sched.config import SchedulerConfig
from densegate.impl.sched.request import Request, RequestStatus
from densegate.impl.sched.scheduler import Scheduler
from densegate.proofs.refinement.spec_program import Stepper
from densegate.spec.scheduler import ABORTED, FINISHED, NOT_ARRIVED, RUNNING, WAITING

__all__ = [
    "BLOCK_SIZES",
    "CONTRACT",
    "MAX_PASSES",
    "OUT_KEYS",
    "REQUESTS",
    "SEEDED",
    "SLOTS",
    "SLOT_KEYS",
    "WIDE",
    "Make",
    "Recorded",
    "WideTrace",
    "first_difference",
    "lockstep",
    "traces",
]

SLOTS = 12
REQUESTS = (8, 12)
BLOCK_SIZES = (1, 3, 5, 16)
MAX_PASSES = 12
SEEDED = 2
"""Seeded traces per size, beside the two enumerated bursts."""
WIDE = 6
"""What "more than" means in the classes: the old checks' widest run (lockstep: 6 slots)."""

OUT_KEYS = ("fire", "reason", "prefill_tokens", "prefill_seqs", "decode_seqs", "preempted",
            "waiting", "running", "kv_free", "w")  # fmt: skip
SLOT_KEYS = ("st", "c", "g", "b")
_STATUS = {RequestStatus.WAITING: WAITING, RequestStatus.RUNNING: RUNNING,
           RequestStatus.FINISHED: FINISHED, RequestStatus.ABORTED: ABORTED}  # fmt: skip

Make = Callable[[SchedulerConfig], Scheduler]
"""A Scheduler class (the shipped one or a broken variant), or anything built like one."""


@dataclass(frozen=True)
class WideTrace:
    """A run to check: spec parameters for all ``SLOTS`` slots (the unused ones 1 + 1
    tokens, never arriving) and, per pass, how many requests arrive and which slot is
    aborted (if it is queued or running then; ``None``: none)."""

    name: str
    requests: int
    block_size: int
    params: Mapping[str, Any]
    arrivals: tuple[int, ...]
    aborts: tuple[int | None, ...]

    @property
    def check(self) -> str:
        return f"{self.requests} requests, block size {self.block_size}"

    def config(self) -> SchedulerConfig:
        p = self.params
        return SchedulerConfig(
            max_num_seqs=p["S"], max_num_batched_tokens=p["T"], block_size=self.block_size,
            num_blocks=p["N"], max_model_len=p["L"], enable_chunked_prefill=p["chunked"],
            long_prefill_token_threshold=p["cap"] if p["chunked"] else None, dense_tokens=p["B"],
            max_hold_passes=p["K"], gate_enabled=p["enabled"],
        )  # fmt: skip


def _params(lens: list[tuple[int, int]], **cfg: Any) -> dict[str, Any]:
    unused = [(1, 1)] * (SLOTS - len(lens))
    out = dict(cfg)
    for i, (P, M) in enumerate(lens + unused):
        out[f"P{i}"], out[f"M{i}"] = P, M
    return out


def _burst(requests: int, bs: int, chunked: bool, enabled: bool) -> WideTrace:
    """Every request arrives at pass 0 and fits it: all ``requests`` (> 6) are admitted at
    once, their prompts filling every KV block; half the prompts end on a block boundary,
    so pass 1's first decode finds no free block with all of them running and preempts."""
    prompts = [bs if i % 2 == 0 else max(1, bs - 1) for i in range(requests)]
    lens = [(P, 3) for P in prompts]
    L = max(prompts) + 3
    T = max(sum(prompts), L, requests)
    N = sum(blocks_for(P, bs) for P in prompts)
    params = _params(lens, S=requests, T=T, N=N, L=L, cap=T if not chunked else max(prompts),
                     chunked=chunked, B=T, K=3, enabled=enabled)  # fmt: skip
    name = f"burst, {'chunked' if chunked else 'unchunked'}, gate {'on' if enabled else 'off'}"
    quiet = MAX_PASSES - 1
    return WideTrace(name, requests, bs, params, (requests,) + (0,) * quiet, (None,) * MAX_PASSES)


def _seeded(requests: int, bs: int, seed: int) -> WideTrace:
    """Parameters drawn as the lockstep's ``any`` regime draws them, widened to
    ``requests``, with arrivals spread over the passes and an abort now and then."""
    rng = random.Random(f"R4 {requests} {bs} {seed}")
    S = rng.randint(WIDE + 1, requests)
    chunked = rng.random() < 0.5
    L = rng.randint(6, 24)
    lo = max(S, 1 if chunked else L)
    T = rng.randint(lo, lo + 3 * requests)
    lens = []
    for _ in range(requests):
        P = rng.randint(1, max(1, L // 3))
        lens.append((P, rng.randint(1, L - P)))
    biggest = max(blocks_for(P + M, bs) for P, M in lens)
    N = rng.randint(biggest, biggest * requests // 2 + 1)
    params = _params(lens, S=S, T=T, N=N, L=L, cap=rng.randint(1, T) if chunked else T,
                     chunked=chunked, B=rng.randint(1, T), K=rng.randint(1, 5),
                     enabled=rng.random() < 0.75)  # fmt: skip
    arrivals, left = [], requests
    for k in range(MAX_PASSES):
        n = min(left, rng.randint(1, requests) if k == 0 else rng.choice((0, 0, 1, 1, 2, 3)))
        arrivals.append(n)
        left -= n
    aborts = tuple(rng.randrange(requests) if rng.random() < 0.15 else None for _ in arrivals)
    return WideTrace(f"seeded {seed}", requests, bs, params, tuple(arrivals), aborts)


def traces() -> Iterator[WideTrace]:
    """Every trace R4 runs, by size: two enumerated bursts, then the seeded ones."""
    for requests in REQUESTS:
        for bs in BLOCK_SIZES:
            yield _burst(requests, bs, chunked=True, enabled=True)
            yield _burst(requests, bs, chunked=False, enabled=False)
            for seed in range(SEEDED):
                yield _seeded(requests, bs, seed)


class _CodeRun:
    """The Scheduler under test, driven as an engine drives it, read as the spec's state."""

    def __init__(self, make: Make, trace: WideTrace) -> None:
        self.sched = make(trace.config())
        self.runner = NullRunner(7)
        self.params = trace.params
        self.reqs: list[Request | None] = [None] * SLOTS

    def step(self, obs: Mapping[str, bool]) -> dict[str, Any]:
        sched = self.sched
        for i in range(SLOTS):
            r = self.reqs[i]
            if obs[f"abort{i}"] and r is not None:
                sched.abort(r)
        for i in range(SLOTS):
            if obs[f"arrive{i}"]:
                P, M = self.params[f"P{i}"], self.params[f"M{i}"]
                tokens = list(range(100, 100 + P))
                r = self.reqs[i] = Request(str(i), i, tokens, M, sched.pass_index, 0.0)
                sched.add(r)
        batch = sched.schedule()
        sched.update(batch, self.runner.execute(batch), 0.0)
        rec = sched.pass_log[-1]
        got: dict[str, Any] = {
            "fire": rec.fire, "reason": rec.reason.name, "prefill_tokens": rec.prefill_tokens,
            "prefill_seqs": rec.prefill_seqs, "decode_seqs": rec.decode_seqs,
            "preempted": rec.preempted, "waiting": rec.waiting, "running": rec.running,
            "kv_free": rec.kv_free_blocks, "w": rec.waiting_tokens,
            "next_h": sched.gate.hold_passes, "next_free": sched.blocks.num_free,
        }  # fmt: skip
        got.update(_contract(sched))
        for i, r in enumerate(self.reqs):
            got[f"next_st{i}"] = _STATUS[r.status] if r else NOT_ARRIVED
            got[f"next_c{i}"] = r.num_computed if r else 0
            got[f"next_g{i}"] = len(r.output_token_ids) if r else 0
            got[f"next_b{i}"] = len(r.block_table) if r else 0
        return got


def _order(running: list[int], waiting: list[int]) -> str:
    return f"R{','.join(map(str, running))} W{','.join(map(str, waiting))}"


def _contract(sched: Scheduler) -> dict[str, Any]:
    """What the abstraction to the spec's slots rests on (``Scheduler.check_invariants``):
    the running list and the queue, in that order, are in arrival order, and every KV
    block is free or held once (``blocks_conserved``)."""
    try:
        sched.blocks.check_conservation(r.block_table for r in sched.running)
        conserved = True
    except AssertionError:
        conserved = False
    running = [r.seq_id for r in sched.running]
    return {"order": _order(running, [r.seq_id for r in sched.waiting]),
            "blocks_conserved": conserved}  # fmt: skip


def _spec_contract(nxt: Mapping[str, Any]) -> dict[str, Any]:
    """The spec's side: its running and waiting slots, each in slot (arrival) order, and
    blocks it counts (a leak or a double hand-out shows in ``free`` and ``b``)."""
    slots = range(SLOTS)
    running = [i for i in slots if nxt[f"st{i}"] == RUNNING]
    waiting = [i for i in slots if nxt[f"st{i}"] == WAITING]
    return {"order": _order(running, waiting), "blocks_conserved": True}


CONTRACT = ("order", "blocks_conserved")


def _obs(trace: WideTrace, k: int, state: Mapping[str, Any]) -> dict[str, bool]:
    """Pass ``k``'s arrivals (the next requests, in slot order) and abort (only of a request
    the spec has queued or running), as the spec's observation."""
    obs = {f"{key}{i}": False for key in ("arrive", "abort") for i in range(SLOTS)}
    i = trace.aborts[k]
    if i is not None and state[f"st{i}"] in (WAITING, RUNNING):
        obs[f"abort{i}"] = True
    first = next((i for i in range(SLOTS) if state[f"st{i}"] == NOT_ARRIVED), SLOTS)
    for i in range(first, min(first + trace.arrivals[k], trace.requests)):
        obs[f"arrive{i}"] = True
    return obs


def _differences(code: Mapping[str, Any], spec: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    """key -> (code, spec) where they differ; a request's whole next state where any of
    it differs (so it can be printed as one)."""
    diff = {k: (code.get(k), v) for k, v in spec.items() if code.get(k) != v}
    for i in range(SLOTS):
        keys = [f"next_{k}{i}" for k in SLOT_KEYS]
        if any(k in diff for k in keys):
            diff.update({k: (code.get(k), spec[k]) for k in keys})
    return diff


@dataclass
class Recorded:
    """A trace as the lockstep ran it: one row per pass (state before, observation, the
    spec's outputs and next state as ``next_*``), and the first difference, if any."""

    trace: WideTrace
    rows: list[dict[str, Any]] = field(default_factory=list)
    differs: dict[str, tuple[Any, Any]] | None = None
    """On the last row: key -> (code, spec); None: every pass agreed."""
    spec_error: str | None = None
    """The spec's evaluator found no command, or two, enabled (the spec's fault)."""
    params_ok: bool = True
    obs_ok: bool = True


def _done(trace: WideTrace, state: Mapping[str, Any]) -> bool:
    """Every request arrived and ended: the rest of the trace would be idle passes."""
    return all(state[f"st{i}"] in (FINISHED, ABORTED) for i in range(trace.requests))


def lockstep(stepper: Stepper, make: Make, trace: WideTrace) -> Recorded:
    """Run ``make``'s Scheduler and the spec side by side until the trace ends, everything
    has ended (after one idle pass), or they differ."""
    out = Recorded(trace)
    state: dict[str, Any] = {"h": 0, "free": trace.params["N"]}
    state.update({f"{k}{i}": 0 for k in SLOT_KEYS for i in range(SLOTS)})
    code = _CodeRun(make, trace)
    for k in range(len(trace.arrivals)):
        obs = _obs(trace, k, state)
        try:
            step = stepper.step(trace.params, state, obs)
        except ValueError as e:
            out.spec_error = f"pass {k}: {e}"
            return out
        out.params_ok &= step.params_ok
        out.obs_ok &= step.obs_ok
        spec = {**step.out, **_spec_contract(step.next)}
        spec.update({f"next_{key}": v for key, v in step.next.items()})
        out.rows.append({"pass": k, **obs, **state, **spec})
        try:
            got = code.step(obs)
        except Exception as e:
            out.differs = {"raised": (f"{type(e).__name__}: {e}", "no error")}
            return out
        diff = _differences(got, spec)
        if diff:
            out.differs = diff
            return out
        idle = _done(trace, state)
        state = dict(step.next)
        if idle:
            break
    return out


def first_difference(make: Make, rec: Recorded) -> tuple[int, dict[str, tuple[Any, Any]]] | None:
    """The first pass of ``rec`` (which agreed throughout) where ``make``'s Scheduler, fed
    the recorded arrivals and aborts, does otherwise than the spec, with what differs."""
    code = _CodeRun(make, rec.trace)
    obs_keys = [f"{key}{i}" for key in ("arrive", "abort") for i in range(SLOTS)]
    spec_keys = [*OUT_KEYS, *CONTRACT, "next_h", "next_free"]
    spec_keys += [f"next_{k}{i}" for i in range(SLOTS) for k in SLOT_KEYS]
    for k, row in enumerate(rec.rows):
        try:
            got = code.step({key: row[key] for key in obs_keys})
        except Exception as e:
            return k, {"raised": (f"{type(e).__name__}: {e}", "no error")}
        diff = _differences(got, {key: row[key] for key in spec_keys})
        if diff:
            return k, diff
    return None
