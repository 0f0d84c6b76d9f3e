"""Replays densegate traces through vLLM's real scheduler, with no model.

``base_config()`` goes through vLLM's own config loading (``EngineArgs``) once,
for a tiny Llama config written to a temp dir (no weights are loaded: the
scheduler never runs a model). ``build()`` makes a scheduler of any class
from a copy with the given limits and a single full-attention KV group of
``num_blocks`` blocks. ``replay()`` feeds a trace step by step and synthetic
model outputs back: one token per request that finished its prefill or
decoded; with ``one_step_late`` the outputs of step N arrive after step N+1 is
scheduled, as vLLM's async engine loop does.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from densegate.impl.traces.workload import TraceRequest

TOKEN = 7
"""The token every synthetic output samples (never a stop token: ignore_eos is set)."""

LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "num_hidden_layers": 1,
    "vocab_size": 512,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-5,
    "torch_dtype": "float32",
    "bos_token_id": 1,
    "eos_token_id": 2,
}
"""A tiny random-weight Llama's config; head_dim 32 (vLLM's CPU attention rejects 16)."""


def write_model_config(directory: str) -> str:
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(LLAMA, f)
    return directory


CLI_ARGS = (
    "--skip-tokenizer-init",
    "--max-model-len=2048",
    "--max-num-seqs=64",
    "--max-num-batched-tokens=512",
    "--no-enable-prefix-caching",
    "--scheduler-cls=densegate.integrations.vllm.GatedScheduler",
    '--additional-config={"densegate": {"max_hold_passes": 9}}',
)
"""The command line ``base_config`` parses: the documented way to select the gated scheduler."""


@functools.cache
def base_config() -> Any:
    """A VllmConfig from vLLM's own ``EngineArgs`` (slow: done once per process)."""
    from vllm.engine.arg_utils import EngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    model = write_model_config(tempfile.mkdtemp(prefix="densegate-vllm-"))
    parser = EngineArgs.add_cli_args(FlexibleArgumentParser())
    argv = [*CLI_ARGS, "--model", model]
    return EngineArgs.from_cli_args(parser.parse_args(argv)).create_engine_config()


@dataclass(frozen=True)
class Limits:
    max_num_seqs: int = 16
    max_num_batched_tokens: int = 256
    block_size: int = 16
    num_blocks: int = 4096
    long_prefill_token_threshold: int = 0
    enable_chunked_prefill: bool = True
    watermark: float = 0.0
    max_model_len: int = 2048
    prefix_caching: bool = False
    prefill_schedule_interval: int = 1
    """vLLM's prefill cadence (applied on one engine from 0.33)."""


def build(cls: type, limits: Limits, densegate: dict[str, Any] | None = None) -> Any:
    """A scheduler of ``cls`` over a copy of ``base_config()`` with ``limits``.

    ``densegate`` replaces ``additional_config['densegate']``, with ``enabled`` true unless it
    says otherwise (on vLLM's CPU build, without CUDA graphs, the gate is off by default:
    these tests run it); None keeps the command line's.
    """
    import torch
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    vc = copy.deepcopy(base_config())
    sc = vc.scheduler_config
    sc.max_num_seqs = limits.max_num_seqs
    sc.max_num_batched_tokens = limits.max_num_batched_tokens
    sc.long_prefill_token_threshold = limits.long_prefill_token_threshold
    sc.enable_chunked_prefill = limits.enable_chunked_prefill
    sc.watermark = limits.watermark
    sc.prefill_schedule_interval = limits.prefill_schedule_interval
    vc.model_config.max_model_len = limits.max_model_len
    vc.cache_config.block_size = limits.block_size
    vc.cache_config.num_gpu_blocks = limits.num_blocks
    vc.cache_config.enable_prefix_caching = limits.prefix_caching
    if densegate is not None:
        vc.additional_config = {"densegate": {"enabled": True, **densegate}}
    spec = FullAttentionSpec(
        block_size=limits.block_size, num_kv_heads=2, head_size=32, dtype=torch.float32
    )
    kv = KVCacheConfig(
        num_blocks=limits.num_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(["model.layers.0.self_attn.attn"], spec)],
    )
    return cls(
        vllm_config=vc,
        kv_cache_config=kv,
        structured_output_manager=StructuredOutputManager(vc),
        block_size=limits.block_size,
    )


@dataclass
class Step:
    """One scheduled step as measured from vLLM's own output."""

    index: int
    prefill_tokens: int
    decode_seqs: int
    preempted: int
    total_tokens: int
    largest_prefill: int = 0
    """The most prefill tokens one request got this step."""
    gate: Any = None
    """The gated scheduler's ``GateStep`` for this step (None for vLLM's own)."""


@dataclass
class Replay:
    steps: list[Step] = field(default_factory=list)
    outputs: dict[str, list[int]] = field(default_factory=dict)
    finished: dict[str, str] = field(default_factory=dict)
    """request id -> finish reason name."""
    first_token_step: dict[str, int] = field(default_factory=dict)
    arrival_step: dict[str, int] = field(default_factory=dict)
    schedule_ns: list[int] = field(default_factory=list)


