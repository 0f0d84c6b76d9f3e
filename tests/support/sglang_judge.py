"""Judging the SGLang plugin's recorded decisions: the DP spec per pass, and the kit's judge.

A record is what one rank logged for one pass, as plain values (picklable across
processes): ``(tick, fire, reason, hold_passes, reduced, local)`` with
``reduced`` the summed vector (the gate's six slots first) and ``local`` the
rank's own six-slot contribution.

``dp_spec_mismatches`` replays the records through ``densegate.spec.dp_gate.DP``
(the proved machine, with the rank's own summand and a clock it must ignore)
and reports every pass where decision, reason or counter differ. ``kit_judge``
runs the conformance kit's per-pass judge (P1-P7 and agreement with the
single-rank spec): with ``T = B``, stall and KV valves off, the aligned gate on
N ranks is the single-rank gate fed ``w = B`` when every rank waits and the
fill reaches ``N * B`` and ``min(F, B - 1)`` otherwise (D6/D7), so the kit
judges the recorded decisions on that input.
"""

from __future__ import annotations

from typing import Any

from densegate.impl.dp_gate import AlignedGateConfig
from densegate.impl.dp_vector import (
    DECODE_SEQS,
    FILLED_RANKS,
    NO_DECODE_RANKS,
    WAITING_RANKS,
    WAITING_TOKENS,
)
from densegate.impl.gate import Decision, GateConfig, Reason
from tests.support.dp_slots import LOCAL, SHARED

Record = tuple[int, bool, str, int, tuple[int, ...], tuple[int, ...]]


def dp_spec_mismatches(
    records: list[Record], cfg: AlignedGateConfig, world: int
) -> list[tuple[int, Any, Any]]:
    """Passes where the recorded (fire, reason, h) differ from the DP spec's."""
    from densegate.spec.dp_gate import DP
    from densegate.spec.machine import evaluate

    params = {
        "B": cfg.dense_tokens,
        "K": cfg.max_hold_passes,
        "N": world,
        "T": cfg.fill_tokens,
        "S": cfg.stall_ticks,
        "kv": cfg.kv_pressure_valve,
        "enabled": cfg.enabled,
        "al": cfg.align_ticks is not None,
        "A": cfg.align_ticks or 0,
        "pc": cfg.pace_tokens is not None,
        "Cp": cfg.pace_tokens or 1,
        "Cs": cfg.surge_tokens or cfg.pace_tokens or 1,
        "cmin": 1,
        "cmax": cfg.surge_tokens or cfg.pace_tokens or 1,
        "bz": cfg.busy_decodes is not None,
        "Db": cfg.busy_decodes or 1,
    }
    state = {"h": 0, "q": 0, "g": 0}
    bad = []
    for tick, fire, reason, hold, reduced, local in records:
        obs = dict(zip(SHARED, reduced[1 : 1 + len(SHARED)], strict=True))
        obs |= {"t": tick} | {k: local[i] for k, i in LOCAL.items()}
        obs["clock"] = 7 * tick + 3  # any clock: the decision must not read it
        _, out, nxt = evaluate(DP, params, state, obs)
        want = (bool(out["fire"]), str(out["reason"]), int(nxt["h"]))
        if (fire, reason, hold) != want:
            bad.append((tick, (fire, reason, hold), want))
        state = {k: int(nxt[k]) for k in ("h", "q", "g")}
    return bad


def kit_judge(records: list[Record], cfg: AlignedGateConfig, world: int) -> dict[str, Any]:
    """The conformance kit's first violation per property ({} when none)."""
    from densegate.testing import Observation, RecordedPass, judge_recorded

    if cfg.fill_tokens != cfg.dense_tokens or cfg.stall_ticks or cfg.kv_pressure_valve:
        raise ValueError(f"kit_judge needs T = B and both valves off, got {cfg}")
    B = cfg.dense_tokens
    log = []
    for _, fire, reason, hold, reduced, _ in records:
        W, F, D = reduced[WAITING_RANKS], reduced[WAITING_TOKENS], reduced[DECODE_SEQS]
        filled, no_decode = reduced[FILLED_RANKS], reduced[NO_DECODE_RANKS]
        # The one-rank view of the aligned rules: a filled rank (or every rank at B) is a
        # dense pass, a waiting rank with no decode a pass with nothing decoding.
        dense = filled > 0 or (world == W and world * B <= F)
        w = B if dense else min(F, B - 1) if W else 0
        d = 0 if no_decode else D
        log.append(RecordedPass(Observation(w, d, d, 0), Decision(fire, Reason[reason]), hold))
    return judge_recorded(GateConfig(B, cfg.max_hold_passes, cfg.enabled), log)


def longest_hold_run(records: list[Record]) -> int:
    """The most consecutive HOLD passes."""
    best = run = 0
    for _, fire, _, _, _, _ in records:
        run = 0 if fire else run + 1
        best = max(best, run)
    return best
