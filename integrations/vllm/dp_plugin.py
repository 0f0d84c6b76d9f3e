"""The ``vllm.general_plugins`` entry point: vLLM runs it in every process, engine cores included.

It does nothing unless ``DENSEGATE_VLLM_DP=1``; then it checks the installed
vLLM against ``SUPPORTED_VLLM`` (a clear ``UnsupportedVllmVersion`` otherwise,
raised where vLLM loads plugins, so the front end fails before any engine
starts) and wraps ``DPEngineCoreProc`` (``dp_core.install``). One-engine
deployments never build a ``DPEngineCoreProc``, so the wrap is inert there.
"""

from __future__ import annotations

import os

from densegate.integrations.vllm.config import UnsupportedVllmVersion, check_vllm_version
from densegate.integrations.vllm.dp_config import ENV_VAR, dp_gate_enabled

__all__ = ["register"]


def register() -> None:
    """Install the aligned DP gate if ``DENSEGATE_VLLM_DP=1`` (vLLM general plugin)."""
    if not dp_gate_enabled(os.environ):
        return
    import vllm

    try:
        check_vllm_version(vllm.__version__)
    except UnsupportedVllmVersion as e:
        raise UnsupportedVllmVersion(f"{ENV_VAR}=1 (densegate's DP gate): {e}") from None
    from densegate.integrations.vllm.dp_core import install

    install()
