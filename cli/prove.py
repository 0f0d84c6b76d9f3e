"""``densegate prove``: prove every obligation, refute every mutant, report."""

from __future__ import annotations

import argparse
import json
import time

HELP = "prove the spec's obligations for all parameters and refute every broken variant"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print exactly one JSON object")
    p.add_argument(
        "--level",
        action="append",
        metavar="LEVEL",
        help="only this level (gate, scheduler, dp, refinement); repeatable",
    )
    p.add_argument("--only", metavar="IDS", help="comma-separated obligation ids, e.g. P1,P3")
    p.add_argument(
        "--traces", action="store_true", help="print every mutant's counterexample trace"
    )


def main(args: argparse.Namespace) -> int:
    from rich.console import Console

    from densegate.proofs.registry import obligations, prove
    from densegate.proofs.report import print_report, to_json

    try:
        obs = obligations(args.level)
    except ValueError as e:
        raise SystemExit(f"densegate prove: {e}") from None
    if args.only:
        wanted = {s.strip() for s in args.only.split(",") if s.strip()}
        missing = wanted - {o.id for o in obs}
        if missing:
            raise SystemExit(f"densegate prove: unknown obligation id(s) {sorted(missing)}")
        obs = [o for o in obs if o.id in wanted]
    t0 = time.perf_counter()
    results = [prove(o) for o in obs]
    seconds = time.perf_counter() - t0
    if args.json:
        print(json.dumps(to_json(results, seconds)))
    else:
        console = Console(width=None if Console().is_terminal else 160)
        print_report(results, seconds, console, args.traces)
    return 0 if all(r.ok for r in results) else 1
