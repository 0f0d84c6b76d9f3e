"""densegate inside SGLang: the aligned gate as SGLang's prefill delayer (a general plugin).

``pip install 'densegate[sglang]'`` registers ``densegate.integrations.sglang.plugin:register``
under SGLang's ``sglang.srt.plugins`` entry-point group; with
``--enable-prefill-delayer`` SGLang's scheduler then builds
``DenseGatePrefillDelayer`` instead of its own ``PrefillDelayer``. Settings: K is
``--prefill-delayer-max-delay-passes``, the rest the ``DENSEGATE_SGLANG``
variable (``densegate.integrations.sglang.config``).

The SGLang-facing names load on first use, after the installed SGLang's version
is checked against ``SUPPORTED_SGLANG``; the config checks import no SGLang.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from densegate.integrations.sglang.config import (
    ENV_VAR,
    SUPPORTED_SGLANG,
    PluginSettings,
    UnsupportedSglangVersion,
    check_sglang_version,
    gate_config,
    settings_from_env,
)
from densegate.integrations.versions import engine_attribute

if TYPE_CHECKING:
    from densegate.integrations.sglang.delayer import DenseGatePrefillDelayer, GatePass
    from densegate.integrations.sglang.observe import PassObservation, observe

_LAZY = {
    "DenseGatePrefillDelayer": "densegate.integrations.sglang.delayer",
    "GatePass": "densegate.integrations.sglang.delayer",
    "PassObservation": "densegate.integrations.sglang.observe",
    "observe": "densegate.integrations.sglang.observe",
}

__all__ = [
    "ENV_VAR",
    "SUPPORTED_SGLANG",
    "DenseGatePrefillDelayer",
    "GatePass",
    "PassObservation",
    "PluginSettings",
    "UnsupportedSglangVersion",
    "check_sglang_version",
    "gate_config",
    "observe",
    "settings_from_env",
]


def __getattr__(name: str) -> Any:
    return engine_attribute(__name__, name, _LAZY, "sglang", check_sglang_version)
