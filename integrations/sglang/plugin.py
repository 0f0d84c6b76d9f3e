"""The entry point SGLang's ``load_plugins`` runs in every process (group ``sglang.srt.plugins``).

``register()`` checks the installed SGLang against ``SUPPORTED_SGLANG`` and
registers two hooks with SGLang's ``HookRegistry`` (SGLang applies them right
after every plugin ran): a class REPLACE of
``sglang.srt.managers.prefill_delayer.PrefillDelayer``, so the class SGLang's
scheduler constructs under ``--enable-prefill-delayer`` is densegate's, and an
AROUND hook on ``Scheduler.get_new_batch_prefill`` that records each pass's
observation before the pass runs. Without ``--enable-prefill-delayer`` SGLang
builds no delayer and both hooks do nothing.
"""

from __future__ import annotations

__all__ = ["DELAYER_TARGET", "PASS_TARGET", "register"]

DELAYER_TARGET = "sglang.srt.managers.prefill_delayer.PrefillDelayer"
PASS_TARGET = "sglang.srt.managers.scheduler.Scheduler.get_new_batch_prefill"


def register() -> None:
    """Replace SGLang's prefill delayer with densegate's aligned gate (SGLang general plugin)."""
    import sglang

    from densegate.integrations.sglang.config import check_sglang_version

    check_sglang_version(sglang.__version__)
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    from densegate.integrations.sglang.delayer import (
        DenseGatePrefillDelayer,
        around_get_new_batch_prefill,
    )

    HookRegistry.register(DELAYER_TARGET, DenseGatePrefillDelayer, HookType.REPLACE)
    HookRegistry.register(PASS_TARGET, around_get_new_batch_prefill, HookType.AROUND)
