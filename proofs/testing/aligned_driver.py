"""Running fresh aligned gates on one run of ticks, and judging every tick against the dp spec.

The judges read only what an aligned gate shows (decision, reason, cap, ``hold_passes``),
tick by tick, beside one step of the spec's own machine (``densegate.spec.dp_gate.DP``,
evaluated concretely from its own state) and, in D6's class, of the single-rank machine.
Holds are counted by the kit (the episode's age), never taken from the gate's counter.
``densegate conform --aligned`` (sampled) and ``--prove --aligned`` (whose refutations are
replayed here) judge with these.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from densegate.impl.dp_gate import AlignedGateConfig, ReducedObservation
from densegate.impl.gate import Decision, Reason
from densegate.spec.dp_gate import DP, LOCAL, SHARED
from densegate.spec.gate import GATE
from densegate.spec.machine import evaluate
from densegate.spec.properties import Property, by_id
from densegate.testing.aligned_strategies import MAX_WORLD, AlignedRun
from densegate.testing.search import CachedDriver, Outcome

__all__ = [
    "ALIGNED_PROPERTIES",
    "AlignedDriver",
    "AlignedFactory",
    "CheckedAlignedGate",
    "TickRecord",
    "spec_params",
]


class CheckedAlignedGate(Protocol):
    """All the kit needs: ``decide`` per tick and the hold counter it keeps."""

    @property
    def hold_passes(self) -> int: ...

    def decide(self, reduced: ReducedObservation, tick: int) -> Decision: ...


AlignedFactory = Callable[[AlignedGateConfig, int], Any]
"""``factory(config, world_size)``: a fresh aligned gate, in its initial state."""

_FIRED_PACED = (
    "with the paced mode on, every tick FIREs, never ALIGNED, STALL or BUDGET, but a busy one "
    "(the busy wait on, W + Va < N, D >= busy_decodes and Nd = 0)"
)
ALIGNED_PROPERTIES: tuple[Property, ...] = (
    Property(
        "D1",
        "rank agreement",
        "rank agreement: every rank's copy (a fresh gate per rank, up to 8; two for one rank) "
        "fed the same reduced vectors and ticks takes the same decision and keeps the same "
        "hold_passes",
    ),
    by_id("D2"),
    by_id("D3"),
    Property(
        "D4",
        "no deadlock",
        "no deadlock: exactly one decision per tick (never an error; fire matches the reason, "
        "cap None or an int >= 1); hold_passes stays in [0, K) and a HOLD raises it (the rank "
        "K-1-h >= 0 decreases)",
    ),
    by_id("D5"),
    by_id("D6"),
    by_id("D7"),
    by_id("D8"),
    Property(
        "D9",
        "paced holds only busy",
        f"paced mode holds only busy ticks: {_FIRED_PACED}; PACED only with it on and the tick "
        "not busy (so no HOLD while work waits, but in the busy wait)",
    ),
    Property(
        "D10",
        "paced cap",
        "paced cap: Decision.cap is pace_tokens on a PACED fire with no filled rank, "
        "surge_tokens (pace_tokens with it off) on one with a filled rank (Fl > 0), and None "
        "on every other decision; a tick where every rank waits and the fill reaches T*N is "
        "uncapped",
    ),
    Property(
        "agreement",
        "agreement with spec",
        "agreement: decision, reason, cap (None as the spec's 0) and hold_passes equal "
        "densegate.spec.dp_gate.DP's on every tick, its state carried from the initial one",
    ),
)
"""What the aligned kit judges, in report order. D2, D3, D5-D8 read as ``densegate prove``
states them; D1 and D4 as a black box shows them; D11 (first token) and D12 (the cap rule)
are about the scheduler, no decision of a gate."""
_NAMES = dict(zip(SHARED[:-1], range(1, len(SHARED)), strict=True))
"""The spec's name of each reduced-vector slot after RANKS, in slot order."""


def spec_params(config: AlignedGateConfig, world: int) -> dict[str, Any]:
    """The dp spec's parameters for a config (the fill threshold T read as the gate gets it,
    ``config.fill_tokens``); the spec's cap bounds are the caps themselves (the surge off:
    Cs = Cp)."""
    align, pace = config.align_ticks, config.pace_tokens
    surge = config.surge_tokens or pace or 1
    return {
        "B": config.dense_tokens, "K": config.max_hold_passes, "N": world,
        "T": config.fill_tokens, "S": config.stall_ticks, "kv": config.kv_pressure_valve,
        "enabled": config.enabled, "al": align is not None, "A": align or 0,
        "pc": pace is not None, "Cp": pace or 1, "Cs": surge, "cmin": 1, "cmax": surge,
        "bz": config.busy_decodes is not None, "Db": config.busy_decodes or 1,
    }  # fmt: skip


