"""What the SGLang plugin reads from SGLang's flags and its own variable, checked before use.

Kept free of SGLang imports so the checks (and their error messages) are tested
and type-checked without SGLang installed.

The pass budget K is SGLang's own ``--prefill-delayer-max-delay-passes`` (the
flag means the same thing there: the most passes a prefill may be delayed).
The rest comes from the environment variable ``DENSEGATE_SGLANG``, a JSON
object, read in every scheduler process (SGLang starts them with the parent's
environment, so every rank reads the same value)::

    DENSEGATE_SGLANG='{"pace_tokens": null, "target_fill": 0.75, "stall_ticks": 8}'

``dense_tokens`` defaults to the prefill room of one SGLang pass:
``min(--max-prefill-tokens, --chunked-prefill-size)`` (chunked prefill off:
``--max-prefill-tokens``), so a dense pass is always reachable.

``pace_tokens`` defaults to that room too: the paced release, which never holds while
work waits. Its cap cannot be lower here: ``PrefillAdder`` sizes a pass's first
admission before the executor asks the delayer, and a pass is an extend or a decode
(no prefill rides along decodes), so a cap at the room, which every pass already
keeps, is the only one SGLang's pass applies. ``null`` turns it off: the hold mode
(DENSE, ALIGNED, STALL and the budget K), SGLang's delayer's kind of rule. Why the
room is the default: ``benchmarks/sglang_side_by_side.py`` (docs/SGLANG.md).

``busy_decodes`` defaults to three quarters of the DP group's running slots
(``ceil(3/4 * ranks * --max-running-requests)``, ``BUSY``): with no prefill riding along
decodes, an extend on some ranks stalls every rank's decodes for its pass, so while the
batches are that full the paced release waits (at most K - 1 passes) for the extends to
align. Where ``--max-running-requests`` is left to SGLang (sized at run time), the delayer
sizes it at its first pass from the ranks' run-time slots, summed through the pass's
all-gather (so every rank gets the same value; ``busy_of_slots``). ``null`` turns it off.
"""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

from densegate.impl.dp_gate import AlignedGateConfig
from densegate.impl.gate import Reason
from densegate.impl.settings import SGLANG, carried, keys, read
from densegate.impl.validation import is_int, json_value
from densegate.integrations.versions import release

__all__ = [
    "BUSY",
    "BUSY_SHARE",
    "ENV_VAR",
    "ROOM",
    "SUPPORTED_SGLANG",
    "Busy",
    "PluginSettings",
    "Room",
    "UnsupportedSglangVersion",
    "busy_decodes",
    "busy_of_slots",
    "check_sglang_version",
    "default_dense_tokens",
    "gate_config",
    "settings_from_env",
    "sglang_reason",
]

ENV_VAR = "DENSEGATE_SGLANG"
"""The environment variable holding the plugin's own settings (a JSON object)."""

SUPPORTED_SGLANG = ((0, 5, 23), (0, 5, 24))
"""Supported SGLang releases: ``>= 0.5.23, < 0.5.24``. The plugin stands in for
``PrefillDelayer`` behind SGLang's ``PrefillDelayerSinglePassExecutor`` (its private
``_negotiate_should_allow_prefill`` and ``_NegotiateOutput``), and wraps
``Scheduler.get_new_batch_prefill``: internals that change between patch releases."""

_WATERMARK = "kv_high_watermark"
"""The one key that is no gate setting: each rank's KV pressure threshold, read here."""
_KEYS = (*keys(SGLANG), _WATERMARK)
"""The gate settings SGLang reads (``densegate.impl.settings``), then the watermark."""
_ROOM = "one pass's prefill room"
_K_FLAG = "--prefill-delayer-max-delay-passes"
_PACE = "pace_tokens"
_BUSY = "busy_decodes"


class Room(enum.Enum):
    """One SGLang pass's prefill room, as a setting's value: known once SGLang's flags are."""

    ROOM = _ROOM


ROOM = Room.ROOM
"""``pace_tokens``' default: the paced release at one pass's prefill room."""


class Busy(enum.Enum):
    """A share of the DP group's running slots, as a setting's value: known once SGLang's
    flags and the group's size are."""

    BUSY = "three quarters of the DP group's running slots"


