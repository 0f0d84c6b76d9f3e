"""One real vLLM engine run on CPU, plain or gated: the end-to-end check's subprocess.

A script, not a test module: vLLM's CPU platform spawns workers that re-import
the main module, so ``LLM()`` must sit under ``if __name__ == "__main__":``,
and the torchvision/torchaudio guard reaches them through ``PYTHONPATH`` (see
conftest). The engine core runs in this process
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``) so the gate's counters can be read.
Prints one JSON line: the greedy tokens per prompt and, when gated, the gate's
counters and its per-step log.

Usage: ``python tests/support/vllm_e2e.py MODEL_DIR`` (runs plain, then gated, in one process)
"""

from __future__ import annotations

import gc
import json
import os
import sys

PROMPTS = 12
MAX_NUM_SEQS = 4
OUTPUT_LEN = 12


def _model(directory: str) -> None:
    """A tiny random-weight Llama (seeded), saved as safetensors: no download."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from tests.support.vllm_harness import LLAMA

    torch.manual_seed(0)
    cfg = LlamaConfig(
        **{k: v for k, v in LLAMA.items() if k not in ("architectures", "model_type")}
    )
    model = LlamaForCausalLM(cfg).to(torch.float32)
    model.save_pretrained(directory, safe_serialization=True)


def run(directory: str, mode: str) -> dict[str, object]:
    """Generate the prompts greedily with vLLM's scheduler (``plain``) or the gated one."""
    from vllm import LLM, SamplingParams

    kwargs: dict[str, object] = {}
    if mode == "gated":
        kwargs = {
            "scheduler_cls": "densegate.integrations.vllm.GatedScheduler",
            # on explicitly: vLLM's CPU build replays no CUDA graphs, where it is off by default
            "additional_config": {
                "densegate": {"dense_tokens": 48, "max_hold_passes": 4, "enabled": True}
            },
        }
    llm = LLM(
        model=directory,
        skip_tokenizer_init=True,
        enforce_eager=True,
        max_num_seqs=MAX_NUM_SEQS,
        max_num_batched_tokens=64,
        max_model_len=256,
        dtype="float32",
        seed=0,
        **kwargs,
    )
    prompts = [
        {"prompt_token_ids": [(i * 37 + k * 11) % 500 + 10 for k in range(6 + 5 * i)]}
        for i in range(PROMPTS)
    ]
    params = SamplingParams(max_tokens=OUTPUT_LEN, temperature=0.0, ignore_eos=True)
    sched = llm.llm_engine.engine_core.engine_core.scheduler
    steps: list[list[object]] = []
    schedule = sched.schedule

    def recording(throttle_prefills: bool = False) -> object:
        decoding = {r.request_id for r in sched.running if not r.is_prefill_chunk}
        out = schedule(throttle_prefills)
        prefill = sum(n for r, n in out.num_scheduled_tokens.items() if r not in decoding)
        fire = sched.gate_log[-1].fire if mode == "gated" else True
        steps.append([fire, prefill, len(out.num_scheduled_tokens) - len(out.scheduled_new_reqs)])
        return out

    sched.schedule = recording
    outs = llm.generate(prompts, params, use_tqdm=False)
    result: dict[str, object] = {"tokens": [list(o.outputs[0].token_ids) for o in outs]}
    result["scheduler"] = type(sched).__name__
    result["steps"] = steps
    if mode == "gated":
        result["counts"] = {r.name: n for r, n in sched.gate_counts.items()}
        result["hold_passes"] = sched.hold_passes
        result["log"] = [
            [g.fire, g.reason.name, g.waiting_tokens, g.observation.decode_seqs]
            for g in sched.gate_log
        ]
        result["summary"] = sched.gate_summary()
    del llm
    gc.collect()
    return result


def main(directory: str) -> dict[str, object]:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    if not os.path.exists(os.path.join(directory, "model.safetensors")):
        _model(directory)
    return {mode: run(directory, mode) for mode in ("plain", "gated")}


if __name__ == "__main__":
    print("DENSEGATE-E2E " + json.dumps(main(sys.argv[1])), flush=True)
