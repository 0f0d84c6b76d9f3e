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

import time
from typing import Any

from hypothesis import strategies as st

from densegate.impl.gate import GateConfig
from densegate.spec.properties import GATE_IDS
from densegate.testing.driver import Driver, GateFactory
from densegate.testing.report import (
    PROPERTIES,
    ConformanceReport,
    PropertyResult,
    Violation,
)
from densegate.testing.search import (
    check_fresh,
    draw_seed,
    first_breaks,
    shrunk_violations,
    target_name,
)
from densegate.testing.strategies import gate_runs

__all__ = ["DEFAULT_MAX_EXAMPLES", "assert_conforms", "check_gate"]

DEFAULT_MAX_EXAMPLES = 200
"""Runs in the survey, and the most any violated property's own search replays."""


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
    probe = GateConfig(4, 2)
    check_fresh(lambda: factory(probe), max_examples)
    seed = draw_seed(seed, derandomize=derandomize)
    driver = Driver(factory)
    t0 = time.perf_counter()
    found = shrunk_violations([(gate_runs(configs), max_examples)], driver, GATE_IDS, seed=seed)
    results = []
    for prop in PROPERTIES:
        broke = first_breaks(driver, found, prop.id)
        if broke is None:
            results.append(PropertyResult(prop, None))
            continue
        run, records, message = broke
        results.append(PropertyResult(prop, Violation(run.config, records, message, driver.raw)))
    return ConformanceReport(
        target=name or target_name(factory),
        results=tuple(results),
        max_examples=max_examples,
        seed=seed,
        runs=len(driver.cache),
        passes=driver.passes,
        seconds=time.perf_counter() - t0,
    )


def assert_conforms(factory: GateFactory, **kwargs: Any) -> ConformanceReport:
    """``check_gate`` for pytest: raises ``AssertionError`` carrying the full report."""
    report = check_gate(factory, **kwargs)
    if not report.conforms:
        raise AssertionError(report.format())
    return report
