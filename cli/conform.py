"""``densegate conform``: check a gate, or the shipped policies, against the machine.

``densegate conform module:factory`` prints one report with a shrunk run per
violated property (sampled: evidence); ``--prove`` checks the same properties
symbolically instead (proved, refuted with a run, out of reach, or vacuous, per property);
``densegate conform --policies legacy,original,densegate``
(the default without a target) prints which property each shipped policy
violates, as one table, then the runs. ``--aligned module:factory`` judges an aligned
(data-parallel) gate, ``factory(AlignedGateConfig, world_size)``, against the dp spec:
sampled (D1-D10 and agreement, ``densegate.testing.check_aligned_gate``) or, with
``--prove``, symbolically (agreement, D9 and D10, ``densegate.proofs.dp_paced_conform``).
Exit status 1 on any violation, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, Any

from densegate.cli.flag_types import count

if TYPE_CHECKING:
    from densegate.testing.report import ConformanceReport

HELP = "check a gate (module:factory) or the shipped policies against the proved machine"

MAX_EXAMPLES = 10_000
"""The most runs one search may generate: 50 times the default, minutes per policy; more
would run for hours printing nothing."""


STORAGE_ENV = "HYPOTHESIS_STORAGE_DIRECTORY"
"""Hypothesis' own variable for where it keeps its files; ``conform`` sets it for its run."""


def hypothesis_dir() -> Path:
    """Where ``conform``'s Hypothesis keeps its files (never the caller's directory):
    ``$HYPOTHESIS_STORAGE_DIRECTORY`` if set, else ``$XDG_CACHE_HOME/densegate/hypothesis``
    (``~/.cache/densegate/hypothesis`` without XDG_CACHE_HOME)."""
    chosen = os.environ.get(STORAGE_ENV)
    if chosen:
        return Path(chosen)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "densegate" / "hypothesis"


@contextmanager
def _hypothesis_storage() -> Iterator[None]:
    """Hypothesis writes ``.hypothesis/`` under the working directory unless told otherwise;
    a command must not leave files where it was called, so point it at ``hypothesis_dir()``."""
    before = os.environ.get(STORAGE_ENV)
    os.environ[STORAGE_ENV] = str(hypothesis_dir())
    try:
        yield
    finally:
        if before is None:
            del os.environ[STORAGE_ENV]
        else:
            os.environ[STORAGE_ENV] = before


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.epilog = (
        "Hypothesis keeps its files in $HYPOTHESIS_STORAGE_DIRECTORY if set, else in "
        "$XDG_CACHE_HOME/densegate/hypothesis (~/.cache/densegate/hypothesis), never in the "
        "working directory."
    )
    p.add_argument(
        "target",
        nargs="?",
        metavar="MODULE:FACTORY",
        help="a callable taking a GateConfig and returning a fresh gate, e.g. mypkg.sched:MyGate "
        "(with --aligned: an AlignedGateConfig and the world size)",
    )
    p.add_argument(
        "--policies",
        nargs="+",
        metavar="NAME",
        help="shipped policies, space- or comma-separated (legacy, original, densegate) or "
        "'all'; the default when no target is given",
    )
    p.add_argument("--json", action="store_true", help="print exactly one JSON object")
    p.add_argument(
        "--max-examples",
        type=count(1, MAX_EXAMPLES),
        metavar="N",
        help=f"runs generated per search (default 200, at most {MAX_EXAMPLES})",
    )
    p.add_argument(
        "--prove",
        action="store_true",
        help="prove symbolically instead of sampling (CrossHair): every path of every run "
        "of --passes passes, all configs and observations; a target is required",
    )
    p.add_argument(
        "--passes",
        type=count(1),
        metavar="N",
        help="with --prove: passes per symbolic run (default 2; with --aligned: ticks, default 1)",
    )
    p.add_argument(
        "--aligned",
        action="store_true",
        help="the target is an aligned (data-parallel) gate, factory(AlignedGateConfig, "
        "world_size), judged against the dp spec: sampled over 1-8 ranks and every valve and "
        "mode (D1-D10 and agreement), or with --prove symbolically (agreement: decision, "
        "reason, cap and counter; D9 and D10, the paced mode's)",
    )
    p.add_argument(
        "--seed",
        type=int,
        metavar="S",
        help="draw runs from this seed instead of the fixed derandomized set",
    )


