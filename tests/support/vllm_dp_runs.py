"""DP ranks of ``tests.support.vllm_dp`` run together: in processes (tests) or threads (benchmark).

Both use a real gloo group per rank (vLLM's stateless group on 127.0.0.1).
``run_processes`` spawns one process per rank, each loading vLLM's general
plugins the way an engine core does (so the entry point itself is what
installs the DP gate), with a static routing; every wait is bounded.
``run_threads`` runs the ranks as threads of one process and routes each
arrival as vLLM's DP load balancer does (``DPLBAsyncMPClient.
get_core_engine_for_request`` in ``vllm/v1/engine/core_client.py``: the engine
with the least ``max(in-flight, waiting + running)``, plus a waiting penalty
above 50 % KV use, ties to the lowest index), here with fresh counts where
vLLM's are up to 100 ms old.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from densegate.lab.bench.step_price import StepClock
from tests.support.vllm_dp import (
    Arrival,
    RankRun,
    build_scheduler,
    dp_group,
    drive,
    make_core,
    make_request,
)
from tests.support.vllm_harness import Limits

ENV_VAR = "DENSEGATE_VLLM_DP"


@dataclass(frozen=True)
class Scenario:
    world: int
    arrivals: tuple[Arrival, ...]
    limits: Limits = field(default_factory=Limits)
    densegate: tuple[dict[str, Any] | None, ...] = ()
    """Per rank ``additional_config['densegate']`` (empty: ``{}`` everywhere)."""
    gate: bool = True
    """The aligned gate on (``run_threads``; ``run_processes`` always sets the env var)."""
    die: tuple[int, int] | None = None
    """(rank, step): that rank's process exits there."""
    timeout_s: int = 20
    """The DP group's timeout (vLLM's ``cpu_distributed_timeout_seconds``)."""
    pinned: bool = False
    """``run_threads``: each arrival goes to its ``rank``, as a request's ``data_parallel_rank``
    makes vLLM's client route it (external routing), instead of the load balancer's choice."""

    def config_of(self, rank: int) -> dict[str, Any] | None:
        return self.densegate[rank] if self.densegate else {}


@dataclass
class Failure:
    rank: int
    kind: str
    message: str


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _static(sc: Scenario, rank: int, sched: Any) -> tuple[Callable[[int], bool], Any]:
    by_step: dict[int, list[Arrival]] = {}
    for a in sc.arrivals:
        by_step.setdefault(a.step, []).append(a)
    steps = sorted(by_step)

    def feed(g: int) -> bool:
        got = by_step.get(g, [])
        for a in got:
            if a.rank == rank:
                sched.add_request(make_request(a))
        return bool(got)

    def next_arrival(g: int) -> int | None:
        return next((s for s in steps if s > g), None)

    return feed, next_arrival


def _child(rank: int, ports: list[int], scenarios: list[Scenario], out: Any) -> None:
    from vllm.plugins import load_general_plugins

    os.environ[ENV_VAR] = "1"
    load_general_plugins()  # as EngineCore.__init__ does: runs densegate's entry point
    for k, (port, sc) in enumerate(zip(ports, scenarios, strict=True)):
        try:
            sched = build_scheduler(sc.limits, sc.config_of(rank), sc.world)
            group = dp_group(port, rank, sc.world, sc.timeout_s)
            core = make_core(sched, group, rank, sc.world, sc.timeout_s)
            feed, nxt = _static(sc, rank, sched)
            die = sc.die[1] if sc.die and sc.die[0] == rank else None
            out.put((k, drive(core, feed, nxt, die_at=die)))
        except Exception as e:  # reported to the parent, which asserts on it
            out.put((k, Failure(rank, type(e).__name__, str(e))))


def run_processes(
    scenarios: list[Scenario], wall_s: float = 300.0
) -> list[list[RankRun | Failure]]:
    """Per scenario, every rank's run or failure, the scenarios in turn in one process per
    rank (all with the DP gate on); what a rank did not report in ``wall_s`` is a Failure.
    A scenario with ``die`` ends its rank's process, so it must come last."""
    world = scenarios[0].world
    if any(sc.world != world for sc in scenarios) or any(sc.die for sc in scenarios[:-1]):
        raise ValueError("one world size for all scenarios; only the last may kill a rank")
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    ports = [free_port() for _ in scenarios]
    procs = [ctx.Process(target=_child, args=(r, ports, scenarios, out)) for r in range(world)]
    for p in procs:
        p.start()
    got: dict[tuple[int, int], RankRun | Failure] = {}
    want = len(scenarios) * world - (1 if scenarios[-1].die else 0)
    deadline = time.monotonic() + wall_s
    try:
        while len(got) < want and time.monotonic() < deadline:
            try:
                k, item = out.get(timeout=1.0)
            except queue.Empty:
                if not any(p.is_alive() for p in procs):
                    break  # every rank exited; what they reported is in
                continue
            got[(k, item.rank)] = item
    finally:
        for p in procs:
            p.join(timeout=5.0)
            if p.is_alive():
                p.kill()
                p.join(timeout=5.0)
    return [
        [got.get((k, r), Failure(r, "NoReport", f"exit code {procs[r].exitcode}"))
         for r in range(world)]
        for k in range(len(scenarios))
    ]  # fmt: skip


