#!/usr/bin/env python3
"""GPU check of TorchRunner's CUDA-graph decode path (issue 4); needs a CUDA device.

What it checks and records (JSON in ``--out``, default ``$OUT`` or ``.``):

1. capture: graphs for every decode bucket are captured (count, seconds, memory);
2. graph == eager: greedy tokens of a graph runner and an eager runner (same seed)
   are identical over many decode steps, for several batch sizes, both for plain
   prefill-then-decode and for a schedule with chunked prefill and mixed passes;
   every decode-only pass within the largest bucket was a graph replay;
3. reference: in float64 the graph runner's tokens equal ``reference_generate``;
4. fallback: a decode pass larger than the largest bucket runs eager, same tokens;
5. timing: decode step time per batch size, graph vs eager, and the speed-up,
   for the tiny default model (float32) and a small one (bfloat16).

Exit status 0 when every check passed, 1 when one failed, 2 without CUDA.
Run from the repository root: ``python3 benchmarks/gpu_check.py``.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import random
import statistics
import sys
import time
import types
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]


def _import_impl() -> None:
    """Make ``densegate.impl`` importable from the checkout when it is not installed."""
    try:
        import densegate.impl  # noqa: F401
    except ModuleNotFoundError:
        pkg = types.ModuleType("densegate")
        pkg.__path__ = []
        sys.modules["densegate"] = pkg
        spec = importlib.util.spec_from_file_location(
            "densegate.impl",
            ROOT / "impl" / "__init__.py",
            submodule_search_locations=[str(ROOT / "impl")],
        )
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules["densegate.impl"] = mod
        spec.loader.exec_module(mod)


_import_impl()

from densegate.impl.batch import KVLayout, ScheduledBatch, SeqChunk  # noqa: E402
from densegate.impl.model import ModelConfig, reference_generate  # noqa: E402
from densegate.impl.torch_runner import TorchRunner  # noqa: E402

LAYOUT = KVLayout(block_size=16, num_blocks=1024, max_model_len=512, max_num_seqs=64)
SMALL = ModelConfig(
    vocab_size=8192, hidden=512, n_layers=8, n_heads=8, n_kv_heads=2, ffn_hidden=1408
)


class Seq:
    def __init__(self, prompt: list[int], blocks: list[int]) -> None:
        self.prompt = prompt
        self.out: list[int] = []
        self.blocks = blocks
        self.cached = 0

    @property
    def tokens(self) -> list[int]:
        return self.prompt + self.out


def make_seqs(n: int, steps: int, seed: int, vocab: int) -> list[Seq]:
    rng = random.Random(seed)
    free = list(range(LAYOUT.num_blocks))
    rng.shuffle(free)
    seqs = []
    for _ in range(n):
        prompt = [rng.randrange(vocab) for _ in range(rng.randint(5, 60))]
        need = -(-(len(prompt) + steps + 1) // LAYOUT.block_size)
        seqs.append(Seq(prompt, [free.pop() for _ in range(need)]))
    return seqs


def drive(
    runner: TorchRunner, seqs: list[Seq], steps: int, mixed: bool, decode_times: list[float]
) -> list[list[int]]:
    """Run until every sequence has ``steps`` tokens; decode-only pass times go to ``decode_times``.

    ``mixed``: the first half prefills in 24-token chunks from pass 0, the second
    half whole from pass 3, so passes are prefill, mixed and decode-only in turn.
    """
    half = len(seqs) // 2 if mixed else len(seqs)
    chunk = 24 if mixed else 10**9
    index = 0
    while any(len(s.out) < steps for s in seqs):
        prefills, decodes = [], []
        for i, s in enumerate(seqs):
            toks = s.tokens
            if s.cached < len(toks) - 1 or not s.out:
                if i >= half and index < 3:
                    continue
                n = min(chunk if i < half else 10**9, len(toks) - s.cached)
                end = s.cached + n
                prefills.append(
                    (
                        s,
                        SeqChunk(
                            i, toks[s.cached : end], s.cached, s.blocks, True, end == len(toks)
                        ),
                    )
                )
            elif len(s.out) < steps:
                decodes.append((s, SeqChunk(i, [toks[-1]], len(toks) - 1, s.blocks, False, True)))
        batch = ScheduledBatch(index, [c for _, c in prefills], [c for _, c in decodes])
        t0 = time.perf_counter()
        out = runner.execute(batch)
        dt = time.perf_counter() - t0
        if decodes and not prefills:
            decode_times.append(dt)
        sampled = [s for s, c in [*prefills, *decodes] if c.sample]
        for s, c in [*prefills, *decodes]:
            s.cached = c.start + len(c.token_ids)
        for s, t in zip(sampled, out, strict=True):
            s.out.append(t)
        index += 1
    return [s.out for s in seqs]


def compare(a: list[list[int]], b: list[list[int]]) -> dict[str, Any]:
    total = sum(len(x) for x in a)
    diff = sum(x != y for xa, xb in zip(a, b, strict=True) for x, y in zip(xa, xb, strict=True))
    first = next((i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y), None)
    return {"tokens": total, "mismatched": diff, "first_mismatched_seq": first, "equal": a == b}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--out", default=os.environ.get("OUT", "."), help="directory for gpu_check.json"
    )
    ap.add_argument("--steps", type=int, default=48, help="decode steps per sequence")
    ap.add_argument(
        "--timed-steps", type=int, default=40, help="decode passes timed per batch size"
    )
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print(
            "gpu_check: CUDA is not available here; this check needs an NVIDIA GPU. Nothing ran.",
            file=sys.stderr,
        )
        return 2
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    failures: list[str] = []
    res: dict[str, Any] = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "layout": dataclasses.asdict(LAYOUT),
        "steps": args.steps,
    }
    t_start = time.perf_counter()

    def build(
        cfg: ModelConfig, dtype: torch.dtype, graphs: bool, **kw: Any
    ) -> tuple[TorchRunner, float]:
        t0 = time.perf_counter()
        r = TorchRunner(LAYOUT, cfg, device="cuda", dtype=dtype, use_cuda_graphs=graphs, **kw)
        torch.cuda.synchronize()
        return r, time.perf_counter() - t0

    # 1-2. tiny model, float32: capture, graph == eager (plain and mixed schedules), coverage.
    cfg = ModelConfig()
    g32, cap_s = build(cfg, torch.float32, True)
    e32, _ = build(cfg, torch.float32, False)
    res["capture"] = {
        "buckets": list(g32.buckets),
        "graphs_captured": g32.stats.graphs_captured,
        "seconds": cap_s,
        "max_memory_allocated_mib": torch.cuda.max_memory_allocated() / 2**20,
    }
    if g32.stats.graphs_captured != len(g32.buckets) or not g32.buckets:
        failures.append("capture: graphs_captured != number of buckets")
    equality = []
    for n in (1, 3, 8, 13, 64):
        for mixed in (False, True):
            before = (g32.stats.graph_replays, g32.stats.eager_decode_steps)
            times: list[float] = []
            tg = drive(g32, make_seqs(n, args.steps, n, cfg.vocab_size), args.steps, mixed, times)
            te = drive(e32, make_seqs(n, args.steps, n, cfg.vocab_size), args.steps, mixed, [])
            cmp = compare(tg, te)
            replays = g32.stats.graph_replays - before[0]
            eager = g32.stats.eager_decode_steps - before[1]
            row = {
                "batch": n,
                "mixed": mixed,
                **cmp,
                "decode_passes": len(times),
                "graph_replays": replays,
                "eager_decode_steps": eager,
            }
            equality.append(row)
            if not cmp["equal"]:
                failures.append(f"graph != eager tokens (float32, batch {n}, mixed={mixed}): {cmp}")
            if replays != len(times) or eager:
                failures.append(f"decode passes not all replayed (batch {n}, mixed={mixed}): {row}")
    res["graph_vs_eager_float32"] = equality
    res["tiny_graph_runner_summary"] = g32.summary()

    # 3. float64: graph tokens equal the full-recompute reference (and eager).
    g64, _ = build(cfg, torch.float64, True)
    e64, _ = build(cfg, torch.float64, False)
    seqs = make_seqs(5, 16, 99, cfg.vocab_size)
    tg = drive(g64, seqs, 16, True, [])
    te = drive(e64, make_seqs(5, 16, 99, cfg.vocab_size), 16, True, [])
    ref = [reference_generate(g64.model, s.prompt, 16) for s in seqs]
    res["float64"] = {"graph_vs_eager": compare(tg, te), "graph_vs_reference": compare(tg, ref)}
    if tg != te or tg != ref:
        failures.append(f"float64 tokens differ: {res['float64']}")
    del g64, e64

    # 4. a decode pass above the largest bucket runs eager and still agrees.
    small_buckets, _ = build(cfg, torch.float32, True, buckets=(1, 2, 4, 8))
    tg = drive(small_buckets, make_seqs(13, 8, 7, cfg.vocab_size), 8, False, [])
    te = drive(e32, make_seqs(13, 8, 7, cfg.vocab_size), 8, False, [])
    st = small_buckets.stats
    res["fallback"] = {
        "tokens": compare(tg, te),
        "graph_replays": st.graph_replays,
        "eager_decode_steps": st.eager_decode_steps,
    }
    if tg != te or st.graph_replays != 0 or st.eager_decode_steps != 7:
        failures.append(f"fallback above the largest bucket: {res['fallback']}")
    del small_buckets

    # 5. timing per batch size, graph vs eager.
    def timing(
        g: TorchRunner, e: TorchRunner, vocab: int, sizes: tuple[int, ...]
    ) -> list[dict[str, Any]]:
        rows = []
        steps = args.timed_steps + 5
        for n in sizes:
            tg_times: list[float] = []
            te_times: list[float] = []
            tg = drive(g, make_seqs(n, steps + 1, 1000 + n, vocab), steps + 1, False, tg_times)
            te = drive(e, make_seqs(n, steps + 1, 1000 + n, vocab), steps + 1, False, te_times)
            mg = statistics.median(tg_times[5:]) * 1e3
            me = statistics.median(te_times[5:]) * 1e3
            rows.append(
                {
                    "batch": n,
                    "graph_ms_p50": mg,
                    "eager_ms_p50": me,
                    "speedup": me / mg,
                    "graph_tokens_per_s": n / mg * 1e3,
                    "eager_tokens_per_s": n / me * 1e3,
                    "tokens_equal": tg == te,
                }
            )
            print(
                f"  batch {n:3d}: graph {mg:7.3f} ms  eager {me:7.3f} ms  x{me / mg:5.2f}",
                flush=True,
            )
        return rows

    print("tiny float32 decode timing:", flush=True)
    res["timing_tiny_float32"] = timing(g32, e32, cfg.vocab_size, (1, 2, 4, 8, 16, 32, 64))
    del g32, e32
    print("small bfloat16 decode timing:", flush=True)
    gs, cap_small = build(SMALL, torch.bfloat16, True)
    es, _ = build(SMALL, torch.bfloat16, False)
    res["small_model"] = {
        "config": {
            f: getattr(SMALL, f)
            for f in (
                "vocab_size",
                "hidden",
                "n_layers",
                "n_heads",
                "n_kv_heads",
                "head_dim",
                "ffn_hidden",
            )
        },
        "capture_seconds": cap_small,
    }
    res["timing_small_bfloat16"] = timing(gs, es, SMALL.vocab_size, (1, 8, 32, 64))
    res["small_graph_runner_summary"] = gs.summary()

    res["failures"] = failures
    res["ok"] = not failures
    res["seconds"] = time.perf_counter() - t_start
    path = out_dir / "gpu_check.json"
    path.write_text(json.dumps(res, indent=2, default=str))
    print(
        json.dumps(
            {k: res[k] for k in ("device", "capture", "float64", "fallback", "ok", "seconds")},
            indent=2,
            default=str,
        )
    )
    for f in failures:
        print("FAIL:", f)
    print(f"wrote {path}")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
