"""densegate's runtime: the dense prefill gate, scheduler, KV blocks, runners, engine.

Imports neither z3 nor ``densegate.spec``: engines embed this package alone.
The torch model runner is loaded on first use (``densegate.impl.TorchRunner``),
so scheduling-only users never pay for importing torch; without the ``torch``
extra that first use raises ``MissingExtra`` naming it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from densegate.impl.dp_gate import (
    VECTOR_SIZE,
    AlignedGate,
    AlignedGateConfig,
    AlignedState,
    RankObservation,
    ReducedObservation,
)
from densegate.impl.engine import Engine, EngineBusy, EngineConfig, RequestMetrics, RequestOutput
from densegate.impl.gate import Decision, GateConfig, GateInput, GatePolicy, PrefillGate, Reason
from densegate.impl.sched.batch import (
    BatchKind,
    KVLayout,
    NullRunner,
    Runner,
    ScheduledBatch,
    SeqChunk,
)
from densegate.impl.sched.block_manager import BlockManager
from densegate.impl.sched.config import SchedulerConfig
from densegate.impl.sched.failures import PassFailed
from densegate.impl.sched.plan import PassPlan, PassRecord
from densegate.impl.sched.request import Request, RequestStatus
from densegate.impl.sched.scheduler import Scheduler
from densegate.impl.traces.workload import TraceRequest, load_trace, synthetic_trace

if TYPE_CHECKING:
    from densegate.impl.runners.model import DecoderModel, reference_generate
    from densegate.impl.runners.model_config import ModelConfig
    from densegate.impl.runners.runner_stats import RunnerStats
    from densegate.impl.runners.torch_runner import TorchRunner

__all__ = [
    "VECTOR_SIZE",
    "AlignedGate",
    "AlignedGateConfig",
    "AlignedState",
    "BatchKind",
    "BlockManager",
    "Decision",
    "DecoderModel",
    "Engine",
    "EngineBusy",
    "EngineConfig",
    "GateConfig",
    "GateInput",
    "GatePolicy",
    "KVLayout",
    "ModelConfig",
    "NullRunner",
    "PassFailed",
    "PassPlan",
    "PassRecord",
    "PrefillGate",
    "RankObservation",
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
    "DecoderModel": "densegate.impl.runners.model",
    "ModelConfig": "densegate.impl.runners.model_config",
    "reference_generate": "densegate.impl.runners.model",
    "RunnerStats": "densegate.impl.runners.runner_stats",
    "TorchRunner": "densegate.impl.runners.torch_runner",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'densegate.impl' has no attribute {name!r}")
    from densegate.impl.extras import require

    return getattr(require(module, f"densegate.impl.{name}"), name)
