"""The options ``densegate run`` and the torchrun entry point (``densegate.cli.dp``) share.

Both build the same ``EngineConfig`` from the same flags, so they live here,
not in either command: neither command module imports the other's internals.
"""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["add_arguments", "engine_config", "threads"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group()
    src.add_argument("--gen", type=int, metavar="N", help="generate N requests (default 500)")
    src.add_argument("--trace", metavar="FILE", help="replay a JSON trace")
    p.add_argument("--seed", type=int, default=0, help="workload seed (default 0)")
    p.add_argument("--rate", type=float, default=0.8, help="mean arrivals per pass (default 0.8)")
    p.add_argument("--gate", choices=["on", "off"], default="on")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--dump-trace", metavar="FILE", help="write the workload as a JSON trace")
    p.add_argument(
        "--runner",
        choices=["auto", "null", "torch"],
        default="auto",
        help="torch runs the seeded model; null schedules only (auto: torch up to 300 "
        "requests, else null)",
    )
    p.add_argument("--device", default="cpu", help="torch device: cpu or cuda (default cpu)")
    p.add_argument("--dtype", default="float32", help="torch dtype (default float32)")
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        metavar="N",
        help="torch threads per pass (default: 1 on cpu, where the tiny model gains nothing "
        "from more and a busy core stalls every op; torch's own default on cuda)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    ck = p.add_argument_group("checkpoint")
    ck.add_argument(
        "--model",
        metavar="DIR",
        help="a local Hugging Face Llama checkpoint (config.json + model.safetensors or its "
        "index): the torch runner runs it; with --prompt/--prompt-ids, generate and print",
    )
    ck.add_argument(
        "--prompt", action="append", metavar="TEXT", help="a text prompt (needs tokenizer.json)"
    )
    ck.add_argument(
        "--prompt-ids",
        action="append",
        metavar="IDS",
        help='a token-id prompt, e.g. "1 15 42" (no tokenizer needed)',
    )
    ck.add_argument("--max-tokens", type=int, default=32, help="tokens per prompt (default 32)")
    ck.add_argument("--ignore-eos", action="store_true", help="do not stop at the model's EOS")
    ck.add_argument(
        "--stop-token-id", type=int, action="append", default=[], metavar="ID", help="stop at ID"
    )
    dp = p.add_argument_group("data parallel")
    dp.add_argument(
        "--dp",
        type=int,
        default=1,
        metavar="N",
        help="run N data-parallel ranks as local processes (gloo) with one aligned gate, "
        "then the same workload uncoordinated for comparison (default 1: no DP; under "
        "torchrun use python -m densegate.cli.dp)",
    )
    dp.add_argument(
        "--router",
        choices=["round-robin", "least-loaded"],
        default="round-robin",
        help="how requests are assigned to ranks (default round-robin)",
    )
    dp.add_argument(
        "--timed-rounds",
        type=int,
        default=0,
        metavar="R",
        help="run the uncoordinated phases on the same runner too, R rounds in alternating "
        "order, and print each phase's measured tokens/s, TTFT, ITL and tick ms with the "
        "ratio to gate-off (default 0: baselines on the null runner, untimed)",
    )
    dp.add_argument(
        "--dp-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="a collective slower than this means a rank is gone (default 30)",
    )
    g = p.add_argument_group("scheduler")
    g.add_argument("--max-num-seqs", type=int, default=128)
    g.add_argument("--max-num-batched-tokens", type=int, default=2048)
    g.add_argument("--block-size", type=int, default=16)
    g.add_argument("--num-blocks", type=int, default=4096)
    g.add_argument(
        "--max-model-len",
        type=int,
        default=_Default(4096),
        help="default 4096; with --model, the checkpoint's max_position_embeddings",
    )
    g.add_argument("--no-chunked-prefill", action="store_true")
    g.add_argument("--long-prefill-token-threshold", type=int, default=None)
    g.add_argument("--dense-tokens", type=int, default=None)
    g.add_argument("--max-hold-passes", type=int, default=30)
    g.add_argument(
        "--stall-passes",
        type=int,
        default=0,
        metavar="N",
        help="the gate's STALL valve: fire an under-full pass once the waiting fill has not "
        "grown for N passes (default 0: off; proved as V1-V4)",
    )


class _Default(int):
    """An int flag's default, told apart from the same value given on the command line."""


def engine_config(args: argparse.Namespace, runner: str) -> Any:
    from densegate.impl.engine import EngineConfig

    model = getattr(args, "model", None)
    max_model_len = args.max_model_len
    if model and isinstance(max_model_len, _Default):
        max_model_len = 0  # the checkpoint's max_position_embeddings
    return EngineConfig(
        model=model,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        block_size=args.block_size,
        num_blocks=args.num_blocks,
        max_model_len=int(max_model_len),
        enable_chunked_prefill=not args.no_chunked_prefill,
        long_prefill_token_threshold=args.long_prefill_token_threshold,
        dense_tokens=args.dense_tokens,
        max_hold_passes=args.max_hold_passes,
        stall_passes=args.stall_passes,
        gate_enabled=args.gate == "on",
        runner=runner,
        device=args.device,
        dtype=args.dtype,
        num_threads=threads(args) if runner == "torch" else None,
    )


def threads(args: argparse.Namespace) -> int | None:
    if args.threads is not None:
        return int(args.threads)
    return 1 if args.device == "cpu" else None
