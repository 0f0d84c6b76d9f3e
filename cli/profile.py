"""``densegate profile``: time the torch runner's pass kinds and fit the pass-time model."""

from __future__ import annotations

import argparse
import sys

from densegate.cli.flag_types import count, device, nonnegative_float, output_file
from densegate.cli.options import add_alias, add_quiet, add_threads, threads
from densegate.impl.validation import MAX_SIZE

HELP = "time the torch runner's pass kinds over a grid, fit the pass-time model, write a profile"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--device",
        type=device,
        default="cpu",
        help="torch device: cpu, cuda or cuda:N (default cpu)",
    )
    p.add_argument(
        "--model",
        metavar="DIR",
        help="time a model of the shape in DIR/config.json (seeded weights; default: the "
        "tiny built-in model)",
    )
    p.add_argument(
        "--max-model-len",
        type=count(2, MAX_SIZE),
        metavar="N",
        help="the longest sequence a timed pass may reach (default: 4096, or the model's "
        "max_position_embeddings if smaller): grid points past it are clipped to it",
    )
    p.add_argument(
        "--out",
        type=output_file,
        default="densegate-profile.json",
        metavar="FILE",
        help="profile JSON to write (default densegate-profile.json; checked before the run)",
    )
    p.add_argument(
        "--rounds",
        dest="repeats",
        type=count(1),
        default=5,
        metavar="R",
        help="timed rounds over the grid, each point's median kept (default 5)",
    )
    add_alias(p, "--repeats", "repeats", type=count(1))
    add_threads(p)
    p.add_argument(
        "--collective-ms",
        type=nonnegative_float,
        default=0.0,
        metavar="MS",
        help="per-tick all-reduce time to model DP ticks with (default 0; "
        "`densegate run --dp N` prints the measured one)",
    )
    p.add_argument(
        "--grid",
        choices=["full", "small"],
        default="full",
        help="full: the bench's pass sizes (default); small: a dozen tiny points, a smoke run",
    )
    add_quiet(p)


def main(args: argparse.Namespace) -> int:
    from densegate.lab.cost.measure import GRIDS, model_config_from_dir, profile_torch

    try:
        cfg = model_config_from_dir(args.model) if args.model else None
        prof = profile_torch(
            args.device,
            cfg,
            threads=threads(args),
            repeats=args.repeats,
            grid=GRIDS[args.grid](),
            collective_ms=args.collective_ms,
            max_model_len=args.max_model_len,
            progress=None if args.quiet else lambda s: print(s, file=sys.stderr, flush=True),
        )
    except ValueError as e:
        print(f"densegate profile: {e}", file=sys.stderr)
        return 2
    prof.save(args.out)
    print("\n".join(prof.describe()))
    print("\n| pass kind | passes timed | median abs error | max abs error | coefficients (ms) |")
    print("|---|---:|---:|---:|---|")
    from densegate.lab.cost.model import FEATURES

    model = prof.model
    for kind, err in prof.fit_error.items():
        cs = getattr(model, "coefficients", {}).get(kind, ())
        terms = ", ".join(f"{f} {c:.3g}" for f, c in zip(FEATURES, cs, strict=True) if c)
        print(
            f"| {kind} | {err['samples']:.0f} | {err['median_abs_pct']:.1f}% | "
            f"{err['max_abs_pct']:.1f}% | {terms} |"
        )
    print(f"\nwrote {args.out}")
    return 0
