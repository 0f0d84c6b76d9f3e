"""The flags more than one command has, defined once so each reads and defaults the same.

``densegate run`` and the torchrun entry point (``densegate.cli.dp``) build the
same ``EngineConfig`` from the same flags (``add_arguments``), so those live
here, not in either command; ``--quiet`` and ``--threads``, which bench, tune
and profile have too, come from ``add_quiet`` and ``add_threads``. Scheduler
defaults are ``REFERENCE_CONFIG``'s, the scheduler the bench runs, so ``run``
and ``bench`` describe one scheduler. A renamed flag keeps its old spelling as
a hidden alias with the same ``dest``, so old command lines still work.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from densegate.cli.flag_types import count, device, output_file, positive_float, seconds
from densegate.impl.sched.config import REFERENCE_CONFIG
from densegate.impl.settings import flagged
from densegate.impl.validation import MAX_SIZE, STARTUP_TIMEOUT_S, TIMEOUT_S

__all__ = [
    "MAX_REQUESTS",
    "add_alias",
    "add_arguments",
    "add_quiet",
    "add_setting_flags",
    "add_threads",
    "engine_config",
    "threads",
]

REF = REFERENCE_CONFIG

MAX_REQUESTS = 1_000_000
"""The most requests a generated workload may have: more would build for minutes, printing
nothing (``--requests``, run's and bench's and tune's)."""


def add_alias(p: Any, old: str, dest: str, **kw: Any) -> None:
    """``old``, a former spelling of the flag that sets ``dest``: accepted, not shown."""
    p.add_argument(old, dest=dest, help=argparse.SUPPRESS, default=argparse.SUPPRESS, **kw)


def add_quiet(
    p: argparse.ArgumentParser, what: str = "no progress lines on stderr", dest: str = "quiet"
) -> None:
    """``--quiet``, every command's one spelling for "no progress output"."""
    p.add_argument("--quiet", dest=dest, action="store_true", help=what)


def add_threads(p: Any) -> None:
    """``--threads N``: torch's intra-op threads, read by ``threads(args)``."""
    p.add_argument(
        "--threads",
        type=count(0),
        default=None,
        metavar="N",
        help="torch threads per pass (default: 1 on cpu, where the tiny model gains nothing "
        "from more and a busy core stalls every op; torch's own on cuda; 0: torch's own)",
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``densegate run``'s flags (and ``python -m densegate.cli.dp``'s)."""
    src = p.add_mutually_exclusive_group()
    src.add_argument(
        "--requests",
        dest="gen",
        type=count(1, MAX_REQUESTS),
        metavar="N",
        help=f"generate N requests (default 500, at most {MAX_REQUESTS}), their lengths drawn "
        "within --max-model-len",
    )
    add_alias(src, "--gen", "gen", type=count(1, MAX_REQUESTS))
    src.add_argument("--trace", metavar="FILE", help="replay a JSON trace")
    p.add_argument("--seed", type=int, default=0, help="workload seed (default 0)")
    p.add_argument(
        "--rate",
        type=positive_float,
        default=0.8,
        help="mean arrivals per pass (default 0.8)",
    )
    p.add_argument("--gate", choices=["on", "off"], default="on", help="the gate (default on)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--dump-trace", type=output_file, metavar="FILE", help="write the workload as a JSON trace"
    )
    p.add_argument(
        "--runner",
        choices=["auto", "null", "torch"],
        default="auto",
        help="torch runs the seeded model; null schedules only (auto: torch up to 300 "
        "requests, else null; null where torch is not installed)",
    )
    p.add_argument(
        "--device",
        type=device,
        default="cpu",
        help="torch device: cpu, cuda or cuda:N (default cpu)",
    )
    p.add_argument("--dtype", default="float32", help="torch dtype (default float32)")
    add_threads(p)
    add_quiet(p, "no progress bar", dest="no_progress")
    add_alias(p, "--no-progress", "no_progress", action="store_true")
    _checkpoint_arguments(p)
    _dp_arguments(p)
    _scheduler_arguments(p)


def _checkpoint_arguments(p: argparse.ArgumentParser) -> None:
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
    ck.add_argument(
        "--max-tokens",
        type=count(1),
        default=32,
        metavar="N",
        help="tokens per prompt (default 32)",
    )
    ck.add_argument("--ignore-eos", action="store_true", help="do not stop at the model's EOS")
    ck.add_argument(
        "--stop-token-id",
        type=count(0),
        action="append",
        default=[],
        metavar="ID",
        help="stop at ID (repeatable; within the model's vocabulary)",
    )
    ck.add_argument(
        "--no-finite-check",
        action="store_true",
        help="skip checking that every weight is finite (NaN or inf refuses a checkpoint): "
        "the check reads each tensor once more, worth skipping only for a very large one",
    )


def _dp_arguments(p: argparse.ArgumentParser) -> None:
    dp = p.add_argument_group("data parallel")
    dp.add_argument(
        "--dp",
        type=count(1, max_local_ranks()),
        default=1,
        metavar="N",
        help="run N data-parallel ranks as local processes (gloo) with one aligned gate, "
        "then the same workload uncoordinated for comparison (default 1: no DP; at most "
        f"{LOCAL_RANKS_PER_CPU} per CPU, {max_local_ranks()} here: more only wait for a core; "
        "under torchrun use python -m densegate.cli.dp)",
    )
    add_setting_flags(dp)
    dp.add_argument(
        "--router",
        choices=["round-robin", "least-loaded"],
        default="round-robin",
        help="how requests are assigned to ranks (default round-robin)",
    )
    dp.add_argument(
        "--rounds",
        dest="timed_rounds",
        type=count(0),
        default=0,
        metavar="R",
        help="run the uncoordinated phases on the same runner too, R rounds in alternating "
        "order, and print each phase's measured tokens/s, TTFT, ITL and tick ms with the "
        "ratio to gate-off (default 0: baselines on the null runner, untimed)",
    )
    add_alias(dp, "--timed-rounds", "timed_rounds", type=count(0))
    dp.add_argument(
        "--no-baselines",
        action="store_true",
        help="run the coordinated phase only, not the same workload uncoordinated after it",
    )
    dp.add_argument(
        "--dp-timeout",
        type=seconds(TIMEOUT_S),
        default=30.0,
        metavar="SECONDS",
        help="a collective slower than this means a rank is gone: a hung rank is noticed "
        "within SECONDS + 0.5 in every phase, a phase's first collective included, counted "
        "from when every rank has built the phase's engine (default 30; "
        f"{TIMEOUT_S[0]:g} to {TIMEOUT_S[1]:g})",
    )
    dp.add_argument(
        "--dp-startup-timeout",
        type=seconds(STARTUP_TIMEOUT_S),
        default=300.0,
        metavar="SECONDS",
        help="how long ranks may take to meet at start-up and to build each phase's engine "
        "(a model load): only a rank slower than this there is taken for gone (default 300; "
        f"{STARTUP_TIMEOUT_S[0]:g} to {STARTUP_TIMEOUT_S[1]:g})",
    )


def add_setting_flags(p: Any) -> None:
    """The flags made from the gate settings declared with one (``--align-ticks``,
    ``--pace-tokens``, ...: ``densegate.impl.settings.flagged``), each with its range and
    meaning from the declaration; absent, the setting's rule is off."""
    for s in flagged():
        p.add_argument(
            s.flag,
            dest=s.name,
            type=count(0 if s.low is None else s.low),
            default=None,
            metavar=s.metavar,
            help=f"the aligned gate's {s.rule.removeprefix('the ')}: {s.help}; {s.metavar} is "
            f"{s.requirement(spelled='absent')}. `densegate tune --dp` proposes one per workload",
        )


LOCAL_RANKS_PER_CPU = 8
"""``--dp N`` starts N processes on this machine: past a few per core they only queue."""


def max_local_ranks() -> int:
    """The most ranks ``densegate run --dp`` starts here (a bigger N runs until killed)."""
    return LOCAL_RANKS_PER_CPU * (os.cpu_count() or 1)


def _scheduler_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("scheduler (defaults: the bench's scheduler)")
    g.add_argument(
        "--max-num-seqs",
        type=count(1, MAX_SIZE),
        default=REF.max_num_seqs,
        metavar="N",
        help=f"sequences one pass may run (default {REF.max_num_seqs})",
    )
    g.add_argument(
        "--max-num-batched-tokens",
        type=count(1, MAX_SIZE),
        default=REF.max_num_batched_tokens,
        metavar="N",
        help=f"tokens per pass, prefill and decode together (default "
        f"{REF.max_num_batched_tokens}: a whole {REF.max_model_len}-token prompt beside "
        f"{REF.max_num_seqs} decodes)",
    )
    g.add_argument(
        "--block-size",
        type=count(1, MAX_SIZE),
        default=REF.block_size,
        metavar="N",
        help=f"tokens per KV block (default {REF.block_size})",
    )
    g.add_argument(
        "--num-blocks",
        type=count(1, MAX_SIZE),
        default=REF.num_blocks,
        metavar="N",
        help=f"KV blocks in the cache (default {REF.num_blocks})",
    )
    g.add_argument(
        "--max-model-len",
        type=count(2, MAX_SIZE),
        default=_Default(REF.max_model_len),
        metavar="N",
        help=f"longest prompt + output (default {REF.max_model_len}; with --model, the "
        "checkpoint's max_position_embeddings): a generated workload's lengths are drawn "
        "within it; a --trace request longer than it is refused (exit 2), on one rank and "
        "with --dp alike",
    )
    g.add_argument(
        "--no-chunked-prefill",
        action="store_true",
        help="prefill every prompt in one pass (needs --max-num-batched-tokens >= --max-model-len)",
    )
    g.add_argument(
        "--long-prefill-token-threshold",
        type=count(1, MAX_SIZE),
        default=None,
        metavar="N",
        help="cap one request's prefill chunk at N tokens (default: the pass budget)",
    )
    g.add_argument(
        "--dense-tokens",
        type=count(1, MAX_SIZE),
        default=None,
        metavar="B",
        help="the gate's B: prefill fires DENSE once B waiting tokens fit a pass (default: "
        "--max-num-batched-tokens minus --max-num-seqs, the room a pass has beside a full "
        "set of decodes)",
    )
    g.add_argument(
        "--max-hold-passes",
        type=count(1, MAX_SIZE),
        default=REF.max_hold_passes,
        metavar="K",
        help=f"the gate's K: the longest it holds waiting prefill back (default "
        f"{REF.max_hold_passes} passes)",
    )
    g.add_argument(
        "--stall-passes",
        type=count(0, MAX_SIZE),
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
        device=str(args.device),
        dtype=str(args.dtype),
        num_threads=threads(args) if runner == "torch" else None,
        check_weights=not getattr(args, "no_finite_check", False),
    )


def threads(args: argparse.Namespace) -> int | None:
    """``--threads``: N, or None (torch's own) for 0, or when absent on a GPU."""
    if args.threads is not None:
        return int(args.threads) or None
    return 1 if args.device == "cpu" else None
