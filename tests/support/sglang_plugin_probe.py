"""In a fresh interpreter: load plugins as an SGLang process does, report what SGLang builds.

``python -m tests.support.sglang_plugin_probe MODEL_DIR`` calls SGLang's own
``load_plugins()`` (entry-point group ``sglang.srt.plugins``; ``SGLANG_PLUGINS``
is honoured), then runs SGLang's real ``Scheduler.init_schedule_policy`` and
``Scheduler.get_new_batch_prefill`` on a scheduler made with ``Scheduler.__new__``
(no model) whose collaborators are plain holders of the fields those methods
read, and prints one JSON object: which class SGLang constructed, whether the
pass hook ran, and what the delayer logged. A fresh process each time, because
``load_plugins`` patches SGLang once per process.
"""

from __future__ import annotations

import json
import os
import sys
from types import SimpleNamespace
from typing import Any


def publish_one_rank(model: str) -> None:
    """A published ``ServerArgs`` (one rank, no DP attention) and SGLang's TP group on gloo."""
    from sglang.srt import runtime_context as rc
    from sglang.srt.distributed.parallel_state import (
        init_distributed_environment,
        init_model_parallel_group,
    )
    from sglang.srt.server_args import ServerArgs

    from tests.support.sglang_ranks import COLLECTIVE_TIMEOUT_S, free_port

    args = ServerArgs(
        model_path=model,
        device="cpu",
        skip_tokenizer_init=True,
        enable_prefill_delayer=True,
        prefill_delayer_max_delay_passes=7,
        max_prefill_tokens=4096,
        chunked_prefill_size=1024,
    )
    rc.publish(args, role="scheduler", ranks=rc.SpawnRanks(world_rank=0))
    init_distributed_environment(
        world_size=1,
        rank=0,
        distributed_init_method=f"tcp://127.0.0.1:{free_port()}",
        local_rank=0,
        backend="gloo",
        timeout=COLLECTIVE_TIMEOUT_S,
    )
    tp = init_model_parallel_group([[0]], 0, "gloo", use_pynccl=False, group_name="tp")
    rc.get_parallel().override_permanently(tp_group=tp)


def _scheduler() -> Any:
    from sglang.srt.managers.prefill_delayer import RecentPrefillBatchSizeTracker
    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.mem_cache.radix_cache import RadixCache

    s = Scheduler.__new__(Scheduler)
    s.schedule_policy = "fcfs"
    s.tree_cache = RadixCache.create_simulated()
    s.enable_hierarchical_cache = False
    s.enable_priority_scheduling = False
    s.schedule_low_priority_values_first = False
    s.metrics_reporter = SimpleNamespace(enable_metrics=False)
    s.metrics_collector = None
    Scheduler.init_schedule_policy(s)  # SGLang's own: builds the delayer
    # What get_new_batch_prefill reads on a pass with an empty waiting queue.
    usage = SimpleNamespace(get_max_pool_usage=lambda: 0.25)
    s.pool_stats_observer = SimpleNamespace(get_pool_stats=lambda: usage)
    s.grammar_manager = SimpleNamespace(has_waiting_grammars=lambda: False)
    s.is_hybrid_swa = False
    s.waiting_queue = []
    s.chunked_req = None
    s.is_mixed_chunk = False
    s.max_prefill_tokens = 4096
    s.chunked_prefill_size = 1024
    s.max_running_requests = 16  # SGLang's run-time value (the flag is left unset)
    assert isinstance(s.prefill_bs_tracker, RecentPrefillBatchSizeTracker)
    return s


def main(model: str) -> dict[str, Any]:
    os.environ["HF_HUB_OFFLINE"] = "1"
    from importlib.metadata import entry_points

    from sglang.srt.plugins import load_plugins

    load_plugins()
    import sglang.srt.managers.prefill_delayer as pd
    import sglang.srt.managers.scheduler as sched_mod

    report: dict[str, Any] = {
        "entry_points": sorted(
            f"{ep.name}={ep.value}" for ep in entry_points(group="sglang.srt.plugins")
        ),
        "delayer_class": f"{pd.PrefillDelayer.__module__}.{pd.PrefillDelayer.__qualname__}",
        "scheduler_binding": (
            f"{sched_mod.PrefillDelayer.__module__}.{sched_mod.PrefillDelayer.__qualname__}"
        ),
    }
    publish_one_rank(model)
    s = _scheduler()
    report["constructed"] = (
        f"{type(s.prefill_delayer).__module__}.{type(s.prefill_delayer).__name__}"
    )
    log = getattr(s.prefill_delayer, "log", None)
    if log is None:
        return report
    batch = SimpleNamespace(
        reqs=[SimpleNamespace()] * 3,
        batch_is_full=False,
        is_empty=lambda: False,
        batch_size=lambda: 3,
    )
    plans = [s.get_new_batch_prefill(batch) for _ in range(4)]  # hooked: observe, then SGLang's
    d = s.prefill_delayer
    report["passes"] = [[p.tick, p.fire, p.reason.name, list(p.reduced)] for p in log]
    report["batches"] = [p.batch_to_run is None for p in plans]
    report["gate"] = [d.gate_config.dense_tokens, d.gate_config.max_hold_passes, d.world_size,
                      d.gate_config.busy_decodes]  # fmt: skip
    return report


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