@dataclass(frozen=True)
class TickRecord:
    """One tick as driven: the vector, the gate's counter around it, both verdicts."""

    obs: ReducedObservation
    tick: int
    h: object
    decision: Decision | None
    h_next: object
    spec: tuple[bool, str, int, int]
    """The dp spec's (fire, reason, cap (0: none), h') from the spec's own state."""
    error: str | None = None


def _well_formed(dec: object) -> bool:
    fire, reason = getattr(dec, "fire", None), getattr(dec, "reason", None)
    cap = getattr(dec, "cap", None)
    return (
        isinstance(fire, bool)
        and isinstance(reason, Reason)
        and fire == (reason is not Reason.HOLD)
        and (cap is None or (type(cap) is int and cap >= 1))
    )


def _code(dec: Any, h: object) -> str:
    return f"{'FIRE' if dec.fire else 'HOLD'} {dec.reason.name} cap={dec.cap} hold_passes={h}"


def _exc(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


def _counter_ok(h: object, K: int) -> bool:
    return isinstance(h, int) and not isinstance(h, bool) and 0 <= h < K


def _judge(
    out: Outcome[TickRecord],
    i: int,
    p: Mapping[str, Any],
    o: Mapping[str, int],
    dec: Decision,
    counts: tuple[object, object, int],
    spec: tuple[bool, str, int, int],
) -> None:
    """Every per-tick property but D1 and D6 on one well-formed decision; ``counts`` is the
    gate's counter before and after, and the kit's own count of held ticks before."""
    h, h_next, age = counts
    N, K, T, pc, Cp = p["N"], p["K"], p["T"], p["pc"], p["Cp"] if p["pc"] else None
    fire, why, cap = dec.fire, dec.reason.name, dec.cap
    code = _code(dec, h_next)
    W, F, D, Fl, Nd, Va = (o[k] for k in ("W", "F", "D", "Fl", "Nd", "Va"))
    everyone = W == N and F >= T * N
    dense = everyone or (Fl > 0 and not pc)
    # D2: the episode's age is the kit's count of holds in a row, not the gate's.
    if why == "BUDGET" and age != K - 1:
        out.flag("D2", i, f"BUDGET after {age} held ticks of this episode, not K-1")
    if not fire and not (p["enabled"] and W > 0 and D > 0 and Nd == 0 and not dense):
        _held_where_it_must_not(out, i, p, o, dense)
    if why == "NO_DECODE" and not (D == 0 or (Nd > 0 and not pc)):
        out.flag("D3", i, "NO_DECODE with D > 0 and (Nd = 0 or the paced mode on)")
    if not _counter_ok(h_next, K):
        out.flag("D4", i, f"hold_passes={h_next!r} outside [0, {K})")
    if not fire and not (isinstance(h, int) and isinstance(h_next, int) and h_next > h):
        out.flag("D4", i, f"HOLD took hold_passes {h!r} -> {h_next!r}: no progress")
    if why == "DENSE" and not dense:
        out.flag("D7", i, "DENSE, yet not every rank waits with F >= T*N, and no "
                 "filled rank (Fl > 0) with the paced mode off")  # fmt: skip
    release = W + Va == N and age >= p["A"]
    if why == "ALIGNED" and not (p["al"] and release):
        out.flag("D8", i, f"ALIGNED without the release on, W + Va = N and held {age} >= A")
    if not fire and p["al"] and p["enabled"] and release and D > 0:
        out.flag("D8", i, f"release on, W + Va = N and held {age} >= A, yet HOLD")
    busy = p["bz"] and W + Va < N and p["Db"] <= D and Nd == 0
    calm = pc and not busy
    if (calm and (not fire or why in ("ALIGNED", "STALL", "BUDGET"))) or (
        why == "PACED" and not calm
    ):
        state = f"the paced mode {'on' if pc else 'off'}{', busy' if pc and busy else ''}"
        out.flag("D9", i, f"{code} with {state}")
    pace = (p["Cs"] if Fl > 0 else Cp) if pc else None
    if (cap or 0) != (pace if why == "PACED" else 0) or (everyone and cap is not None):
        out.flag("D10", i, f"{code}, pace_tokens={Cp}, surge_tokens={p['Cs'] if pc else None}, "
                 f"filled ranks Fl={Fl}")  # fmt: skip
    if (fire, why, cap or 0, h_next) != spec:
        s_fire, s_why, s_cap, s_h = spec
        said = f"{'FIRE' if s_fire else 'HOLD'} {s_why} cap={s_cap or None}"
        out.flag("agreement", i, f"{code}; the spec: {said} hold_passes={s_h}")


class AlignedDriver(CachedDriver[AlignedRun, TickRecord]):
    """Runs the factory's aligned gates on runs, caching each run's outcome for every search."""

    def __init__(self, factory: AlignedFactory) -> None:
        super().__init__()
        self.factory = factory
        self.broken: dict[AlignedRun, str] = {}
        """Runs on which building or deciding raised, or a decision was malformed: why."""

    def steps(self, run: AlignedRun) -> tuple[tuple[ReducedObservation, int], ...]:
        return run.passes

    def with_steps(self, run: AlignedRun, steps: tuple[Any, ...]) -> AlignedRun:
        return AlignedRun(run.config, run.world_size, steps)

    def _simulate(self, run: AlignedRun) -> Outcome[TickRecord]:
        cfg, N, out = run.config, run.world_size, Outcome[TickRecord]()
        p = spec_params(cfg, N)
        K = p["K"]
        try:
            gates = [self.factory(cfg, N) for _ in range(max(2, min(N, MAX_WORLD)))]
            h: object = gates[0].hold_passes
            others = [g.hold_passes for g in gates[1:]]
        except Exception as e:
            self.broken[run] = f"building the gate raised {_exc(e)}"
            out.flag("D4", -1, self.broken[run])
            return out
        if not _counter_ok(h, K):
            out.flag("D4", -1, f"initial hold_passes={h!r} outside [0, {K})")
        if any(x != h for x in others):
            out.flag("D1", -1, f"fresh copies start at hold_passes {[h, *others]}")
        if h != 0:
            out.flag("agreement", -1, f"initial hold_passes={h!r}, the spec starts at 0")
        state = {"h": 0, "q": 0, "g": 0}
        one_rank = N == 1 and p["T"] == p["B"] and p["S"] == 0
        one_rank = one_rank and not (p["kv"] or p["al"] or p["pc"])
        single = {"B": p["B"], "K": K, "enabled": p["enabled"]}
        single_h, age = 0, 0
        for i, (red, t) in enumerate(run.passes):
            vec = red.to_vector()
            o = {k: vec[j] for k, j in _NAMES.items()} | {"t": t} | dict.fromkeys(LOCAL, 0)
            _, s_out, state = evaluate(DP, p, state, o)
            spec = (bool(s_out["fire"]), str(s_out["reason"]), int(s_out["cap"]), int(state["h"]))
            try:
                dec = gates[0].decide(red, t)
                h_next = gates[0].hold_passes
            except Exception as e:
                out.records.append(TickRecord(red, t, h, None, None, spec, _exc(e)))
                self.broken[run] = f"decide raised {_exc(e)}"
                out.flag("D4", i, self.broken[run])
                out.flag("agreement", i, self.broken[run])
                break
            if not _well_formed(dec):
                bad = f"returned {dec!r}"
                out.records.append(TickRecord(red, t, h, None, h_next, spec, bad))
                self.broken[run] = f"decide {bad}, not a well-formed Decision"
                out.flag("D4", i, self.broken[run])
                out.flag("agreement", i, self.broken[run])
                break
            out.records.append(TickRecord(red, t, h, dec, h_next, spec))
            mine = (dec.fire, dec.reason, dec.cap, h_next)
            for r, copy in enumerate(gates[1:], 1):
                try:
                    d2 = copy.decide(red, t)
                    theirs: object = (d2.fire, d2.reason, d2.cap, copy.hold_passes)
                except Exception as e:
                    theirs = _exc(e)
                if theirs != mine:
                    out.flag("D1", i, f"copy {r} returned {theirs}, copy 0 {mine}")
            _judge(out, i, p, o, dec, (h, h_next, age), spec)
            fire = dec.fire
            if one_rank:
                w_d = {"w": o["F"], "d": o["D"]}
                _, g_out, g_next = evaluate(GATE, single, {"h": single_h}, w_d)
                want = (bool(g_out["fire"]), str(g_out["reason"]), int(g_next["h"]))
                if (fire, dec.reason.name, h_next) != want:
                    out.flag("D6", i, f"{_code(dec, h_next)}; the single-rank spec: {want}")
                single_h = want[2]
            age = 0 if fire else age + 1
            if age >= K:
                out.flag("D2", i, f"held {age} ticks in a row, budget K = {K}")
            h = h_next
        return out


def _held_where_it_must_not(
    out: Outcome[TickRecord], i: int, p: Mapping[str, Any], o: Mapping[str, int], dense: bool
) -> None:
    """D3, D5 and D7's HOLD half, on a HOLD where a tick may not hold."""
    W, D, Nd = o["W"], o["D"], o["Nd"]
    if W > 0 and (D == 0 or Nd > 0):
        why = "no rank decodes (D = 0)" if D == 0 else "a waiting rank has no decode (Nd > 0)"
        out.flag("D3", i, f"work waits and {why}, yet HOLD")
    if not p["enabled"]:
        out.flag("D5", i, "gate disabled, yet HOLD")
    reasons = [
        (not p["enabled"], "the gate off"),
        (W == 0, "nothing waiting"),
        (D == 0, "nothing decoding"),
        (Nd > 0, "a waiting rank with no decode (Nd > 0)"),
        (dense and o["Fl"] > 0 and not p["pc"], "a rank filled on its own (Fl > 0)"),
        (dense, "every rank waiting with F >= T*N"),
    ]
    out.flag("D7", i, "HOLD with " + next(text for bad, text in reasons if bad))
