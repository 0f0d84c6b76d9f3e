"""The aligned gate's settings, each declared once: its type, range, default and meaning.

Every reader of a gate setting derives from ``SETTINGS``: ``AlignedGateConfig``'s
validation (``validate``), ``densegate run``'s ``--align-ticks``, ``--pace-tokens`` and
``--surge-tokens`` (``flagged``), ``DPConfig``'s pass-through to the gate, the keys vLLM's
``additional_config['densegate']`` and SGLang's ``DENSEGATE_SGLANG`` read (``keys``,
``read``) and the settings table of docs/DATA_PARALLEL.md (``table``). A setting
added here is taken by each of them; the config dataclasses still spell their
fields (a type checker reads those), and a test holds them to this declaration.

A carrier is a config a setting is read in besides ``AlignedGateConfig`` (which
carries every one): ``DP`` (``DPConfig``), ``VLLM`` (one vLLM engine's
``GatedScheduler``), ``VLLM_DP`` (the aligned gate across vLLM's DP engine cores)
and ``SGLANG``. A carrier may read a setting under another key (one vLLM engine's
``stall_passes`` is the gate's ``stall_ticks``). Pure: the standard library only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from densegate.impl.validation import check_bool, check_int, exact_fraction, is_int

__all__ = [
    "APPLIES_CAP",
    "CARRIERS",
    "DP",
    "REQUIRED",
    "SETTINGS",
    "SGLANG",
    "VLLM",
    "VLLM_DP",
    "Setting",
    "carried",
    "flagged",
    "keys",
    "pairing",
    "read",
    "setting",
    "table",
    "validate",
]

DP = "DPConfig"
VLLM = "vllm"
VLLM_DP = "vllm-dp"
SGLANG = "sglang"
CARRIERS = (DP, VLLM, VLLM_DP, SGLANG)
APPLIES_CAP = (DP, VLLM, VLLM_DP)
"""The carriers whose scheduler applies ``Decision.cap`` (densegate's own, under
``DPConfig``; vLLM's, through its per-step token budget,
``densegate.integrations.vllm.budget``). SGLang's pass is sized before the gate is asked,
so there a cap is taken only at or above one pass's prefill room, which every pass keeps
anyway: its config checks that where the room is known
(``densegate.integrations.sglang.config.gate_config``)."""


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()
"""The default of a setting every config must be given (``dense_tokens``)."""


@dataclass(frozen=True, slots=True)
class Setting:
    """One gate setting: the ``AlignedGateConfig`` field ``name`` and what it accepts.

    ``kind`` is ``"int"`` (``>= low``), ``"bool"`` or ``"fraction"`` (a number in
    ``(0, 1]``). A ``None`` default means None is accepted and turns the rule off
    (``off`` says what that is); a default that is a value turns it off too when
    ``off`` is set (``stall_ticks`` 0). ``flag`` is the ``densegate run --dp`` flag
    made from this declaration (``metavar`` its value's name). ``carriers`` read it, under
    its name unless ``renamed`` gives another for a carrier. ``caps``: turning it
    on makes decisions carry ``Decision.cap``, which the engine's scheduler must
    apply (``APPLIES_CAP``; SGLang takes only a cap its pass keeps anyway).
    ``at_least``: another optional setting this one needs on beside it, with this
    value at least that one's.
    """

    name: str
    kind: str
    default: Any
    help: str
    low: int | None = None
    off: str = ""
    flag: str = ""
    metavar: str = ""
    carriers: tuple[str, ...] = ()
    renamed: tuple[tuple[str, str], ...] = ()
    caps: bool = False
    at_least: str = ""

    @property
    def rule(self) -> str:
        """The rule this setting turns on (``the ALIGNED release``), or ``""``."""
        return self.off.removesuffix(" off")

    @property
    def about(self) -> str:
        """The rule and what it does, in one line."""
        return f"{self.rule}: {self.help}" if self.rule else self.help

    @property
    def optional(self) -> bool:
        """None is a value here (the rule off)."""
        return self.default is None

    def key(self, carrier: str) -> str | None:
        """The name ``carrier`` reads this setting under, or None where it is not read."""
        return dict(self.renamed).get(carrier, self.name) if carrier in self.carriers else None

    def requirement(self, null: str | None = None, spelled: str = "null") -> str:
        """What a value must be, e.g. ``an int >= 0 or null (the ALIGNED release off)``;
        ``null``: None is a value here too, meaning this (a carrier's own default);
        ``spelled``: how the carrier writes None (``off`` on the command line)."""
        base = {"int": f"an int >= {self.low}", "bool": "a bool",
                "fraction": "a number in (0, 1]"}[self.kind]  # fmt: skip
        meaning = null if null is not None else self.off if self.optional else None
        if meaning is not None:
            return f"{base} or {spelled} ({meaning})"
        return f"{base} ({_shown(self.default)}: {self.off})" if self.off else base

    def problem(self, label: str, value: object, null: str | None = None) -> str | None:
        """Why ``value`` is not one of this setting's, as ``"<label> must be <requirement>,
        got <value>"``, or None (``null`` as ``requirement``'s)."""
        if value is None and (self.optional or null is not None):
            return None
        if self.kind == "int":
            ok = is_int(value) and (self.low is None or value >= self.low)
        elif self.kind == "bool":
            ok = isinstance(value, bool)
        else:
            number = isinstance(value, int | float | Fraction) and not isinstance(value, bool)
            ok = number and 0 < value <= 1  # type: ignore[operator]
        return None if ok else f"{label} must be {self.requirement(null)}, got {value!r}"

    def check(self, owner: str, value: object) -> None:
        """``ValueError`` as every config field's: ``<owner>.<name> must be ...``."""
        if value is None and self.optional:
            return
        if self.kind == "int":
            check_int(owner, self.name, value, self.low)
        elif self.kind == "bool":
            check_bool(owner, self.name, value)
        else:
            exact_fraction(owner, self.name, value)


def _shown(value: object) -> str:
    if value is None:
        return "off"
    return str(value).lower() if isinstance(value, bool) else str(value)


_ENGINES = (VLLM, VLLM_DP)
_ONE_ENGINE = ((VLLM, "stall_passes"), (VLLM_DP, "stall_passes"))
"""One vLLM engine's gate calls ``stall_ticks`` ``stall_passes`` (a tick is its pass)."""

SETTINGS: tuple[Setting, ...] = (
    Setting("dense_tokens", "int", REQUIRED, "B: a pass of B waiting tokens is dense "
            "(a rank at B fires DENSE)", low=1, carriers=(*_ENGINES, SGLANG)),
    Setting("max_hold_passes", "int", 30, "K: the most ticks an episode is held (BUDGET)",
            low=1, carriers=_ENGINES),
    Setting("enabled", "bool", True, "the gate itself (false: every tick fires, DISABLED)",
            carriers=_ENGINES),
    Setting("target_fill", "fraction", 1.0, "the fraction of B that fills a rank: any rank "
            "filled, or every rank waiting at that aggregate, fires DENSE", carriers=(DP, SGLANG)),
    Setting("stall_ticks", "int", 0, "fire once the aggregate fill has not grown for this many "
            "ticks", low=0, off="the STALL valve off", carriers=CARRIERS, renamed=_ONE_ENGINE),
    Setting("kv_pressure_valve", "bool", False, "fire while any rank's KV is over its high "
            "watermark", off="the KV valve off", carriers=(DP, SGLANG)),
    Setting("align_ticks", "int", None, "fire once every rank has waiting work or is "
            "vacant and the episode has been held A ticks (0: at once; proved as D8)", low=0,
            off="the ALIGNED release off", flag="--align-ticks", metavar="A",
            carriers=(DP, VLLM_DP, SGLANG)),
    Setting("pace_tokens", "int", None, "never hold while work waits; a tick not every rank "
            "can fill densely fires PACED, each rank's prefill capped at C tokens (D9-D12)",
            low=1, off="the paced release off", flag="--pace-tokens", metavar="C",
            carriers=(DP, VLLM, VLLM_DP, SGLANG), caps=True),
    Setting("surge_tokens", "int", None, "a PACED tick where some rank is filled caps each "
            "rank's prefill at S tokens instead (>= pace_tokens; D10)", low=1,
            off="the surge cap off", flag="--surge-tokens", metavar="S",
            carriers=(DP, VLLM_DP), caps=True, at_least="pace_tokens"),
    Setting("busy_decodes", "int", None, "paced mode: a tick whose release would be "
            "unaligned (some rank that decodes has nothing waiting) while the ranks decode "
            "at least D requests, none of the waiting ranks without decodes, is held as the "
            "hold mode holds (at most K - 1 in a row; D9); for engines whose prefill does not "
            "ride along decodes", low=1, off="the busy wait off", carriers=(SGLANG,)),
)  # fmt: skip
"""Every gate setting, in ``AlignedGateConfig``'s field order."""

_BY_NAME = {s.name: s for s in SETTINGS}


def setting(name: str) -> Setting:
    """The setting named ``name`` (``KeyError`` naming the known ones otherwise)."""
    if name not in _BY_NAME:
        raise KeyError(f"no gate setting {name!r}; known: {list(_BY_NAME)}")
    return _BY_NAME[name]


def carried(carrier: str) -> tuple[Setting, ...]:
    """The settings ``carrier`` reads, in declared order."""
    if carrier not in CARRIERS:
        raise ValueError(f"carrier must be one of {CARRIERS}, got {carrier!r}")
    return tuple(s for s in SETTINGS if s.key(carrier) is not None)


def keys(carrier: str) -> tuple[str, ...]:
    """The names ``carrier`` reads its settings under, in declared order."""
    return tuple(str(s.key(carrier)) for s in carried(carrier))


def flagged() -> tuple[Setting, ...]:
    """The settings whose ``densegate run --dp`` flag is made from this declaration."""
    return tuple(s for s in SETTINGS if s.flag)


def validate(owner: str, config: object) -> None:
    """Check every declared field of ``config`` (an ``AlignedGateConfig``), in order, then
    each ``at_least`` between two of them."""
    for s in SETTINGS:
        s.check(owner, getattr(config, s.name))
    values = {s.name: getattr(config, s.name) for s in SETTINGS}
    why = pairing(values, lambda name: f"{owner}.{name}")
    if why is not None:
        raise ValueError(why)


def pairing(values: Mapping[str, object], where: Callable[[str], str]) -> str | None:
    """Why ``values`` (by field name, each already in its own range) break an ``at_least``
    (``where`` names a field as its reader spells it), or None. A setting whose
    ``at_least`` is not among ``values`` at all is left to whoever reads that one."""
    for s in SETTINGS:
        value, base = values.get(s.name), values.get(s.at_least)
        if not s.at_least or value is None or s.at_least not in values:
            continue
        if base is None:
            return f"{where(s.name)} is {value!r}, which needs {where(s.at_least)} set"
        if value < base:  # type: ignore[operator]
            return f"{where(s.name)} must be >= {where(s.at_least)}={base!r}, got {value!r}"
    return None


def read(
    carrier: str,
    raw: Mapping[str, object],
    where: Callable[[str], str],
    defaults: Mapping[str, object] | None = None,
    nulls: Mapping[str, str] | None = None,
    only: Sequence[Setting] | None = None,
) -> dict[str, Any]:
    """``carrier``'s settings (``only`` these, if given) from ``raw`` (its keys there), by
    field name. An absent key takes its default (``defaults`` first); ``nulls``: settings
    whose None means something here too (the carrier's own default). A bad value raises
    ``ValueError`` naming ``where(key)`` and what it must be. Unknown keys are the
    caller's to refuse."""
    given, null = defaults or {}, nulls or {}
    out: dict[str, Any] = {}
    for s in carried(carrier) if only is None else only:
        key = s.key(carrier)
        if key is None:
            raise ValueError(f"{carrier} does not read {s.name}")
        value = raw.get(key, given.get(s.name, s.default))
        why = s.problem(where(key), value, null.get(s.name))
        if why is not None:
            raise ValueError(why)
        out[s.name] = value
    why = pairing(out, lambda name: where(str(setting(name).key(carrier))))
    if why is not None:
        raise ValueError(why)
    return out


_COLUMNS = {DP: "`DPConfig`", VLLM: "vLLM, one engine", VLLM_DP: "vLLM DP",
            SGLANG: "`DENSEGATE_SGLANG`"}  # fmt: skip


def table(args: Sequence[str] = ()) -> tuple[list[str], list[list[str]]]:
    """The docs' settings table (header, rows): one row per setting, its range, default,
    ``run --dp`` flag and the key each carrier reads it under (``-``: not read there)."""
    if args:
        raise ValueError(f"the settings table takes no arguments, got {list(args)}")
    header = ["`AlignedGateConfig` field", "values", "default", "`densegate run --dp`",
              *_COLUMNS.values(), "what it is"]  # fmt: skip
    rows = []
    for s in SETTINGS:
        default = "required" if s.default is REQUIRED else f"`{_shown(s.default)}`"
        cells = [_cell(s, c) for c in _COLUMNS]
        flag = f"`{s.flag} {s.metavar}`" if s.flag else "-"
        rows.append([f"`{s.name}`", s.requirement(), default, flag, *cells, s.about])
    return header, rows


def _cell(s: Setting, carrier: str) -> str:
    key = s.key(carrier)
    if key is None:
        return "-"
    return (
        f"`{key}` (at least one pass's room, its default there)"
        if s.caps and carrier not in APPLIES_CAP
        else f"`{key}`"
    )