def _load(target: str, aligned: bool = False) -> Callable[..., Any]:
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"target must look like module:factory, got {target!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # so local modules resolve, as with python -m
    try:
        obj: Any = import_module(module_name)
    except (ImportError, AttributeError):
        raise
    except Exception as e:  # the module itself is broken: a SyntaxError, or what it raises
        raise ValueError(f"importing {module_name} raised {type(e).__name__}: {e}") from None
    for part in attr.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"{target} is not callable")
    _probe(target, obj, aligned)
    return obj  # type: ignore[no-any-return]


def _probe(target: str, factory: Callable[..., Any], aligned: bool = False) -> None:
    """Refuse a factory that returns None, named as such (the search would only see "the
    same object twice"); one that raises is left to the runs, which report it pass by pass."""
    from densegate.impl.dp_gate import AlignedGateConfig
    from densegate.impl.gate import GateConfig

    try:
        gate = factory(AlignedGateConfig(4, 2), 2) if aligned else factory(GateConfig(4, 2))
    except Exception:
        return
    if gate is None:
        raise ValueError(f"{target} returned None: it must return a fresh gate")


def _table(reports: list[ConformanceReport]) -> str:
    from densegate.testing.report import PROPERTIES

    head = ["property", *(r.target for r in reports)]
    rows = [head]
    for prop in PROPERTIES:
        cells = ["held" if r[prop.id].held else "VIOLATED" for r in reports]
        rows.append([prop.label, *cells])
    widths = [max(len(row[c]) for row in rows) for c in range(len(head))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def _prove(args: argparse.Namespace, usage: Callable[[str], int]) -> int:
    """``--prove``: one symbolic verdict per property (proved, refuted with a run, out of
    reach, or vacuous: a precondition that admits nothing, or a configuration class no path
    reached)."""
    from densegate.lab.baselines.policies import POLICIES
    from densegate.proofs.refinement.conform import DEFAULT_PASSES, prove_conforms

    if args.max_examples is not None or args.seed is not None:
        return usage("--max-examples and --seed are for sampling, not --prove")
    if args.aligned:
        return _prove_aligned(args, usage)
    passes = DEFAULT_PASSES if args.passes is None else args.passes
    if args.target is None and args.policies is None:
        return usage("--prove needs a target (module:factory) or --policies")
    if args.target is not None and args.policies is not None:
        return usage("give a target or --policies, not both")
    targets: list[tuple[str, Callable[..., Any]]] = []
    if args.target is not None:
        try:
            targets.append((args.target, _load(args.target)))
        except (ImportError, AttributeError, ValueError) as e:
            return usage(f"cannot load {args.target}: {e}")
    else:
        names = _policy_names(args.policies, list(POLICIES))
        unknown = [n for n in names if n not in POLICIES]
        if unknown or not names:
            return usage(f"unknown policies {unknown}; shipped: {', '.join(POLICIES)}")
        targets += [(n, POLICIES[n]) for n in names]
    reports = [prove_conforms(f, passes=passes, name=name) for name, f in targets]
    if args.json:
        doc: Any = reports[0].to_json() if len(reports) == 1 else [r.to_json() for r in reports]
        print(json.dumps(doc))
    else:
        print("\n\n".join(r.format() for r in reports))
    return 0 if all(r.proved for r in reports) else 1


def _prove_aligned(args: argparse.Namespace, usage: Callable[[str], int]) -> int:
    """``--prove --aligned``: an aligned gate's symbolic verdicts (agreement, D9, D10)."""
    from densegate.proofs.dp_paced_conform import prove_aligned_conforms

    if args.target is None or args.policies is not None:
        return usage("--aligned needs a target (module:factory) and no --policies")
    try:
        factory = _load(args.target, aligned=True)
    except (ImportError, AttributeError, ValueError) as e:
        return usage(f"cannot load {args.target}: {e}")
    report = prove_aligned_conforms(factory, ticks=args.passes or 1, name=args.target)
    print(json.dumps(report.to_json()) if args.json else report.format())
    return 0 if report.proved else 1


def _check_aligned(
    args: argparse.Namespace, usage: Callable[[str], int], kw: dict[str, Any]
) -> int:
    """``--aligned`` (sampled): an aligned gate's verdicts, D1-D10 and agreement, each
    violation with its own shrunk run."""
    from densegate.testing.aligned import check_aligned_gate

    if args.target is None or args.policies is not None:
        return usage("--aligned needs a target (module:factory) and no --policies")
    return _check_target(args, usage, check_aligned_gate, kw, aligned=True)


def _check_target(
    args: argparse.Namespace,
    usage: Callable[[str], int],
    check: Callable[..., Any],
    kw: dict[str, Any],
    aligned: bool = False,
) -> int:
    """Load ``args.target``, judge it with ``check`` (the sampled kit, single-rank or
    aligned) and print its report: exit 0 if it conforms, 1 if not, 2 on bad input."""
    try:
        factory = _load(args.target, aligned=aligned)
    except (ImportError, AttributeError, ValueError) as e:
        return usage(f"cannot load {args.target}: {e}")
    try:
        report = check(factory, name=args.target, **kw)
    except TypeError as e:
        return usage(str(e))
    print(json.dumps(report.to_json()) if args.json else report.format())
    return 0 if report.conforms else 1


def _policy_names(values: list[str] | None, shipped: list[str]) -> list[str]:
    """``--policies a b`` and ``--policies a,b`` both work; none given, or ``all``, means all."""
    names = [s.strip() for v in values or ["all"] for s in v.split(",") if s.strip()]
    return shipped if names == ["all"] else names


def main(args: argparse.Namespace) -> int:
    with _hypothesis_storage():
        return _main(args)


def _main(args: argparse.Namespace) -> int:
    from densegate.lab.baselines.policies import POLICIES
    from densegate.testing.conformance import DEFAULT_MAX_EXAMPLES, check_gate
    from densegate.testing.report import format_violation

    def usage(message: str) -> int:
        print(f"densegate conform: {message}", file=sys.stderr)
        return 2

    if args.prove:
        return _prove(args, usage)
    if args.passes is not None:
        return usage("--passes needs --prove")
    n = DEFAULT_MAX_EXAMPLES if args.max_examples is None else args.max_examples
    kw: dict[str, Any] = {"max_examples": n, "seed": args.seed}
    if args.aligned:
        return _check_aligned(args, usage, kw)

    if args.target is not None:
        if args.policies is not None:
            return usage("give a target or --policies, not both")
        return _check_target(args, usage, check_gate, kw)

    names = _policy_names(args.policies, list(POLICIES))
    unknown = [name for name in names if name not in POLICIES]
    if unknown or not names:
        return usage(f"unknown policies {unknown}; shipped: {', '.join(POLICIES)}")
    reports = [check_gate(POLICIES[name], name=name, **kw) for name in names]
    ok = all(r.conforms for r in reports)
    if args.json:
        print(json.dumps({"conforms": ok, "policies": [r.to_json() for r in reports]}))
        return 0 if ok else 1
    first = reports[0]
    mode = "derandomized" if first.seed is None else f"seed={first.seed}"
    print(f"densegate conform: shipped policies (max_examples={n}, {mode})\n")
    print(_table(reports))
    for r in reports:
        for res in r.results:
            if res.violation is not None:
                print(f"\n[{r.target}] " + "\n".join(format_violation(res.prop, res.violation)))
    return 0 if ok else 1
