"""densegate's prefill gate as a drop-in vLLM scheduler.

``--scheduler-cls densegate.integrations.vllm.GatedAsyncScheduler`` (a GPU,
async scheduling) or ``...GatedScheduler`` (sync, e.g. vLLM's CPU platform);
gate parameters under ``additional_config={"densegate": {...}}``.

The schedulers load on first use, after the installed vLLM's version is checked
against ``SUPPORTED_VLLM``; the config checks import no vLLM.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from densegate.integrations.versions import engine_attribute
from densegate.integrations.vllm.config import (
    CONFIG_KEY,
    SUPPORTED_VLLM,
    UnsupportedVllmVersion,
    check_vllm_version,
    gate_config_from,
)

if TYPE_CHECKING:
    from densegate.integrations.vllm.observe import StepObservation, observe
    from densegate.integrations.vllm.scheduler import (
        GatedAsyncScheduler,
        GatedScheduler,
        GateStep,
    )

_LAZY = {
    "StepObservation": "densegate.integrations.vllm.observe",
    "observe": "densegate.integrations.vllm.observe",
    "GateStep": "densegate.integrations.vllm.scheduler",
    "GatedAsyncScheduler": "densegate.integrations.vllm.scheduler",
    "GatedScheduler": "densegate.integrations.vllm.scheduler",
}

__all__ = [
    "CONFIG_KEY",
    "SUPPORTED_VLLM",
    "GateStep",
    "GatedAsyncScheduler",
    "GatedScheduler",
    "StepObservation",
    "UnsupportedVllmVersion",
    "check_vllm_version",
    "gate_config_from",
    "observe",
]


def __getattr__(name: str) -> Any:
    return engine_attribute(__name__, name, _LAZY, "vllm", check_vllm_version)
