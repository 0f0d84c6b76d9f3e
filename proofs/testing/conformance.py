"""Check anyone's gate against the proved machine, property by property, by sampling.

``check_gate(factory)`` builds gates with ``factory(GateConfig)``, drives them
with generated runs of observations, and judges the observed behaviour against
each of P1-P7 separately and against the spec's relation (agreement). A survey
of generated runs finds which properties break; then, for each broken one, a
Hypothesis search of its own finds and shrinks a run that breaks it, so every
violated property comes with its own minimal run, printed pass by pass.

"Held" means no run among those generated broke the property: evidence, not a
proof. The proofs are about the spec; this kit is how an engine's own gate is
tied to them.

A gate that also has ``decide_raw(GateInput, RawCounts)`` is given the raw list
counts of each pass as well (running list, queued tokens); properties are
always judged on the honest counts (``w``, ``d``), which is how a gate that
trusts the raw lists is caught.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, Phase, find, settings
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample

from densegate.impl.gate import GateConfig
from densegate.testing.driver import Driver, GateFactory, Outcome
from densegate.testing.report import (
    PROPERTIES,
    ConformanceReport,
    PropertyResult,
    Violation,
)
from densegate.testing.strategies import GateRun, gate_runs

__all__ = ["DEFAULT_MAX_EXAMPLES", "assert_conforms", "check_gate"]

DEFAULT_MAX_EXAMPLES = 200
"""Runs in the survey, and the most any violated property's own search replays."""


# -- searching ---------------------------------------------------------------------


def _settings(max_examples: int, *, derandomize: bool) -> settings:
    return settings(
        max_examples=max_examples,
        derandomize=derandomize,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate, Phase.shrink],
        suppress_health_check=list(HealthCheck),
    )


def _target_name(factory: GateFactory) -> str:
    module = getattr(factory, "__module__", None)
    name = getattr(factory, "__qualname__", None) or type(factory).__name__
    return f"{module}:{name}" if module else str(name)


def check_gate(
    factory: GateFactory,
    *,
    max_examples: int = DEFAULT_MAX_EXAMPLES,
    derandomize: bool = True,
    seed: int | None = None,
    configs: st.SearchStrategy[GateConfig] | None = None,
    name: str | None = None,
) -> ConformanceReport:
    """Judge the gates ``factory`` builds against P1-P7 and the spec, one search each.

    ``factory(config)`` must return a fresh gate in its initial state.
    Derandomized by default, so the same gate always gets the same report;
    ``derandomize=False`` draws a fresh ``seed`` (reported, so a run can be
    replayed with ``seed=``). ``configs`` narrows the configs drawn.

    One survey of ``max_examples`` runs finds which properties break; then a
    search per broken property, replaying the same runs, shrinks its own run.
    """
    if max_examples < 1:
        raise ValueError(f"max_examples must be >= 1, got {max_examples}")
    probe = GateConfig(4, 2)
    try:
        built: tuple[object, object] | None = (factory(probe), factory(probe))
    except Exception:
        built = None  # the runs report it, pass by pass
    if built is not None and built[0] is None:
        raise TypeError("factory returned None: it must return a fresh gate")
    if built is not None and built[0] is built[1]:
        raise TypeError("factory returned the same object twice: it must build a fresh gate")
    if seed is None and not derandomize:
        seed = random.getrandbits(64)
    driver = Driver(factory)
    strategy = gate_runs(configs)
    conf = _settings(max_examples, derandomize=seed is None)

    def search(condition: Callable[[GateRun], bool]) -> GateRun | None:
        rnd = None if seed is None else random.Random(seed)
        try:
            return find(strategy, condition, settings=conf, random=rnd)
        except NoSuchExample:
            return None

    t0 = time.perf_counter()
    first_seen: dict[str, GateRun] = {}

    def survey(run: GateRun) -> bool:
        for pid in driver.outcome(run).first:
            first_seen.setdefault(pid, run)
        return False

    search(survey)
    results = []
    for prop in PROPERTIES:
        pid = prop.id
        if pid not in first_seen:
            results.append(PropertyResult(prop, None))
            continue
        # Replays the survey's runs up to the first that breaks pid, then shrinks it.
        shrunk = search(_breaks(driver, pid))
        run = _trim(driver, first_seen[pid] if shrunk is None else shrunk, pid)
        outcome = driver.outcome(run)
        at, message = outcome.first[pid]
        records = tuple(outcome.records[: at + 1])
        results.append(PropertyResult(prop, Violation(run.config, records, message, driver.raw)))
    return ConformanceReport(
        target=name or _target_name(factory),
        results=tuple(results),
        max_examples=max_examples,
        seed=seed,
        runs=len(driver.cache),
        passes=driver.passes,
        seconds=time.perf_counter() - t0,
    )


def _trim(driver: Driver, run: GateRun, pid: str) -> GateRun:
    """Delete passes, in blocks of halving powers of two, while ``pid`` stays broken.

    Hypothesis shrinks the segments a run is drawn from; a pass-level sweep
    afterwards removes stretches it could not, so printed runs stay short.
    """

    def cut(r: GateRun) -> GateRun:
        seen = driver.outcome(r)
        at = seen.first[pid][0]
        prefix = GateRun(r.config, r.passes[: at + 1])
        # Keep what was observed: a gate that is not deterministic (a P7 bug) need
        # not break pid again when the prefix is replayed.
        driver.cache[prefix] = Outcome(
            seen.records[: at + 1], {k: v for k, v in seen.first.items() if v[0] <= at}
        )
        return prefix

    run = cut(run)
    block = 1 << max(len(run.passes) - 1, 1).bit_length()  # blocks of 2^k keep a counter's parity
    while block >= 1:
        i, progress = 0, False
        while i < len(run.passes):
            cand = GateRun(run.config, run.passes[:i] + run.passes[i + block :])
            if pid in driver.outcome(cand).first:
                run, progress = cut(cand), True
            else:
                i += block
        if not progress:
            block //= 2
    return run


def _breaks(driver: Driver, pid: str) -> Callable[[GateRun], bool]:
    return lambda run: pid in driver.outcome(run).first


def assert_conforms(factory: GateFactory, **kwargs: Any) -> ConformanceReport:
    """``check_gate`` for pytest: raises ``AssertionError`` carrying the full report."""
    report = check_gate(factory, **kwargs)
    if not report.conforms:
        raise AssertionError(report.format())
    return report
