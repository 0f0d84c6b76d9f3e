#!/usr/bin/env python3
"""GPU check of TorchRunner's CUDA-graph decode path; needs a CUDA device.

What it checks and records (JSON in ``--out``, default ``$OUT`` or ``.``):

1. capture: graphs for every decode bucket are captured (count, seconds, memory);
2. float32, several batch sizes, plain prefill-then-decode and a chunked/mixed
   schedule: every decode-only pass within the largest bucket was a replay
   (required). Tokens of the graph vs the same static step run eagerly, and vs
   the eager runner's own decode path (context cut to the batch's lengths, rows
   grouped: another summation order), are recorded; a float32 mismatch is a
   warning, since a near-tie can flip without a bug (check 3 is the sound one);
3. graph == cut-context eager == reference, float64 (where summation order cannot
   flip an argmax), for the same schedules;
4. fallback: a decode pass larger than the largest bucket runs eager, same tokens;
5. engine end to end, float64: ``Engine`` + ``run_trace`` over a synthetic trace,
   gate on and off, graph runner (buckets 1-8, 16 sequences) vs eager runner vs
   ``reference_generate``: identical tokens; runner counters equal what the
   scheduler's pass log implies (graph replays == decode-only passes of at most 8
   rows, eager decode steps == the larger ones, padded rows == the bucket slack);
   then float32 with default buckets: every decode-only pass replayed;
6. timing: decode step time per batch size, graph vs eager, and the speed-up,
   for the tiny default model (float32) and a small one (bfloat16).

Exit status 0 when every check passed, 1 when one failed, 2 without CUDA.
``--cpu-smoke`` runs checks 2-5 on the CPU with the graph body run eagerly in
place of replays (no timing), to catch mistakes in this script without a GPU.

``--real-size`` runs only the real-size mode (``gpu_real_size.py``): random
weights of Llama-3.2-1B's shape in bf16, written as a Hugging Face checkpoint
and read back by the same loader as ``--model DIR``, then decode timing graph
vs eager per batch size; with ``--cpu-smoke`` the same path at toy size.
Run from the repository root: ``python3 benchmarks/gpu_check.py``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_drive import (
    LAYOUT,
    StandInGraphs,
    compare,
    coverage,
    drive,
    engine_run,
    make_seqs,
    timing,
)

from densegate.impl.engine import EngineConfig
from densegate.impl.runners.cuda_graphs import decode_buckets
from densegate.impl.runners.model import reference_generate
from densegate.impl.runners.model_config import ModelConfig
from densegate.impl.runners.torch_runner import TorchRunner
from densegate.impl.sched.batch import KVLayout
from densegate.impl.traces.workload import synthetic_trace

SMALL = ModelConfig(
    vocab_size=8192, hidden=512, n_layers=8, n_heads=8, n_kv_heads=2, ffn_hidden=1408
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument(
        "--out", default=os.environ.get("OUT", "."), help="directory for gpu_check.json"
    )
    ap.add_argument("--steps", type=int, default=48, help="decode steps per sequence")
    ap.add_argument(
        "--timed-steps", type=int, default=40, help="decode passes timed per batch size"
    )
    ap.add_argument(
        "--cpu-smoke",
        action="store_true",
        help="run checks 2-5 on the CPU, graph body run eagerly (no timing)",
    )
    ap.add_argument(
        "--real-size",
        action="store_true",
        help="only the real-size mode: Llama-3.2-1B's shape in bf16 through the checkpoint "
        "loader, decode timing graph vs eager (with --cpu-smoke: a tiny model on the CPU)",
    )
    args = ap.parse_args(argv)
    smoke = args.cpu_smoke
    if not smoke and not torch.cuda.is_available():
        print(
            "gpu_check: CUDA is not available here; this check needs an NVIDIA GPU. Nothing ran.",
            file=sys.stderr,
        )
        return 2
    device = "cpu" if smoke else "cuda"
    steps = min(args.steps, 12) if smoke else args.steps
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    if args.real_size:
        return _real_size(smoke, args.timed_steps, out_dir)
    failures: list[str] = []
    warnings: list[str] = []

    def sync() -> None:
        if not smoke:
            torch.cuda.synchronize()

    res: dict[str, Any] = {
        "device": "cpu (smoke)" if smoke else torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "layout": dataclasses.asdict(LAYOUT),
        "steps": steps,
    }
    t_start = time.perf_counter()

    def build(
        cfg: ModelConfig,
        dtype: torch.dtype,
        graphs: bool,
        layout: KVLayout = LAYOUT,
        buckets: Sequence[int] | None = None,
    ) -> tuple[TorchRunner, float]:
        t0 = time.perf_counter()
        if smoke:
            r = TorchRunner(layout, cfg, device=device, dtype=dtype)
            if graphs:
                r.buckets = tuple(buckets or decode_buckets(layout.max_num_seqs))
                r._graphs = StandInGraphs(r, r.buckets)  # type: ignore[assignment]
        else:
            r = TorchRunner(
                layout, cfg, device=device, dtype=dtype, use_cuda_graphs=graphs, buckets=buckets
            )
        sync()
        return r, time.perf_counter() - t0

    # 1-2. tiny model, float32: capture, graph == static eager, coverage.
    cfg = ModelConfig()
    g32, cap_s = build(cfg, torch.float32, True)
    e32, _ = build(cfg, torch.float32, False)
    res["capture"] = {
        "buckets": list(g32.buckets),
        "graphs_captured": g32.stats.graphs_captured,
        "seconds": cap_s,
        "max_memory_allocated_mib": 0.0 if smoke else torch.cuda.max_memory_allocated() / 2**20,
    }
    if not g32.buckets or (not smoke and g32.stats.graphs_captured != len(g32.buckets)):
        failures.append("capture: graphs_captured != number of buckets")
    equality = []
    sizes = (1, 3, 8, 13) if smoke else (1, 3, 8, 13, 64)
    for n in sizes:
        for mixed in (False, True):
            before = (g32.stats.graph_replays, g32.stats.eager_decode_steps)
            times: list[float] = []
            tg = drive(g32, make_seqs(n, steps, n, cfg.vocab_size), steps, mixed, times)
            ts = drive(
                e32,
                make_seqs(n, steps, n, cfg.vocab_size),
                steps,
                mixed,
                [],
                static_buckets=g32.buckets,
            )
            te = drive(e32, make_seqs(n, steps, n, cfg.vocab_size), steps, mixed, [])
            replays = g32.stats.graph_replays - before[0]
            eager = g32.stats.eager_decode_steps - before[1]
            row: dict[str, Any] = {
                "batch": n,
                "mixed": mixed,
                "graph_vs_static_eager": compare(tg, ts),
                "graph_vs_cut_eager": compare(tg, te),
                "decode_passes": len(times),
                "graph_replays": replays,
                "eager_decode_steps": eager,
            }
            equality.append(row)
            if tg != ts:
                warnings.append(f"graph != static eager tokens (float32, batch {n}, mixed={mixed})")
            if replays != len(times) or eager:
                failures.append(f"decode passes not all replayed (batch {n}, mixed={mixed}): {row}")
    res["graph_vs_eager_float32"] = equality
    res["float32_graph_vs_cut_eager_mismatched_tokens"] = sum(
        r["graph_vs_cut_eager"]["mismatched"] for r in equality
    )
    res["tiny_graph_runner_summary"] = g32.summary()

    # 3. float64: graph == cut-context eager == full-recompute reference.
    g64, _ = build(cfg, torch.float64, True)
    e64, _ = build(cfg, torch.float64, False)
    f64 = []
    for n, mixed in ((1, False), (5, True), (13, True)):
        seqs64 = make_seqs(n, 16, 99 + n, cfg.vocab_size)
        tg = drive(g64, seqs64, 16, mixed, [])
        te = drive(e64, make_seqs(n, 16, 99 + n, cfg.vocab_size), 16, mixed, [])
        ref = [reference_generate(g64.model, s.prompt, 16) for s in seqs64]
        row = {"batch": n, "mixed": mixed, "graph_vs_eager": compare(tg, te)}
        row["graph_vs_reference"] = compare(tg, ref)
        f64.append(row)
        if tg != te or tg != ref:
            failures.append(f"float64 tokens differ: {row}")
    res["float64"] = f64
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

    # 5. the engine end to end: scheduler-made passes, graphs on, counters vs pass log.
    trace = synthetic_trace(
        24 if smoke else 48,
        3,
        rate=1.5,
        prompt_median=40,
        output_median=16 if smoke else 32,
        max_model_len=256,
    )
    e2e: dict[str, Any] = {"requests": len(trace)}
    for gate in (True, False):
        ecfg = EngineConfig(
            runner="torch",
            device=device,
            dtype="float64",
            max_num_seqs=16,
            max_num_batched_tokens=128,
            block_size=16,
            num_blocks=512,
            max_model_len=256,
            max_hold_passes=4,
            gate_enabled=gate,
            pass_log_size=1 << 20,
        )
        layout = ecfg.layout
        graph_runner, _ = build(cfg, torch.float64, True, layout=layout, buckets=(1, 2, 4, 8))
        eager_runner, _ = build(cfg, torch.float64, False, layout=layout)
        eng_g, prompts, out_g = engine_run(ecfg, graph_runner, trace)
        _, prompts_e, out_e = engine_run(ecfg, eager_runner, trace)
        ref = [
            reference_generate(graph_runner.model, p, len(o))
            for p, o in zip(prompts, out_g, strict=True)
        ]
        cov = coverage(eng_g, graph_runner)
        key = "gate_on" if gate else "gate_off"
        e2e[key] = {
            "graph_vs_eager": compare(out_g, out_e),
            "graph_vs_reference": compare(out_g, ref),
            "coverage": cov,
            "reasons": {r.name: c for r, c in eng_g.scheduler.counters.reasons.items()},
            "runner_summary": graph_runner.summary(),
        }
        if prompts != prompts_e or out_g != out_e or out_g != ref:
            failures.append(f"engine float64 ({key}): graph, eager and reference tokens differ")
        if cov["want"] != cov["got"]:
            failures.append(f"engine ({key}): runner counters do not match the pass log: {cov}")
        if not cov["want"]["graph_replays"] or not cov["want"]["eager_decode_steps"]:
            failures.append(f"engine ({key}): trace did not exercise replay and fallback: {cov}")
    e2e["gate_on_equals_gate_off"] = (
        e2e["gate_on"]["graph_vs_reference"]["equal"]
        and (e2e["gate_off"]["graph_vs_reference"]["equal"])
    )
    # float32, default buckets (largest == max_num_seqs): every decode-only pass replays.
    ecfg32 = dataclasses.replace(ecfg, dtype="float32", gate_enabled=True)
    g32e, _ = build(cfg, torch.float32, True, layout=ecfg32.layout)
    eng32, _, _ = engine_run(ecfg32, g32e, trace)
    cov32 = coverage(eng32, g32e)
    e2e["float32_default_buckets"] = {"coverage": cov32, "runner_summary": g32e.summary()}
    if cov32["want"] != cov32["got"] or cov32["got"]["eager_decode_steps"]:
        failures.append(f"engine float32: not every decode-only pass replayed: {cov32}")
    res["engine"] = e2e

    # 6. timing per batch size, graph vs eager.
    if not smoke:
        print("tiny float32 decode timing:", flush=True)
        res["timing_tiny_float32"] = timing(
            g32, e32, cfg.vocab_size, (1, 2, 4, 8, 16, 32, 64), args.timed_steps
        )
        del g32, e32
        print("small bfloat16 decode timing:", flush=True)
        gs, cap_small = build(SMALL, torch.bfloat16, True)
        es, _ = build(SMALL, torch.bfloat16, False)
        fields = ("vocab_size", "hidden", "n_layers", "n_heads", "n_kv_heads", "head_dim")
        res["small_model"] = {
            "config": {f: getattr(SMALL, f) for f in (*fields, "ffn_hidden")},
            "capture_seconds": cap_small,
        }
        res["timing_small_bfloat16"] = timing(
            gs, es, SMALL.vocab_size, (1, 8, 32, 64), args.timed_steps
        )
        res["small_graph_runner_summary"] = gs.summary()

    res["failures"] = failures
    res["warnings"] = warnings
    res["ok"] = not failures
    res["seconds"] = time.perf_counter() - t_start
    path = out_dir / ("gpu_check_cpu_smoke.json" if smoke else "gpu_check.json")
    path.write_text(json.dumps(res, indent=2, default=str))
    brief = ("device", "capture", "float32_graph_vs_cut_eager_mismatched_tokens", "fallback")
    print(json.dumps({k: res[k] for k in (*brief, "ok", "seconds")}, indent=2, default=str))
    for w in warnings:
        print("WARN:", w)
    for f in failures:
        print("FAIL:", f)
    print(f"wrote {path}")
    return 0 if not failures else 1


def _real_size(smoke: bool, timed_steps: int, out_dir: Path) -> int:
    """``--real-size``: write, load and time a model of Llama-3.2-1B's shape (``gpu_real_size``)."""
    from gpu_real_size import real_size_check

    t0 = time.perf_counter()
    res = {
        "device": "cpu (smoke)" if smoke else torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "real_size": real_size_check(smoke, min(timed_steps, 3) if smoke else timed_steps),
        "seconds": time.perf_counter() - t0,
    }
    path = out_dir / ("gpu_check_real_size_cpu_smoke.json" if smoke else "gpu_check_real_size.json")
    path.write_text(json.dumps(res, indent=2, default=str))
    brief = {k: res["real_size"][k] for k in ("parameters", "load_seconds", "timing")}
    print(json.dumps(brief, indent=2, default=str))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
