"""Conformance kit: check any gate against the proved machine.

``check_gate(factory)`` reports, property by property (P1-P7 and agreement
with the spec), whether the gates ``factory(GateConfig)`` builds behave like
the proved machine, with a shrunk run for each violation; ``assert_conforms``
is the pytest form and ``densegate conform`` the command-line one.
``check_aligned_gate(factory)`` is the same for aligned (data-parallel) gates,
``factory(AlignedGateConfig, world_size)``, judged tick by tick against the dp spec
(D1-D10 and agreement; ``densegate conform --aligned``).
``prove_conforms(factory)`` checks the single-rank properties symbolically (CrossHair):
proved for every input of runs of a given length, refuted with a run, or out
of reach with the reason (``densegate conform --prove``). The
strategies that drive it are exported for reuse, and ``densegate.lab.baselines.policies``
holds the reference policies it is usually run against.

Needs Hypothesis and z3. Names load on first use so that ``densegate --help``
and the other subcommands do not pay for them.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from densegate.proofs.refinement.conform import ProofReport, prove_conforms
    from densegate.spec.properties import Property
    from densegate.testing.aligned import assert_aligned_conforms, check_aligned_gate
    from densegate.testing.aligned_driver import (
        ALIGNED_PROPERTIES,
        AlignedFactory,
        CheckedAlignedGate,
        TickRecord,
    )
    from densegate.testing.aligned_report import AlignedReport, AlignedResult, AlignedViolation
    from densegate.testing.aligned_strategies import (
        AlignedKind,
        AlignedRun,
        AlignedSegment,
        RankRole,
        aligned_configs,
        aligned_runs,
        aligned_segments,
        world_sizes,
    )
    from densegate.testing.conformance import DEFAULT_MAX_EXAMPLES, assert_conforms, check_gate
    from densegate.testing.driver import CheckedGate, GateFactory
    from densegate.testing.recorded import RecordedPass, judge_recorded
    from densegate.testing.report import (
        PROPERTIES,
        ConformanceReport,
        PassRecord,
        PropertyResult,
        Violation,
    )
    from densegate.testing.strategies import (
        GateRun,
        Observation,
        Segment,
        SegmentKind,
        gate_configs,
        gate_runs,
        observation_runs,
        observations,
        segments,
    )

_WHERE = {
    "densegate.proofs.refinement.conform": ("ProofReport", "prove_conforms"),
    "densegate.spec.properties": ("Property",),
    "densegate.testing.aligned": ("assert_aligned_conforms", "check_aligned_gate"),
    "densegate.testing.aligned_driver": (
        "ALIGNED_PROPERTIES",
        "AlignedFactory",
        "CheckedAlignedGate",
        "TickRecord",
    ),
    "densegate.testing.aligned_report": ("AlignedReport", "AlignedResult", "AlignedViolation"),
    "densegate.testing.aligned_strategies": (
        "AlignedKind",
        "AlignedRun",
        "AlignedSegment",
        "RankRole",
        "aligned_configs",
        "aligned_runs",
        "aligned_segments",
        "world_sizes",
    ),
    "densegate.testing.conformance": ("DEFAULT_MAX_EXAMPLES", "assert_conforms", "check_gate"),
    "densegate.testing.driver": ("CheckedGate", "GateFactory"),
    "densegate.testing.report": (
        "PROPERTIES",
        "ConformanceReport",
        "PassRecord",
        "PropertyResult",
        "Violation",
    ),
    "densegate.testing.recorded": ("RecordedPass", "judge_recorded"),
    "densegate.testing.strategies": (
        "GateRun",
        "Observation",
        "Segment",
        "SegmentKind",
        "gate_configs",
        "gate_runs",
        "observation_runs",
        "observations",
        "segments",
    ),
}
_MODULE = {name: module for module, names in _WHERE.items() for name in names}

__all__ = [
    "ALIGNED_PROPERTIES",
    "DEFAULT_MAX_EXAMPLES",
    "PROPERTIES",
    "AlignedFactory",
    "AlignedKind",
    "AlignedReport",
    "AlignedResult",
    "AlignedRun",
    "AlignedSegment",
    "AlignedViolation",
    "CheckedAlignedGate",
    "CheckedGate",
    "ConformanceReport",
    "GateFactory",
    "GateRun",
    "Observation",
    "PassRecord",
    "ProofReport",
    "Property",
    "PropertyResult",
    "RankRole",
    "RecordedPass",
    "Segment",
    "SegmentKind",
    "TickRecord",
    "Violation",
    "aligned_configs",
    "aligned_runs",
    "aligned_segments",
    "assert_aligned_conforms",
    "assert_conforms",
    "check_aligned_gate",
    "check_gate",
    "gate_configs",
    "gate_runs",
    "judge_recorded",
    "observation_runs",
    "observations",
    "prove_conforms",
    "segments",
    "world_sizes",
]
assert sorted(__all__) == sorted(_MODULE)


def __getattr__(name: str) -> Any:
    module = _MODULE.get(name)
    if module is None:
        raise AttributeError(f"module 'densegate.testing' has no attribute {name!r}")
    return getattr(import_module(module), name)


def __dir__() -> list[str]:
    return __all__