BUSY = Busy.BUSY
"""``busy_decodes``' default: ``ceil(BUSY_SHARE * ranks * --max-running-requests)``."""
BUSY_SHARE = Fraction(3, 4)
"""The running slots' share at which the busy wait starts: 0.75 and 0.9 chose the same holds
on every scenario of ``benchmarks/sglang_side_by_side.py``, 0.5-0.6 held calm loads too."""


class UnsupportedSglangVersion(ImportError):
    """The installed SGLang is outside ``SUPPORTED_SGLANG``."""


def check_sglang_version(version: str) -> None:
    """Raise ``UnsupportedSglangVersion`` unless ``version`` is in ``SUPPORTED_SGLANG``."""
    lo, hi = SUPPORTED_SGLANG
    wanted = f">={'.'.join(map(str, lo))},<{'.'.join(map(str, hi))}"
    rel = release(version)
    if len(rel) < 3 or not (lo <= rel[:3] < hi):
        raise UnsupportedSglangVersion(
            f"densegate.integrations.sglang supports sglang{wanted} (it replaces the "
            f"internals of sglang/srt/managers/prefill_delayer.py), but sglang {version!r} "
            f"is installed; install 'sglang{wanted}' (pip install 'densegate[sglang]')"
        )


@dataclass(frozen=True, slots=True)
class PluginSettings:
    """The plugin's own settings; ``None`` for ``dense_tokens`` means SGLang's pass room."""

    dense_tokens: int | None = None
    target_fill: float = 1.0
    stall_ticks: int = 0
    kv_pressure_valve: bool = False
    kv_high_watermark: float = 0.9
    """KV pool usage (SGLang's max pool usage, 0..1) at or over which a rank reports
    KV pressure; only read by the gate with ``kv_pressure_valve`` on."""
    align_ticks: int | None = None
    pace_tokens: int | Room | None = ROOM
    """``align_ticks`` and ``pace_tokens``: the aligned gate's releases (``None``: off), as
    declared in ``densegate.impl.settings``, like every field here but the watermark;
    ``pace_tokens`` is the paced release at one pass's room (``ROOM``) unless set."""
    busy_decodes: int | Busy | None = BUSY
    """The paced release's busy wait: ``BUSY`` (sized by ``gate_config``) unless set."""


def _where(key: str) -> str:
    return f"{ENV_VAR}[{key!r}]"


def settings_from_env(environ: Mapping[str, str]) -> PluginSettings:
    """The settings in ``environ[ENV_VAR]`` (defaults when unset); a bad value names its key."""
    text = environ.get(ENV_VAR, "").strip()
    if not text:
        return PluginSettings()
    try:
        raw = json_value(text, ENV_VAR)
    except json.JSONDecodeError as e:
        raise ValueError(f"{ENV_VAR} must be a JSON object, got {text!r} ({e.msg})") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{ENV_VAR} must be a JSON object of {list(_KEYS)}, got {text!r}")
    unknown = sorted(str(k) for k in raw if k not in _KEYS)
    if unknown:
        raise ValueError(f"{ENV_VAR} has unknown keys {unknown}; known: {list(_KEYS)}")
    got = read(SGLANG, raw, _where, defaults={"dense_tokens": None}, nulls={"dense_tokens": _ROOM})
    if _PACE not in raw:
        got[_PACE] = ROOM
    if _BUSY not in raw:
        got[_BUSY] = BUSY
    mark = raw.get(_WATERMARK, 0.9)
    if isinstance(mark, bool) or not isinstance(mark, int | float) or not 0 < mark <= 1:
        raise ValueError(f"{_where(_WATERMARK)} must be a number in (0, 1], got {mark!r}")
    fill = float(got.pop("target_fill"))
    return PluginSettings(target_fill=fill, kv_high_watermark=float(mark), **got)