class Cadence:
    """vLLM's own prefill cadence as its DP engine core drives it (``prefill_schedule_interval``).

    The engine core's step counter starts at 0 when a wave starts (the first busy
    step after the engine ran dry) and counts busy steps; prefill is throttled
    unless ``counter % interval == 0``. A wave started iff no request present now
    was present at the previous step. Pass it as ``replay(throttle=...)``.
    """

    def __init__(self, sched: Any, interval: int) -> None:
        if not isinstance(interval, int) or interval < 2:
            raise ValueError(
                f"Cadence interval must be an int >= 2 (1: no cadence), got {interval!r}"
            )
        self.sched = sched
        self.interval = interval
        self.counter = 0
        self.seen: set[str] = set()

    def __call__(self, step: int) -> bool:
        now = set(self.sched.requests)
        if not now & self.seen:
            self.counter = 0
        self.seen = now
        if not now:
            return False
        self.counter += 1
        return (self.counter - 1) % self.interval != 0


def prompt_tokens(salt: int, prompt_len: int) -> list[int]:
    """A request's prompt: at least 2 tokens (vLLM's deferral path admits a 1-token one
    as a decode), distinct per request so no prefix is shared."""
    return [(salt * 7919 + i * 31) % 500 + 10 for i in range(max(2, prompt_len))]


def _request(
    rid: str, prompt_len: int, output_len: int, salt: int, prefix: list[int], hasher: Any
) -> Any:
    from vllm.sampling_params import SamplingParams
    from vllm.v1.request import Request

    prompt = (prefix + prompt_tokens(salt, prompt_len))[: max(2, prompt_len)]
    params = SamplingParams(max_tokens=output_len, ignore_eos=True)
    return Request(rid, prompt, params, None, arrival_time=0.0, block_hasher=hasher)


def _hasher(sched: Any) -> Any:
    """vLLM's block hasher, as its engine core sets one up when prefix caching is on."""
    if not sched.cache_config.enable_prefix_caching:
        return None
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash

    fn = get_hash_fn_by_name(sched.cache_config.prefix_caching_hash_algo)
    init_none_hash(fn)
    return get_request_block_hasher(sched.block_size, fn)


def replay(
    sched: Any,
    trace: Sequence[TraceRequest],
    *,
    one_step_late: bool = False,
    aborts: dict[int, int] | None = None,
    throttle: Any = None,
    shared_prefix: int = 0,
    max_steps: int = 200_000,
) -> Replay:
    """Run ``trace`` to the end; ``aborts`` maps request index -> steps after arrival.

    ``throttle(step) -> bool`` is passed to ``schedule(throttle_prefills=...)``
    (vLLM's own prefill cadence). ``shared_prefix`` tokens open every prompt
    (for prefix-cache hits).
    """
    import time

    from vllm.v1.outputs import ModelRunnerOutput
    from vllm.v1.request import RequestStatus

    rep = Replay()
    pending: list[tuple[Any, ModelRunnerOutput]] = []
    abort_at: dict[int, list[str]] = {}
    order = sorted(range(len(trace)), key=lambda i: (trace[i].arrival_pass, i))
    nxt = 0
    step = 0
    prefix = [3] * shared_prefix
    hasher = _hasher(sched)

    def deliver(out: Any, mro: ModelRunnerOutput) -> None:
        for eco in sched.update_from_output(out, mro).values():
            for o in eco.outputs:
                got = rep.outputs.setdefault(o.request_id, [])
                if o.new_token_ids and not got:
                    rep.first_token_step[o.request_id] = step
                got.extend(o.new_token_ids)
                if o.finish_reason is not None:
                    rep.finished[o.request_id] = o.finish_reason.name

    while nxt < len(order) or sched.has_requests() or pending:
        if step >= max_steps:
            raise RuntimeError(f"trace did not drain in {max_steps} steps")
        while nxt < len(order) and trace[order[nxt]].arrival_pass <= step:
            i = order[nxt]
            t = trace[i]
            rid = str(i)
            sched.add_request(_request(rid, t.prompt_len, t.output_len, i, prefix, hasher))
            rep.arrival_step[rid] = step
            if aborts and i in aborts:
                abort_at.setdefault(step + aborts[i], []).append(rid)
            nxt += 1
        for rid in abort_at.pop(step, []):
            if rid not in rep.finished:
                sched.finish_requests(rid, RequestStatus.FINISHED_ABORTED)
                rep.finished[rid] = "ABORT"
        decoding = {r.request_id for r in sched.running if not r.is_prefill_chunk}
        th = bool(throttle(step)) if throttle is not None else False
        t0 = time.perf_counter_ns()
        out = sched.schedule(th)
        rep.schedule_ns.append(time.perf_counter_ns() - t0)
        prefill = decodes = largest = 0
        for rid, n in out.num_scheduled_tokens.items():
            if rid in decoding:
                decodes += 1
            else:
                prefill += n
                largest = max(largest, n)
        log = getattr(sched, "gate_log", None)
        rep.steps.append(
            Step(step, prefill, decodes, len(out.preempted_req_ids or ()),
                 out.total_num_scheduled_tokens, largest, log[-1] if log else None)
        )  # fmt: skip
        ids = list(out.num_scheduled_tokens)
        sampled = [[] if sched.requests[rid].is_prefill_chunk else [TOKEN] for rid in ids]
        mro = ModelRunnerOutput(
            req_ids=ids, req_id_to_index={r: k for k, r in enumerate(ids)},
            sampled_token_ids=sampled,
        )  # fmt: skip
        if one_step_late:
            if pending:
                deliver(*pending.pop(0))
            pending.append((out, mro))
            if not sched.has_requests() and nxt >= len(order):
                while pending:
                    deliver(*pending.pop(0))
        else:
            deliver(out, mro)
        step += 1
    return rep