@dataclass
class _Lb:
    """vLLM's DP load balancer over the rank threads (called while all wait at the barrier)."""

    arrivals: Sequence[Arrival]
    scheds: list[Any]
    pinned: bool = False
    clock: StepClock | None = None
    """Priced: arrivals' ``step`` is their modeled us, released as this clock passes them."""
    executors: list[Any] = field(default_factory=list)
    g: list[int] = field(default_factory=lambda: [0])
    any_now: list[bool] = field(default_factory=lambda: [False])

    def _due(self) -> list[Arrival]:
        clock = self.clock
        if clock is None:
            g = self.g[0]
            return [a for a in self.arrivals if a.step == g]
        works = [ex.work for ex in self.executors]
        for ex in self.executors:
            ex.work = None
        if any(w is not None for w in works):
            clock.close(works)  # the step every rank just ran (or joined with a dummy)
        else:
            clock.idle()  # nobody ran a pass: every engine idle until the next arrival
        return [self.arrivals[i] for i in clock.due()]

    def route(self) -> None:
        now = self._due()
        for a in now:
            if self.pinned:
                self.scheds[a.rank].add_request(make_request(a))
                continue
            best, best_score = 0, float("inf")
            for i, s in enumerate(self.scheds):
                running, waiting = s.get_request_counts()
                inflight = len(s.requests)
                score = float(max(inflight, waiting + running))
                if waiting:
                    score += waiting * 6.0 * max(0.0, s.get_kv_cache_usage() - 0.5)
                if score < best_score:
                    best, best_score = i, score
            self.scheds[best].add_request(make_request(a))
        self.any_now[0] = bool(now)


def run_threads(
    sc: Scenario, max_steps: int = 20_000, clock: StepClock | None = None
) -> list[RankRun]:
    """The ranks as threads of this process, routed by ``_Lb``; the gate per ``sc.gate``.
    With ``clock`` arrivals are in modeled us (``Arrival.step``) and every step is priced."""
    from densegate.integrations.vllm import dp_core

    if sc.gate:
        dp_core.install()
    else:
        dp_core.uninstall()
    scheds = [build_scheduler(sc.limits, sc.config_of(r), sc.world) for r in range(sc.world)]
    lb = _Lb(sc.arrivals, scheds, sc.pinned, clock, [None] * sc.world)
    barrier = threading.Barrier(sc.world, action=lb.route, timeout=sc.timeout_s)
    steps = sorted({a.step for a in sc.arrivals})

    def next_arrival(g: int) -> int | None:
        if clock is not None:
            return g + 1 if clock.pending else None  # the router jumps the clock there
        return next((s for s in steps if s > g), None)

    port = free_port()
    runs: list[RankRun | BaseException | None] = [None] * sc.world

    def rank_main(r: int) -> None:
        def feed(g: int) -> bool:
            if r == 0:
                lb.g[0] = g
            barrier.wait()  # rank 0 set g before waiting; the action routes at g
            return lb.any_now[0]

        try:
            group = dp_group(port, r, sc.world, sc.timeout_s)
            core = make_core(scheds[r], group, r, sc.world, sc.timeout_s)
            lb.executors[r] = core.model_executor
            runs[r] = drive(core, feed, next_arrival, max_steps=max_steps)
        except BaseException as e:
            runs[r] = e
            barrier.abort()

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(sc.world)]
    # vLLM's group set-up hides fd 1 (suppress_stdout, a dup2 to /dev/null and back); two
    # threads doing it at once can leave /dev/null there, so fd 1 is put back after.
    stdout = os.dup(1)
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        os.dup2(stdout, 1)
        os.close(stdout)
    dp_core.uninstall()
    for r in runs:
        if not isinstance(r, RankRun):
            raise RuntimeError(f"a rank thread failed: {r!r}")
    return [r for r in runs if isinstance(r, RankRun)]
