"""densegate's runtime: the dense prefill gate, scheduler, KV blocks, runners, engine.

Imports neither z3 nor ``densegate.spec``: engines embed this package alone.
The torch model runner is loaded on first use (``densegate.impl.TorchRunner``),
so scheduling-only users never pay for importing torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from densegate.impl.aligned_gate import (
    VECTOR_SIZE,
    AlignedGate,
    AlignedGateConfig,
    AlignedState,
    RankObservation,
    ReducedObservation,
)
from densegate.impl.batch import BatchKind, KVLayout, NullRunner, Runner, ScheduledBatch, SeqChunk
from densegate.impl.block_manager import BlockManager
from densegate.impl.engine import Engine, EngineConfig, RequestMetrics, RequestOutput
from densegate.impl.gate import Decision, GateConfig, GateInput, PrefillGate, Reason
from densegate.impl.policies import (
    POLICIES,
    GatePolicy,
    LegacyPolicy,
    OriginalPolicy,
    RawCounts,
)
from densegate.impl.request import Request, RequestStatus
from densegate.impl.scheduler import PassPlan, PassRecord, Scheduler, SchedulerConfig
from densegate.impl.workload import TraceRequest, load_trace, synthetic_trace

if TYPE_CHECKING:
    from densegate.impl.model import DecoderModel, ModelConfig, reference_generate
    from densegate.impl.torch_runner import RunnerStats, TorchRunner

__all__ = [
    "POLICIES",
    "VECTOR_SIZE",
    "AlignedGate",
    "AlignedGateConfig",
    "AlignedState",
    "BatchKind",
    "BlockManager",
    "Decision",
    "DecoderModel",
    "Engine",
    "EngineConfig",
    "GateConfig",
    "GateInput",
    "GatePolicy",
    "KVLayout",
    "LegacyPolicy",
    "ModelConfig",
    "NullRunner",
    "OriginalPolicy",
    "PassPlan",
    "PassRecord",
    "PrefillGate",
    "RankObservation",
    "RawCounts",
    "Reason",
    "ReducedObservation",
    "Request",
    "RequestMetrics",
    "RequestOutput",
    "RequestStatus",
    "Runner",
    "RunnerStats",
    "ScheduledBatch",
    "Scheduler",
    "SchedulerConfig",
    "SeqChunk",
    "TorchRunner",
    "TraceRequest",
    "load_trace",
    "reference_generate",
    "synthetic_trace",
]

_LAZY = {
    "DecoderModel": "densegate.impl.model",
    "ModelConfig": "densegate.impl.model",
    "reference_generate": "densegate.impl.model",
    "RunnerStats": "densegate.impl.torch_runner",
    "TorchRunner": "densegate.impl.torch_runner",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'densegate.impl' has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(module), name)
