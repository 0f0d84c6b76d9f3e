"""The real Scheduler (with NullRunner) and the spec's scheduler machine, pass by pass."""

from __future__ import annotations

from collections import Counter
from types import ModuleType
from typing import Any, ClassVar

from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import densegate.impl.sched.scheduler
from densegate.impl.sched.batch import NullRunner
from densegate.impl.sched.config import SchedulerConfig
from densegate.impl.sched.plan import PassRecord
from densegate.impl.sched.request import Request, RequestStatus
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


SLOTS = 6
"""Request slots of the spec machine every run uses: one compiled machine per block
size (compiling costs seconds); a run uses up to ``SLOTS`` of them."""


REGIMES = ("hold", "tight", "any")


@st.composite
def setups(draw: st.DrawFn, regimes: tuple[str, ...] = REGIMES) -> dict[str, Any]:
    """Scheduler parameters and admissible requests, small enough to hit every edge.

    Three regimes, so that a CI run covers each edge often: ``hold`` (KV for
    every slot, ``dense_tokens`` at the pass budget, K from 4 to 10, long
    answers: requests wait while others decode, so the gate holds, then spends
    its budget), ``tight`` (KV for the biggest request plus at most one block:
    heads blocked, decodes preempted) and ``any`` (every parameter drawn freely).
    """
    regime = draw(st.sampled_from(regimes), label="regime")
    bs = draw(st.sampled_from([1, 1, 2, 4] if regime != "tight" else [1, 2]), label="block_size")
    seqs = {"any": [1, 2, 2, 3], "tight": [2, 3], "hold": [3, 4]}[regime]
    S = draw(st.sampled_from(seqs), label="S")
    chunked = draw(st.booleans(), label="chunked")
    L = draw(st.integers(12 if regime == "hold" else 6, 24), label="L")
    lo = max(S, 1 if chunked else L)
    T = draw(st.integers(lo, lo + 4), label="T")
    cap = draw(st.integers(1, T + 2), label="cap") if chunked else T
    R = draw(st.integers(2 if regime == "any" else 4, SLOTS), label="R")
    K = draw(st.integers(4, 10) if regime == "hold" else st.integers(1, 5), label="K")
    lens = []
    for _ in range(R):
        # Short prompts with long answers make decodes outgrow their blocks (and,
        # when holding, keep decodes running while the next request waits).
        P = draw(st.integers(1, max(1, L // 4)) | st.integers(1, L - 1))
        M = st.integers(1, L - P) if regime == "any" else st.integers((L - P + 1) // 2, L - P)
        lens.append((P, draw(M)))
    biggest = max(-(-(P + M) // bs) for P, M in lens)
    if regime == "hold":
        N = draw(st.integers(S * biggest, S * biggest + 2), label="N")
        B, enabled = T, True
    else:
        # Tight caches block the head and preempt; roomier ones run several at once.
        roomy = st.integers(biggest, 2 * biggest + 2) if regime == "any" else st.nothing()
        N = draw(st.integers(biggest, biggest + 1) | roomy, label="N")
        B = draw(st.integers(1, T), label="B")
        enabled = draw(st.sampled_from([True, True, True, False]), label="enabled")
    unused = [(1, 1)] * (SLOTS - R)  # slots no request arrives in
    return {
        "params": {
            "S": S, "T": T, "N": N, "L": L, "cap": cap, "chunked": chunked,
            "B": B, "K": K, "enabled": enabled,
            **{f"P{i}": P for i, (P, _) in enumerate(lens + unused)},
            **{f"M{i}": M for i, (_, M) in enumerate(lens + unused)},
        },
        "bs": bs,
        "lens": lens,
    }  # fmt: skip


def kinds(rec: PassRecord) -> list[str]:
    """What a pass counts as: ``idle`` (scheduled nothing), its gate reason, ``preempting``."""
    if rec.prefill_tokens == 0 and rec.decode_seqs == 0:
        return ["idle"]
    return [rec.reason.name] + (["preempting"] if rec.preempted else [])


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
    tally: ClassVar[Counter[str]] = Counter()
    """Passes by kind over a whole run: idle, HOLD, BUDGET, preempting, ..."""
    impl: ClassVar[ModuleType] = densegate.impl.sched.scheduler
    """A module with Scheduler and SchedulerConfig: the real one or a mutant."""

    @initialize(setup=setups())
    def setup(self, setup: dict[str, Any]) -> None:
        self.start(setup)

    def start(self, setup: dict[str, Any]) -> None:
        self.params = setup["params"]
        self.lens = setup["lens"]
        self.R = len(self.lens)
        self.spec = machine(SLOTS, setup["bs"])
        self.sched = self.impl.Scheduler(config_of(setup, self.impl))
        self.runner = NullRunner(7)
        self.reqs: list[Request] = []
        self.done = False
        self.state: dict[str, int] = {"h": 0, "free": self.params["N"]}
        self.state.update({f"{k}{i}": 0 for k in ("st", "c", "g", "b") for i in range(SLOTS)})

    # One arrival at a time, mostly when the queue is empty, and aborts rarer still:
    # requests wait while others decode, which is what the gate's HOLD and BUDGET are for.
    @rule(arrive=st.integers(0, 3), abort=st.integers(0, 8 * SLOTS))
    def one_pass(self, arrive: int, abort: int) -> None:
        arrivals = int(arrive == 0 or (not self.sched.waiting and arrive < 3))
        obs = {f"{k}{i}": False for k in ("arrive", "abort") for i in range(SLOTS)}
        for i in [abort] if abort < SLOTS else []:
            if i < len(self.reqs) and not self.reqs[i].status.ended:
                self.sched.abort(self.reqs[i])
                obs[f"abort{i}"] = True
        if not self.sched.has_work():
            if len(self.reqs) == self.R:
                if self.done:
                    return  # everything ended and one idle pass was checked: no more
                self.done = True
            else:
                arrivals = max(arrivals, 1)  # an idle pass checks little; arrive instead
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
        SchedulerLockstep.tally.update(kinds(rec))
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
        want = {"h": self.sched.gate.hold_passes, "free": self.sched.blocks.num_free}
        for i in range(SLOTS):
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


def lockstep_in(*regimes: str) -> type[SchedulerLockstep]:
    """``SchedulerLockstep`` drawing its setups from ``regimes`` only."""

    class Lockstep(SchedulerLockstep):
        @initialize(setup=setups(regimes))
        def setup(self, setup: dict[str, Any]) -> None:
            self.start(setup)

    Lockstep.__name__ = Lockstep.__qualname__ = "Lockstep_" + "_".join(regimes)
    return Lockstep


def replay(
    params: dict[str, Any], block_size: int, obs_rows: list[dict[str, Any]]
) -> list[dict[str, Any]]:
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
            "w": rec.waiting_tokens,
            "next_h": sched.gate.hold_passes,
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
