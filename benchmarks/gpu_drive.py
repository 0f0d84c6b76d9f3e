"""What ``gpu_check.py`` drives runners with: hand-built passes, token comparison, timing.

Importing this module makes ``densegate.impl`` importable from the checkout
when it is not installed.
"""

from __future__ import annotations

import importlib.util
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
from densegate.impl.runners.cuda_graphs import choose_bucket  # noqa: E402
from densegate.impl.runners.torch_runner import TorchRunner  # noqa: E402
from densegate.impl.sched.batch import KVLayout, ScheduledBatch, SeqChunk  # noqa: E402
from densegate.impl.traces.replay import run_trace  # noqa: E402

LAYOUT = KVLayout(block_size=16, num_blocks=1024, max_model_len=512, max_num_seqs=64)


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


def make_seqs(n: int, steps: int, seed: int, vocab: int, layout: KVLayout = LAYOUT) -> list[Seq]:
    rng = random.Random(seed)
    free = list(range(layout.num_blocks))
    rng.shuffle(free)
    seqs = []
    for _ in range(n):
        prompt = [rng.randrange(vocab) for _ in range(rng.randint(5, 60))]
        need = -(-(len(prompt) + steps + 1) // layout.block_size)
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


def timing(
    g: TorchRunner,
    e: TorchRunner,
    vocab: int,
    sizes: tuple[int, ...],
    timed_steps: int,
    layout: KVLayout = LAYOUT,
) -> list[dict[str, Any]]:
    """Decode step time per batch size, graph runner ``g`` vs eager runner ``e`` (p50 of
    ``timed_steps`` passes after 5 warm-up ones), and the speed-up."""
    rows = []
    n_steps = timed_steps + 5
    for n in sizes:
        tg_times: list[float] = []
        te_times: list[float] = []
        tg = drive(
            g, make_seqs(n, n_steps + 1, 1000 + n, vocab, layout), n_steps + 1, False, tg_times
        )
        te = drive(
            e, make_seqs(n, n_steps + 1, 1000 + n, vocab, layout), n_steps + 1, False, te_times
        )
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
