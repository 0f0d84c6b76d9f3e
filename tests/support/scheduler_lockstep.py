"""The real Scheduler (with NullRunner) and the spec's scheduler machine, pass by pass."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
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
from densegate.proofs.refinement.spec_program import Stepper
from densegate.spec.scheduler import SchedulerMachine

STATUS = {
    RequestStatus.WAITING: 1,
    RequestStatus.RUNNING: 2,
    RequestStatus.FINISHED: 3,
    RequestStatus.ABORTED: 4,
}
_MACHINES: dict[tuple[int, int], Stepper] = {}


def machine(slots: int, block_size: int) -> Stepper:
    """The spec scheduler at ``slots`` and ``block_size``, compiled once per run (its
    compiled terms are ``evaluate``'s node for node: ``tests/test_spec_program.py``)."""
    key = (slots, block_size)
    if key not in _MACHINES:
        _MACHINES[key] = Stepper(SchedulerMachine(slots, block_size))
    return _MACHINES[key]


SLOTS = 6
"""Request slots of the spec machine the narrow regimes use: one compiled machine per
block size; a run uses up to ``SLOTS`` of them."""
WIDE_SLOTS = 12
"""The wide regime's machine: 7 to 12 requests, more than the narrow regimes ever run at once."""
BLOCK_SIZES = (1, 2, 3, 4, 5, 16)
"""Every block size the lockstep draws: powers of two and not (``blocks_for`` is a ceil-div)."""
NARROW_BLOCK_SIZES = (1, 2, 4)
"""What the lockstep drew before it was widened (with 6 slots): the planted twins
(``tests.support.planted_sched``) run exactly as the shipped Scheduler there."""

REGIMES = ("hold", "tight", "any")
WIDE = "wide"
_SIZES = {"hold": (1, 1, 2, 3, 4, 5, 16), "tight": (1, 2, 3, 5), "any": (1, 1, 2, 3, 4, 5, 16),
          WIDE: BLOCK_SIZES}  # fmt: skip


@st.composite
def setups(
    draw: st.DrawFn,
    regimes: tuple[str, ...] = REGIMES,
    block_sizes: tuple[int, ...] | None = None,
) -> dict[str, Any]:
    """Scheduler parameters and admissible requests, small enough to hit every edge.

    Four regimes, so that a CI run covers each edge often: ``hold`` (KV for
    every slot, ``dense_tokens`` at the pass budget, K from 4 to 10, long
    answers: requests wait while others decode, so the gate holds, then spends
    its budget), ``tight`` (KV for the biggest request plus at most one block:
    heads blocked, decodes preempted), ``any`` (every parameter drawn freely) and
    ``wide`` (7 to 12 requests and as many sequence slots, a budget for 7 admissions
    at once, KV from tight to roomy: more than 6 run, are admitted and preempted at
    once). ``block_sizes``: drawn from these instead of the regime's own.
    """
    regime = draw(st.sampled_from(regimes), label="regime")
    bs = draw(st.sampled_from(block_sizes or _SIZES[regime]), label="block_size")
    if regime == WIDE:
        return _wide(draw, bs)
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
    cfg = {"S": S, "T": T, "N": N, "L": L, "cap": cap, "chunked": chunked, "B": B, "K": K}
    return setup_of(cfg | {"enabled": enabled}, bs, lens, SLOTS)


def setup_of(
    cfg: dict[str, Any], bs: int, lens: list[tuple[int, int]], slots: int
) -> dict[str, Any]:
    """A setup as ``setups`` draws it: spec parameters for ``slots`` slots, the unused
    ones 1 + 1 tokens (no request arrives in them)."""
    unused = [(1, 1)] * (slots - len(lens))
    params = dict(cfg)
    for i, (P, M) in enumerate(lens + unused):
        params[f"P{i}"], params[f"M{i}"] = P, M
    return {"params": params, "bs": bs, "lens": lens, "slots": slots}


def _wide(draw: st.DrawFn, bs: int) -> dict[str, Any]:
    """The wide regime (``setups``): 7 to 12 requests and sequence slots, KV ``roomy``
    (every request fits at once: a burst is admitted whole), ``tight`` (short prompts'
    blocks and one or two more, long answers: a burst runs, then its decodes outgrow
    the cache) or drawn ``free``ly."""
    kv = draw(st.sampled_from(["roomy", "tight", "tight", "free"]), label="kv")
    R = draw(st.integers(7, WIDE_SLOTS), label="R")
    S = draw(st.integers(7, WIDE_SLOTS), label="S")
    chunked = draw(st.booleans(), label="chunked")
    # long enough that a decode crosses into a new block of 16 before it finishes
    L = draw(st.integers(6, max(24, 2 * bs + 8)), label="L")
    lens = []
    for _ in range(R):
        short = st.integers(1, max(1, L // 4))
        P = draw(short if kv == "tight" else short | st.integers(1, L - 1))
        M = st.integers((L - P + 1) // 2, L - P) if kv == "tight" else st.integers(1, L - P)
        lens.append((P, draw(M)))
    lo = max(S, 1 if chunked else L)
    # mostly a budget for a whole burst's prompts, else drawn freely
    first = max(lo, sum(P for P, _ in lens))
    burst = st.integers(first, first + 8)
    T = draw(burst | burst | st.integers(lo, 4 * lo) if kv != "tight" else burst, label="T")
    cap = draw(st.integers(1, T), label="cap") if chunked else T
    need = [-(-(P + M) // bs) for P, M in lens]
    prompts = sum(-(-P // bs) for P, _ in lens)
    N = draw(
        {
            "roomy": st.integers(sum(need), sum(need) + 4),
            "tight": st.integers(max(max(need), prompts), max(max(need), prompts) + 2),
            "free": st.integers(max(need), sum(need)),
        }[kv],
        label="N",
    )
    cfg = {"S": S, "T": T, "N": N, "L": L, "cap": cap, "chunked": chunked}
    cfg["B"] = draw(st.integers(1, T), label="B")
    cfg["K"] = draw(st.integers(1, 6), label="K")
    cfg["enabled"] = draw(st.sampled_from([True, True, True, False]), label="enabled")
    return setup_of(cfg, bs, lens, WIDE_SLOTS)


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
    """Passes by kind over a whole run: idle, HOLD, BUDGET, preempting, ``bs=N`` (its block
    size; ``wide bs=N`` on the 12-slot machine), ``>6 live``, ``>6 running, preempting``,
    ``>6 admitted`` (``count``)."""
    impl: ClassVar[ModuleType] = densegate.impl.sched.scheduler
    """A module with Scheduler and SchedulerConfig: the real one or a mutant."""

    @initialize(setup=setups())
    def setup(self, setup: dict[str, Any]) -> None:
        self.start(setup)

    def start(self, setup: dict[str, Any]) -> None:
        self.params = setup["params"]
        self.lens = setup["lens"]
        self.R = len(self.lens)
        self.slots = setup["slots"]
        self.bs = setup["bs"]
        self.spec = machine(self.slots, self.bs)
        self.sched = self.impl.Scheduler(config_of(setup, self.impl))
        self.runner = NullRunner(7)
        self.reqs: list[Request] = []
        self.done = False
        self.state: dict[str, int] = {"h": 0, "free": self.params["N"]}
        self.state.update({f"{k}{i}": 0 for k in ("st", "c", "g", "b") for i in range(self.slots)})

    # One arrival at a time, mostly when the queue is empty, and aborts rarer still:
    # requests wait while others decode, which is what the gate's HOLD and BUDGET are for.
    @rule(arrive=st.integers(0, 3), abort=st.integers(0, 8 * SLOTS))
    def one_pass(self, arrive: int, abort: int) -> None:
        self.run_pass(int(arrive == 0 or (not self.sched.waiting and arrive < 3)), abort, 1)

    def run_pass(self, arrivals: int, abort: int, idle_arrivals: int) -> None:
        """Abort slot ``abort`` (if it is a live request's), let ``arrivals`` requests
        arrive (``idle_arrivals`` when nothing is left to run), run one pass on both sides."""
        obs = {f"{k}{i}": False for k in ("arrive", "abort") for i in range(self.slots)}
        for i in [abort] if abort < self.slots else []:
            if i < len(self.reqs) and not self.reqs[i].status.ended:
                self.sched.abort(self.reqs[i])
                obs[f"abort{i}"] = True
        if not self.sched.has_work():
            if len(self.reqs) == self.R:
                if self.done:
                    return  # everything ended and one idle pass was checked: no more
                self.done = True
            else:
                arrivals = max(arrivals, idle_arrivals)  # an idle pass checks little
        for _ in range(arrivals):
            i = len(self.reqs)
            if i == self.R:
                break
            P, M = self.lens[i]
            req = Request(str(i), i, list(range(100, 100 + P)), M, self.sched.pass_index, 0.0)
            self.reqs.append(req)
            self.sched.add(req)
            obs[f"arrive{i}"] = True
        queued = [r for r in self.reqs if r.status is RequestStatus.WAITING]
        running = len(self.sched.running)
        batch = self.sched.schedule()
        self.sched.update(batch, self.runner.execute(batch), 0.0)
        self.sched.check_invariants()
        step = self.spec.step(self.params, self.state, obs)
        assert step.params_ok and step.obs_ok, f"the spec does not admit {self.params}, {obs}"
        out, nxt = step.out, step.next
        rec = self.sched.pass_log[-1]
        admitted = sum(r.status is not RequestStatus.WAITING for r in queued)
        self.count(rec, len(queued) + running, running, admitted)
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

    def count(self, rec: PassRecord, live: int, running: int, admitted: int) -> None:
        """Tally the pass (``tally``): what it was, and whether it ran wider than 6 slots."""
        SchedulerLockstep.passes += 1
        tally = SchedulerLockstep.tally
        tally.update(kinds(rec))
        tally[f"bs={self.bs}"] += 1
        tally[f"wide bs={self.bs}"] += self.slots > SLOTS
        tally[">6 live"] += live > SLOTS
        tally[">6 running, preempting"] += running > SLOTS and rec.preempted > 0
        tally[">6 admitted"] += admitted > SLOTS
        if rec.preempted:
            event("a pass preempted")
        if rec.reason.name == "HOLD":
            event("a pass held")

    def check_state(self) -> None:
        want = {"h": self.sched.gate.hold_passes, "free": self.sched.blocks.num_free}
        for i in range(self.slots):
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


class WideLockstep(SchedulerLockstep):
    """The wide regime's lockstep: 12 slots, and arrivals in bursts (up to every request
    at once; at least 7 when nothing is left to run, the first pass included), so more
    than 6 requests wait, are admitted and run at once; aborts as often as the narrow
    regimes'."""

    @initialize(setup=setups((WIDE,)))
    def setup(self, setup: dict[str, Any]) -> None:
        self.start(setup)

    @rule(
        arrive=st.integers(0, 3),
        burst=st.integers(1, WIDE_SLOTS) | st.just(WIDE_SLOTS),
        abort=st.integers(0, 8 * WIDE_SLOTS),
    )
    def one_pass(self, arrive: int, burst: int, abort: int) -> None:
        arrivals = burst if arrive == 0 else int(not self.sched.waiting and arrive < 3)
        self.run_pass(arrivals, abort, max(burst, SLOTS + 1))


def lockstep_in(
    *regimes: str, block_sizes: tuple[int, ...] | None = None
) -> type[SchedulerLockstep]:
    """The lockstep drawing its setups from ``regimes`` only (``wide`` alone, or narrow
    ones), block sizes from ``block_sizes`` if given."""
    base = WideLockstep if regimes == (WIDE,) else SchedulerLockstep
    assert base is WideLockstep or WIDE not in regimes, "the wide regime runs on its own"

    class Lockstep(base):  # type: ignore[valid-type,misc]
        @initialize(setup=setups(regimes, block_sizes))
        def setup(self, setup: dict[str, Any]) -> None:
            self.start(setup)

    sizes = "" if block_sizes is None else "_bs" + "_".join(map(str, block_sizes))
    Lockstep.__name__ = Lockstep.__qualname__ = "Lockstep_" + "_".join(regimes) + sizes
    return Lockstep


def replay(
    params: dict[str, Any],
    block_size: int,
    obs_rows: list[dict[str, Any]],
    make: Callable[[SchedulerConfig], Any] | None = None,
    order: bool = False,
) -> list[dict[str, Any]]:
    """Run the real Scheduler (or ``make``'s) through a trace's arrivals and aborts; one
    dict per pass with the pass record and every request's state, keyed as the spec
    names them (``order``: and ``order``, the running list's and queue's slots)."""
    R = sum(1 for k in params if k.startswith("P"))
    lens = [(params[f"P{i}"], params[f"M{i}"]) for i in range(R)]
    make = make or densegate.impl.sched.scheduler.Scheduler
    sched = make(config_of({"params": params, "bs": block_size}))
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
        if order:
            got["order"] = ([r.seq_id for r in sched.running], [r.seq_id for r in sched.waiting])
        out.append(got)
    return out
