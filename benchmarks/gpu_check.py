#!/usr/bin/env python3
"""GPU check of TorchRunner's CUDA-graph decode path (issue 4); needs a CUDA device.

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
from collections.abc import Sequence
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

from densegate.impl.engine import Engine, EngineConfig  # noqa: E402
from densegate.impl.runners.cuda_graphs import choose_bucket, decode_buckets  # noqa: E402
from densegate.impl.runners.model import ModelConfig, reference_generate  # noqa: E402
from densegate.impl.runners.torch_runner import TorchRunner  # noqa: E402
from densegate.impl.sched.batch import KVLayout, ScheduledBatch, SeqChunk  # noqa: E402
from densegate.impl.traces.replay import run_trace  # noqa: E402
from densegate.impl.traces.workload import synthetic_trace  # noqa: E402

LAYOUT = KVLayout(block_size=16, num_blocks=1024, max_model_len=512, max_num_seqs=64)
SMALL = ModelConfig(
    vocab_size=8192, hidden=512, n_layers=8, n_heads=8, n_kv_heads=2, ffn_hidden=1408
)


class StandInGraphs:
    """``--cpu-smoke`` only: the ``DecodeGraphs`` interface, "replaying" the graph body eagerly."""

    def __init__(self, runner: TorchRunner, buckets: Sequence[int]) -> None:
        self.runner = runner
        self.buckets = frozenset(buckets)

    def __contains__(self, bucket: object) -> bool:
        return bucket in self.buckets

    def replay(self, bucket: int) -> torch.Tensor:
        out: torch.Tensor = self.runner._decode_step(self.runner.decode_inputs(bucket))
        return out


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
    runner: TorchRunner,
    seqs: list[Seq],
    steps: int,
    mixed: bool,
    decode_times: list[float],
    static_buckets: Sequence[int] = (),
) -> list[list[int]]:
    """Run until every sequence has ``steps`` tokens; decode-only pass times go to ``decode_times``.

    ``mixed``: the first half prefills in 24-token chunks from pass 0, the second
    half whole from pass 3, so passes are prefill, mixed and decode-only in turn.
    ``static_buckets``: decode-only passes that fit one run the graph body eagerly
    (``run_decode`` padded to the bucket), i.e. exactly what a replay computes.
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
        bucket = choose_bucket(len(decodes), static_buckets) if decodes and static_buckets else None
        t0 = time.perf_counter()
        if bucket is not None and not prefills:
            out = runner.run_decode(batch.decodes, bucket)
            if runner.device.type == "cuda":
                torch.cuda.synchronize()
        else:
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


def engine_run(
    cfg: EngineConfig, runner: TorchRunner, trace: Any
) -> tuple[Engine, list[list[int]], list[list[int]]]:
    """``run_trace`` through a real engine; (engine, prompts, outputs) in request order."""
    engine = Engine(cfg, runner=runner)
    run_trace(engine, trace, seed=5)
    reqs = [engine.request(m.request_id) for m in engine.all_metrics()]
    return (
        engine,
        [list(r.prompt_token_ids) for r in reqs],
        [list(r.output_token_ids) for r in reqs],
    )


def coverage(engine: Engine, runner: TorchRunner) -> dict[str, Any]:
    """Runner counters next to what the scheduler's pass log says they must be."""
    log = list(engine.scheduler.pass_log)
    if len(log) != engine.scheduler.counters.passes:
        raise RuntimeError("pass_log_size too small for this check")
    decode_only = [r.decode_seqs for r in log if r.decode_seqs and not r.prefill_tokens]
    largest = max(runner.buckets, default=0)
    within = [n for n in decode_only if n <= largest]
    st = runner.stats
    want = {
        "graph_replays": len(within),
        "eager_decode_steps": len(decode_only) - len(within),
        "prefill_or_mixed_steps": sum(r.prefill_tokens > 0 for r in log),
        "padded_rows": sum((choose_bucket(n, runner.buckets) or n) - n for n in within),
        "decode_graph_tokens": sum(within),
    }
    kinds = st.summary()["kinds"]
    assert isinstance(kinds, dict)
    got = {
        "graph_replays": st.graph_replays,
        "eager_decode_steps": st.eager_decode_steps,
        "prefill_or_mixed_steps": st.prefill_or_mixed_steps,
        "padded_rows": st.padded_rows,
        "decode_graph_tokens": kinds.get("decode_graph", {}).get("tokens", 0),
    }
    return {"passes": len(log), "largest_bucket": largest, "want": want, "got": got}


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
    def timing(
        g: TorchRunner, e: TorchRunner, vocab: int, sizes: tuple[int, ...]
    ) -> list[dict[str, Any]]:
        rows = []
        n_steps = args.timed_steps + 5
        for n in sizes:
            tg_times: list[float] = []
            te_times: list[float] = []
            tg = drive(g, make_seqs(n, n_steps + 1, 1000 + n, vocab), n_steps + 1, False, tg_times)
            te = drive(e, make_seqs(n, n_steps + 1, 1000 + n, vocab), n_steps + 1, False, te_times)
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

    if not smoke:
        print("tiny float32 decode timing:", flush=True)
        res["timing_tiny_float32"] = timing(g32, e32, cfg.vocab_size, (1, 2, 4, 8, 16, 32, 64))
        del g32, e32
        print("small bfloat16 decode timing:", flush=True)
        gs, cap_small = build(SMALL, torch.bfloat16, True)
        es, _ = build(SMALL, torch.bfloat16, False)
        fields = ("vocab_size", "hidden", "n_layers", "n_heads", "n_kv_heads", "head_dim")
        res["small_model"] = {
            "config": {f: getattr(SMALL, f) for f in (*fields, "ffn_hidden")},
            "capture_seconds": cap_small,
        }
        res["timing_small_bfloat16"] = timing(gs, es, SMALL.vocab_size, (1, 8, 32, 64))
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


if __name__ == "__main__":
    sys.exit(main())
