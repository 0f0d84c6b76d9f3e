"""The real Scheduler (with NullRunner) and the spec's scheduler machine, pass by pass."""

from __future__ import annotations

from types import ModuleType
from typing import Any, ClassVar

from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import densegate.impl.sched.scheduler
from densegate.impl.sched.batch import NullRunner
from densegate.impl.sched.request import Request, RequestStatus
from densegate.impl.sched.scheduler import SchedulerConfig
from densegate.spec.machine import evaluate
from densegate.spec.scheduler import SchedulerMachine

STATUS = {
    RequestStatus.WAITING: 1,
    RequestStatus.RUNNING: 2,
    RequestStatus.FINISHED: 3,
    RequestStatus.ABORTED: 4,
}
_MACHINES: dict[tuple[int, int], SchedulerMachine] = {}


def machine(slots: int, block_size: int) -> SchedulerMachine:
    key = (slots, block_size)
    if key not in _MACHINES:
        _MACHINES[key] = SchedulerMachine(slots, block_size)
    return _MACHINES[key]


@st.composite
def setups(draw: st.DrawFn, max_requests: int = 8) -> dict[str, Any]:
    """Scheduler parameters and admissible requests, small enough to hit every edge:
    more requests than sequence slots, budgets that bind, KV that runs out."""
    bs = draw(st.sampled_from([1, 1, 2, 4]), label="block_size")
    S = draw(st.sampled_from([1, 2, 2, 3]), label="S")
    chunked = draw(st.booleans(), label="chunked")
    L = draw(st.integers(3, 16), label="L")
    lo = max(S, 1 if chunked else L)
    T = draw(st.integers(lo, lo + 4), label="T")
    cap = draw(st.integers(1, T + 2), label="cap") if chunked else T
    R = draw(st.integers(2, max_requests), label="R")
    lens = []
    for _ in range(R):
        # Short prompts with long answers make decodes outgrow their blocks.
        P = draw(st.integers(1, L - 1) | st.integers(1, max(1, L // 4)))
        lens.append((P, draw(st.integers(1, L - P))))
    biggest = max(-(-(P + M) // bs) for P, M in lens)
    # Tight caches block the head and preempt; roomier ones run several at once.
    N = draw(st.integers(biggest, biggest + 1) | st.integers(biggest, 2 * biggest + 2), label="N")
    return {
        "params": {
            "S": S, "T": T, "N": N, "L": L, "cap": cap, "chunked": chunked,
            "B": draw(st.integers(1, T), label="B"),
            "K": draw(st.integers(1, 5), label="K"),
            "enabled": draw(st.sampled_from([True, True, True, False]), label="enabled"),
            **{f"P{i}": P for i, (P, _) in enumerate(lens)},
            **{f"M{i}": M for i, (_, M) in enumerate(lens)},
        },
        "bs": bs,
        "lens": lens,
    }  # fmt: skip


def config_of(
    setup: dict[str, Any], impl: ModuleType = densegate.impl.sched.scheduler
) -> SchedulerConfig:
    p = setup["params"]
    cfg: SchedulerConfig = impl.SchedulerConfig(
        max_num_seqs=p["S"],
        max_num_batched_tokens=p["T"],
        block_size=setup["bs"],
        num_blocks=p["N"],
        max_model_len=p["L"],
        enable_chunked_prefill=p["chunked"],
        long_prefill_token_threshold=p["cap"] if p["chunked"] else None,
        dense_tokens=p["B"],
        max_hold_passes=p["K"],
        gate_enabled=p["enabled"],
    )
    return cfg


class SchedulerLockstep(RuleBasedStateMachine):
    """Random arrivals and aborts; every pass, impl and spec must agree on everything."""

    passes: ClassVar[int] = 0
    impl: ClassVar[ModuleType] = densegate.impl.sched.scheduler
    """A module with Scheduler and SchedulerConfig: the real one or a mutant."""

    @initialize(setup=setups())
    def setup(self, setup: dict[str, Any]) -> None:
        self.params = setup["params"]
        self.lens = setup["lens"]
        self.R = len(self.lens)
        self.spec = machine(self.R, setup["bs"])
        self.sched = self.impl.Scheduler(config_of(setup, self.impl))
        self.runner = NullRunner(7)
        self.reqs: list[Request] = []
        self.state: dict[str, int] = {"h": 0, "free": self.params["N"]}
        self.state.update({f"{k}{i}": 0 for k in ("st", "c", "g", "b") for i in range(self.R)})

    @rule(arrivals=st.integers(0, 3), aborts=st.lists(st.integers(0, 4), max_size=2))
    def one_pass(self, arrivals: int, aborts: list[int]) -> None:
        obs = {f"{k}{i}": False for k in ("arrive", "abort") for i in range(self.R)}
        for i in sorted(set(aborts)):
            if i < len(self.reqs) and not self.reqs[i].status.ended:
                self.sched.abort(self.reqs[i])
                obs[f"abort{i}"] = True
        for _ in range(arrivals):
            i = len(self.reqs)
            if i == self.R:
                break
            P, M = self.lens[i]
            req = Request(str(i), i, list(range(100, 100 + P)), M, self.sched.pass_index, 0.0)
            self.reqs.append(req)
            self.sched.add(req)
            obs[f"arrive{i}"] = True
        batch = self.sched.schedule()
        self.sched.update(batch, self.runner.execute(batch), 0.0)
        self.sched.check_invariants()
        _, out, nxt = evaluate(self.spec, self.params, self.state, obs)
        SchedulerLockstep.passes += 1
        rec = self.sched.pass_log[-1]
        if rec.preempted:
            event("a pass preempted")
        if rec.reason.name == "HOLD":
            event("a pass held")
        got = {
            "fire": rec.fire,
            "reason": rec.reason.name,
            "prefill_tokens": rec.prefill_tokens,
            "prefill_seqs": rec.prefill_seqs,
            "decode_seqs": rec.decode_seqs,
            "preempted": rec.preempted,
            "waiting": rec.waiting,
            "running": rec.running,
            "kv_free": rec.kv_free_blocks,
            "w": rec.waiting_tokens,
        }
        assert got == out, f"pass {rec.index}: impl {got} != spec {out}"
        self.state = nxt
        self.check_state()

    def check_state(self) -> None:
        want = {"h": self.sched.gate.hold_passes, "free": self.sched.blocks.num_free}  # type: ignore[attr-defined]
        for i in range(self.R):
            r = self.reqs[i] if i < len(self.reqs) else None
            want[f"st{i}"] = STATUS[r.status] if r else 0
            want[f"c{i}"] = r.num_computed if r else 0
            want[f"g{i}"] = len(r.output_token_ids) if r else 0
            want[f"b{i}"] = len(r.block_table) if r else 0
        assert want == self.state, f"impl {want} != spec {self.state}"

    @invariant()
    def outputs_never_exceed_max_tokens(self) -> None:
        for r in getattr(self, "reqs", []):
            assert len(r.output_token_ids) <= r.max_tokens


def replay(params: dict[str, Any], block_size: int, obs_rows: list[dict[str, Any]]) -> list[dict]:
    """Run the real Scheduler through a trace's arrivals and aborts; one dict per pass
    with the pass record and every request's state, keyed as the spec names them."""
    R = sum(1 for k in params if k.startswith("P"))
    lens = [(params[f"P{i}"], params[f"M{i}"]) for i in range(R)]
    sched = densegate.impl.sched.scheduler.Scheduler(
        config_of({"params": params, "bs": block_size})
    )
    runner = NullRunner(7)
    reqs: list[Request] = []
    out = []
    for row in obs_rows:
        for i in range(R):
            if row.get(f"abort{i}"):
                sched.abort(reqs[i])
        for i in range(R):
            if row.get(f"arrive{i}"):
                P, M = lens[i]
                req = Request(str(i), i, list(range(100, 100 + P)), M, sched.pass_index, 0.0)
                reqs.append(req)
                sched.add(req)
        batch = sched.schedule()
        sched.update(batch, runner.execute(batch), 0.0)
        rec = sched.pass_log[-1]
        got: dict[str, Any] = {
            "fire": rec.fire,
            "reason": rec.reason.name,
            "prefill_tokens": rec.prefill_tokens,
            "decode_seqs": rec.decode_seqs,
            "preempted": rec.preempted,
            "next_h": sched.gate.hold_passes,  # type: ignore[attr-defined]
            "next_free": sched.blocks.num_free,
        }
        for i in range(R):
            r = reqs[i] if i < len(reqs) else None
            got[f"next_st{i}"] = STATUS[r.status] if r else 0
            got[f"next_c{i}"] = r.num_computed if r else 0
            got[f"next_g{i}"] = len(r.output_token_ids) if r else 0
            got[f"next_b{i}"] = len(r.block_table) if r else 0
        out.append(got)
    return out