def default_dense_tokens(max_prefill_tokens: int, chunked_prefill_size: int | None) -> int:
    """One SGLang pass's prefill room: ``PrefillAdder``'s input budget, and its chunk if on."""
    if not is_int(max_prefill_tokens) or max_prefill_tokens < 1:
        raise ValueError(f"--max-prefill-tokens must be an int >= 1, got {max_prefill_tokens!r}")
    if chunked_prefill_size is None or (is_int(chunked_prefill_size) and chunked_prefill_size <= 0):
        return max_prefill_tokens
    if not is_int(chunked_prefill_size):
        raise ValueError(
            f"--chunked-prefill-size must be an int (<= 0: off), got {chunked_prefill_size!r}"
        )
    return min(max_prefill_tokens, chunked_prefill_size)


def gate_config(
    settings: PluginSettings,
    *,
    max_delay_passes: object,
    max_prefill_tokens: int,
    chunked_prefill_size: int | None,
    max_running_requests: int | None = None,
    ranks: int = 1,
) -> AlignedGateConfig:
    """The aligned gate's config: K from SGLang's flag, the rest from ``settings``;
    ``BUSY`` sized from ``max_running_requests`` (None or 0: left to SGLang, the busy wait
    off) and the DP group's ``ranks``."""
    if not is_int(max_delay_passes) or max_delay_passes < 1:
        raise ValueError(f"{_K_FLAG} must be an int >= 1, got {max_delay_passes!r}")
    room = default_dense_tokens(max_prefill_tokens, chunked_prefill_size)
    dense = room if settings.dense_tokens is None else settings.dense_tokens
    if dense > room:
        raise ValueError(
            f"{_where('dense_tokens')} must be <= one pass's prefill room {room} "
            f"(min(--max-prefill-tokens, --chunked-prefill-size)): a larger one is never "
            f"dense, got {dense!r}"
        )
    pace = room if settings.pace_tokens is ROOM else settings.pace_tokens
    if pace is not None and pace < room:
        raise ValueError(
            f"{_where(_PACE)} must be null (the hold mode) or >= one pass's prefill room "
            f"{room} (min(--max-prefill-tokens, --chunked-prefill-size)): SGLang's "
            f"PrefillAdder sizes a pass's first admission before it asks the delayer, so a "
            f"smaller cap would not be applied, got {pace!r}"
        )
    kept = {s.name: getattr(settings, s.name) for s in carried(SGLANG)}
    kept.update(dense_tokens=dense, pace_tokens=pace, busy_decodes=busy_decodes(
        settings, max_running_requests, ranks))  # fmt: skip
    return AlignedGateConfig(max_hold_passes=max_delay_passes, **kept)


def busy_decodes(
    settings: PluginSettings, max_running_requests: int | None, ranks: int
) -> int | None:
    """``settings.busy_decodes``, ``BUSY`` sized: ``ceil(BUSY_SHARE * ranks *
    max_running_requests)``, or None where SGLang sizes ``--max-running-requests`` (the
    delayer then sizes it at its first pass)."""
    if settings.busy_decodes is not BUSY:
        return settings.busy_decodes
    if not is_int(ranks) or ranks < 1:
        raise ValueError(f"the DP group's ranks must be an int >= 1, got {ranks!r}")
    if max_running_requests is None or max_running_requests == 0:
        return None
    if not is_int(max_running_requests) or max_running_requests < 0:
        raise ValueError(
            f"--max-running-requests must be an int >= 1, got {max_running_requests!r}"
        )
    return busy_of_slots(ranks * max_running_requests)


def busy_of_slots(slots: int) -> int | None:
    """``BUSY`` for a DP group of ``slots`` running slots in all: ``ceil(BUSY_SHARE *
    slots)``; None (off) for no slot known."""
    return math.ceil(BUSY_SHARE * slots) if slots > 0 else None


_SGLANG_REASONS = {Reason.HOLD: "delay", Reason.BUDGET: "wait_timeout", Reason.EMPTY: ""}


def sglang_reason(reason: Reason, waited: bool) -> str:
    """The densegate reason in SGLang's outcome vocabulary (its metrics labels, its debug log).

    HOLD is SGLang's ``delay``, BUDGET its ``wait_timeout`` (the budget is spent),
    EMPTY its ``""`` (nobody can prefill); every other FIRE is ``wait_success``
    after a hold and ``no_wait`` without one. densegate's own reason stays in the
    plugin's decision log."""
    label = _SGLANG_REASONS.get(reason)
    if label is not None:
        return label
    return "wait_success" if waited else "no_wait"
