"""Real SGLang ranks on gloo: the plugin's delayer built as SGLang builds it, driven pass by pass.

Each rank is a process that publishes a real ``ServerArgs`` (DP attention,
``dp_size = tp_size = world``, ``--enable-prefill-delayer``; the model is only a
``config.json``, nothing is loaded), builds SGLang's TP group with SGLang's own
``init_distributed_environment`` and ``init_model_parallel_group`` on gloo,
constructs ``DenseGatePrefillDelayer`` with the arguments SGLang's scheduler
passes, and runs a ``RankLoad`` (``tests.support.sglang_load``) through SGLang's
real ``PrefillDelayerSinglePassExecutor`` for a fixed number of passes. Every
collective is SGLang's ``all_gather_single`` over that group. Each rank sends back
its decision log as plain records (``tests.support.sglang_judge.Record``).

Every wait is bounded: gloo's timeout on each collective, and ``run_ranks``'s on
the whole group.
"""

from __future__ import annotations

import json
import os
import queue
import socket
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from densegate.impl.traces.workload import TraceRequest
from tests.support.sglang_load import Limits, RankLoad

COLLECTIVE_TIMEOUT_S = 60
"""gloo's timeout on each collective: a rank that never joins fails the test, never hangs it."""

TINY_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "num_hidden_layers": 2,
    "vocab_size": 256,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-6,
}
"""A model directory SGLang's config resolution can read offline (no weights: none load)."""


@dataclass(frozen=True)
class RankPlan:
    """One group run: every rank gets the same plan and picks its own requests."""

    world: int
    passes: int
    max_delay_passes: int
    env: dict[str, str]
    trace: list[tuple[int, TraceRequest]]
    """(rank, request): the requests routed to each rank."""
    limits: Limits = field(default_factory=Limits)
    idle_ranks: tuple[int, ...] = ()
    """Ranks that never get a request: they only ever join through ``finalize``."""
    flag_running: bool = True
    """Give ``--max-running-requests`` (``limits.max_running_requests``); False leaves it to
    SGLang, as most launches do (each rank's load still has that many slots)."""


def model_dir(root: Path) -> Path:
    """A directory with the tiny ``config.json`` (created once)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps(TINY_CONFIG))
    return root


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _setup(rank: int, plan: RankPlan, port: int, model: str) -> Any:
    os.environ.update(plan.env)
    os.environ["HF_HUB_OFFLINE"] = "1"
    from sglang.srt import runtime_context as rc
    from sglang.srt.distributed.parallel_state import (
        init_distributed_environment,
        init_model_parallel_group,
    )
    from sglang.srt.server_args import ServerArgs

    lim = plan.limits
    args = ServerArgs(
        model_path=model,
        device="cpu",
        skip_tokenizer_init=True,
        tp_size=plan.world,
        dp_size=plan.world,
        enable_dp_attention=True,
        enable_prefill_delayer=True,
        prefill_delayer_max_delay_passes=plan.max_delay_passes,
        max_prefill_tokens=lim.max_prefill_tokens,
        chunked_prefill_size=lim.chunked_prefill_size * plan.world,  # DP attention divides it
        max_running_requests=lim.max_running_requests if plan.flag_running else None,
    )
    rc.publish(args, role="scheduler", ranks=rc.SpawnRanks(world_rank=rank))
    init_distributed_environment(
        world_size=plan.world,
        rank=rank,
        distributed_init_method=f"tcp://127.0.0.1:{port}",
        local_rank=rank,
        backend="gloo",
        timeout=COLLECTIVE_TIMEOUT_S,
    )
    tp = init_model_parallel_group(
        [list(range(plan.world))],
        rank,
        "gloo",
        use_pynccl=False,  # SGLang's NCCL communicator; the delayer rides the CPU group
        use_custom_allreduce=False,
        use_mscclpp=False,
        use_torch_symm_mem_allreduce=False,
        group_name="tp",
    )
    rc.get_parallel().override_permanently(tp_group=tp)
    return rc


def rank_main(rank: int, plan: RankPlan, port: int, model: str, out: Any) -> None:
    """One rank, end to end; puts ``(rank, "ok", payload)`` or ``(rank, "error", text)``."""
    try:
        rc = _setup(rank, plan, port, model)
        from sglang.srt.managers.prefill_delayer import (
            PrefillDelayerSinglePassExecutor,
            RecentPrefillBatchSizeTracker,
        )

        from densegate.integrations.sglang.delayer import DenseGatePrefillDelayer
        from densegate.integrations.sglang.observe import PassObservation

        schedule = rc.get_schedule()
        delayer = DenseGatePrefillDelayer(  # the arguments Scheduler.init_schedule_policy passes
            metrics_collector=None,
            max_delay_passes=schedule.prefill_delayer_max_delay_passes,
            token_usage_low_watermark=schedule.prefill_delayer_token_usage_low_watermark,
            debug_log_enabled=True,
        )
        busy_at_start = delayer.gate_config.busy_decodes
        load = RankLoad(plan.limits)
        for r, req in plan.trace:
            if r == rank:
                load.add(req)
        tracker = RecentPrefillBatchSizeTracker(window_size=16)

        def hook(view: RankLoad) -> None:
            slots = view.limits.max_running_requests  # SGLang's run-time value, as observe reads
            delayer.observe_pass(PassObservation(*view.observation(), running_slots=slots))

        results = []
        for t in range(plan.passes):
            usage = 0.95 if rank == 1 and t % 23 in (5, 6) else 0.5  # KV pressure, now and then
            ex = PrefillDelayerSinglePassExecutor(delayer, token_usage=usage)
            results.append(load.step(t, ex, tracker, before=hook))
        records = [
            (p.tick, p.fire, p.reason.name, p.hold_passes, p.reduced, tuple(p.local.to_vector(
                delayer.gate_config.dense_tokens, delayer.gate_config.fill_tokens)))
            for p in delayer.log
        ]  # fmt: skip
        payload = {
            "records": records,
            "ticks": delayer.tick,
            "config": delayer.gate_config,
            "busy_at_start": busy_at_start,
            "world": delayer.world_size,
            "prefilled": [r.prefill_reqs > 0 for r in results],
            "negotiated_locally": [p.local_prefillable for p in delayer.log],
            "finished": load.finished,
            "submitted": load.submitted,
        }
        out.put((rank, "ok", payload))
    except BaseException:
        out.put((rank, "error", traceback.format_exc()))


def run_ranks(plan: RankPlan, root: Path, timeout_s: float) -> dict[int, Any]:
    """Run ``plan`` on ``plan.world`` spawned processes; each rank's payload, or raise."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port, model = free_port(), str(model_dir(root))
    procs = [
        ctx.Process(target=rank_main, args=(r, plan, port, model, out), daemon=True)
        for r in range(plan.world)
    ]
    for p in procs:
        p.start()
    got: dict[int, Any] = {}
    errors = []
    try:
        for _ in procs:
            try:
                rank, status, payload = out.get(timeout=timeout_s)
            except queue.Empty:
                raise TimeoutError(
                    f"ranks {sorted(set(range(plan.world)) - set(got))} did not report "
                    f"within {timeout_s}s"
                ) from None
            if status == "ok":
                got[rank] = payload
            else:
                errors.append(f"rank {rank}:\n{payload}")
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    if errors:
        raise RuntimeError("\n".join(errors))
    return got
