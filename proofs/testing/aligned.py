"""Check anyone's aligned (data-parallel) gate against the dp spec, property by property.

``check_aligned_gate(factory)`` builds gates with ``factory(AlignedGateConfig, world_size)``
(``densegate.impl.dp_gate.AlignedGate`` is one), drives them with generated runs of reduced
vectors and ticks over 1 to 8 ranks and every valve and mode on and off, and judges each
tick against the spec's own machine, per property (``ALIGNED_PROPERTIES``: D1-D10 and
agreement). As in the single-rank kit, a survey finds which properties break and a search
per broken property shrinks its own run, printed tick by tick. "Held" means no generated
run broke it: evidence; ``densegate conform --prove --aligned`` proves agreement, D9 and
D10 for runs of a given length.
"""

from __future__ import annotations

import time
from typing import Any

from hypothesis import strategies as st

from densegate.impl.dp_gate import AlignedGateConfig
from densegate.testing.aligned_driver import ALIGNED_PROPERTIES, AlignedDriver, AlignedFactory
from densegate.testing.aligned_report import AlignedReport, AlignedResult, AlignedViolation
from densegate.testing.aligned_strategies import aligned_runs, aligned_strata
from densegate.testing.conformance import DEFAULT_MAX_EXAMPLES
from densegate.testing.search import (
    check_fresh,
    draw_seed,
    first_breaks,
    shrunk_violations,
    target_name,
)

__all__ = ["assert_aligned_conforms", "check_aligned_gate"]


def check_aligned_gate(
    factory: AlignedFactory,
    *,
    max_examples: int = DEFAULT_MAX_EXAMPLES,
    derandomize: bool = True,
    seed: int | None = None,
    configs: st.SearchStrategy[AlignedGateConfig] | None = None,
    worlds: st.SearchStrategy[int] | None = None,
    name: str | None = None,
) -> AlignedReport:
    """Judge the aligned gates ``factory`` builds against D1-D10 and the dp spec.

    ``factory(config, world_size)`` must return a fresh gate in its initial state, with
    ``decide(ReducedObservation, tick) -> Decision`` and ``hold_passes``. Derandomized by
    default (the same gate always gets the same report); ``derandomize=False`` draws a
    ``seed``, reported so a run can be replayed with ``seed=``. ``configs`` and ``worlds``
    narrow what is drawn.
    """
    probe = AlignedGateConfig(4, 2)
    check_fresh(lambda: factory(probe, 2), max_examples)
    seed = draw_seed(seed, derandomize=derandomize)
    driver = AlignedDriver(factory)
    t0 = time.perf_counter()
    ids = [p.id for p in ALIGNED_PROPERTIES]
    if configs is None and worlds is None:
        strata = aligned_strata(max_examples)
    else:
        strata = [(aligned_runs(configs, worlds), max_examples)]
    found = shrunk_violations(strata, driver, ids, seed=seed)
    results = []
    for prop in ALIGNED_PROPERTIES:
        broke = first_breaks(driver, found, prop.id)
        if broke is None:
            results.append(AlignedResult(prop, None))
            continue
        run, records, message = broke
        violation = AlignedViolation(run.config, run.world_size, records, message)
        results.append(AlignedResult(prop, violation))
    return AlignedReport(
        target=name or target_name(factory),
        results=tuple(results),
        max_examples=max_examples,
        seed=seed,
        runs=len(driver.cache),
        ticks=driver.passes,
        seconds=time.perf_counter() - t0,
    )


def assert_aligned_conforms(factory: AlignedFactory, **kwargs: Any) -> AlignedReport:
    """``check_aligned_gate`` for pytest: raises ``AssertionError`` carrying the full report."""
    report = check_aligned_gate(factory, **kwargs)
    if not report.conforms:
        raise AssertionError(report.format())
    return report
