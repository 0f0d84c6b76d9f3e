"""densegate's prefill gate as a drop-in vLLM scheduler.

``--scheduler-cls densegate.integrations.vllm.GatedAsyncScheduler`` (a GPU,
async scheduling) or ``...GatedScheduler`` (sync, e.g. vLLM's CPU platform);
gate parameters under ``additional_config={"densegate": {...}}``.

The schedulers load on first use, after the installed vLLM's version is checked
against ``SUPPORTED_VLLM``; the config checks import no vLLM.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

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
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'densegate.integrations.vllm' has no attribute {name!r}")
    import vllm

    check_vllm_version(vllm.__version__)
    return getattr(import_module(module), name)
