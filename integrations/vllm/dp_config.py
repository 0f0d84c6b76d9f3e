"""What the aligned gate across vLLM's DP engine cores reads and checks, without vLLM.

Opt-in: the ``vllm.general_plugins`` entry point does nothing unless
``DENSEGATE_VLLM_DP=1`` is set in every engine-core process (every node). The
gate's parameters are the one-engine gate's, from
``additional_config={"densegate": {...}}`` (``gate_config_from``), turned into
the aligned gate's config, plus the DP-only keys (``DP_ONLY_KEYS``: the
aligned gate's releases, declared in ``densegate.impl.settings``), read here
only; vLLM's prefill cadence beside an enabled gate is refused
(``check_no_cadence``): two deferrals would stack.

Ranks must agree on that config and on ``step_counter``. Each rank appends
``[f, f*f, t, t*t]`` (``f`` its config fingerprint, ``t`` its step counter
modulo ``2**20``) to its vector: after the SUM, ``sum == n*f`` and ``sum of
squares == n*f*f`` hold on a rank iff every rank sent its ``f`` (equality in
Cauchy-Schwarz), so one all-reduce both decides and checks.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Mapping, Sequence

from densegate.impl.dp_gate import VECTOR_SIZE, AlignedGateConfig
from densegate.impl.settings import VLLM, VLLM_DP, carried, pairing, read, setting
from densegate.integrations.vllm.config import (
    CONFIG_KEY,
    check_no_cadence,
    gate_settings,
    one_rank_config,
)

__all__ = [
    "AGREEMENT_SIZE",
    "DEFAULT_TIMEOUT_S",
    "DP_ONLY_KEYS",
    "ENV_VAR",
    "DpGateError",
    "agreement_slots",
    "aligned_config_from",
    "check_agreement",
    "dp_gate_enabled",
    "fingerprint",
]

_DP_ONLY = tuple(s for s in carried(VLLM_DP) if s.key(VLLM) is None)
DP_ONLY_KEYS = tuple(str(s.key(VLLM_DP)) for s in _DP_ONLY)
"""The keys only the DP gate reads (``densegate.impl.settings``); one engine refuses them."""

ENV_VAR = "DENSEGATE_VLLM_DP"
"""``1``: align prefills across DP engine cores; unset or ``0``: the plugin does nothing."""

DEFAULT_TIMEOUT_S = 300
"""Seconds a rank waits in the gate's all-reduce when vLLM's
``cpu_distributed_timeout_seconds`` is unset (then gloo's own default is 30 min)."""

AGREEMENT_SIZE = 4
"""Slots after the gate's ``VECTOR_SIZE``: fingerprint, its square, tick, its square."""

_MOD = 1 << 20


class DpGateError(RuntimeError):
    """DP ranks disagree (config, step counter, rank count) or one stopped stepping."""


def dp_gate_enabled(environ: Mapping[str, str]) -> bool:
    """Whether ``DENSEGATE_VLLM_DP`` asks for the aligned gate; a bad value names itself."""
    raw = environ.get(ENV_VAR, "")
    if raw in ("", "0"):
        return False
    if raw == "1":
        return True
    raise ValueError(f"{ENV_VAR} must be '1' (on) or '0'/unset (off), got {raw!r}")


def aligned_config_from(
    additional_config: Mapping[str, object] | None,
    *,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    prefill_schedule_interval: int,
    graphs: bool = True,
) -> AlignedGateConfig:
    """The aligned gate's config from the one-engine keys plus the DP-only ones
    (``DP_ONLY_KEYS``: absent or None, off); the cadence beside it is refused.

    ``pace_tokens`` absent (not null) where decode is not replayed from CUDA graphs
    (``graphs`` false) is ``dense_tokens``: there a mixed step costs only its tokens, so
    holding cannot pay (under the roofline, and in ``benchmarks/vllm_dp_side_by_side.py``:
    51 of its 70 goal bars met paced against 26 holding), and the paced release never
    holds while no rank's prefill passes a dense pass. With graphs the hold stays."""
    raw = (additional_config or {}).get(CONFIG_KEY)
    dp_only: Mapping[str, object] = {}
    if isinstance(raw, Mapping) and any(k in raw for k in DP_ONLY_KEYS):
        dp_only = {k: v for k, v in raw.items() if k in DP_ONLY_KEYS}
        rest = {k: v for k, v in raw.items() if k not in DP_ONLY_KEYS}
        additional_config = {**(additional_config or {}), CONFIG_KEY: rest}
    extra = read(VLLM_DP, dp_only, _where, only=_DP_ONLY)
    n, seqs = max_num_batched_tokens, max_num_seqs
    settings = gate_settings(additional_config, max_num_batched_tokens=n, max_num_seqs=seqs)
    check_no_cadence(prefill_schedule_interval, one_rank_config(settings))
    given = (additional_config or {}).get(CONFIG_KEY)
    if not graphs and not (isinstance(given, Mapping) and "pace_tokens" in given):
        settings["pace_tokens"] = settings["dense_tokens"]
    why = pairing({**settings, **extra}, lambda name: _where(str(setting(name).key(VLLM_DP))))
    if why is not None:
        raise ValueError(why)
    return AlignedGateConfig(**settings, **extra)


def _where(key: str) -> str:
    return f"additional_config[{CONFIG_KEY!r}][{key!r}]"


def fingerprint(config: AlignedGateConfig, world_size: int, vllm_version: str) -> int:
    """A number in ``[1, 2**20)`` naming every config field, the DP size and vLLM's version."""
    fields = sorted((f.name, repr(getattr(config, f.name))) for f in dataclasses.fields(config))
    text = repr((fields, world_size, vllm_version, VECTOR_SIZE))
    return zlib.crc32(text.encode()) % (_MOD - 1) + 1


def agreement_slots(fp: int, tick: int) -> list[int]:
    """This rank's ``[f, f*f, t, t*t]`` for the all-reduce (``t`` taken modulo ``2**20``)."""
    t = tick % _MOD
    return [fp, fp * fp, t, t * t]


def check_agreement(
    tail: Sequence[int], *, world_size: int, fp: int, tick: int, rank: int, what: str
) -> None:
    """Raise ``DpGateError`` unless every rank sent this rank's fingerprint and tick."""
    if len(tail) != AGREEMENT_SIZE:
        raise ValueError(f"agreement slots: want {AGREEMENT_SIZE}, got {len(tail)}")
    mine = agreement_slots(fp, tick)
    n = world_size
    if tail[0] != n * mine[0] or tail[1] != n * mine[1]:
        raise DpGateError(
            f"densegate DP gate, rank {rank}, {what}: DP ranks run different gate configs "
            f"(this rank's fingerprint {fp}, the {n} ranks' sum {tail[0]}); give every engine "
            "core the same additional_config['densegate'], scheduler limits, DP size and vLLM"
        )
    if tail[2] != n * mine[2] or tail[3] != n * mine[3]:
        raise DpGateError(
            f"densegate DP gate, rank {rank}, {what}: DP ranks are at different step_counter "
            f"values (this rank {tick}); the aligned decision needs them in lockstep"
        )
