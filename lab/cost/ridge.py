"""The paced release's cap from a pass model: the ridge, and which regime a profile is in.

A prefill chunk below the roofline's ridge rides along a memory-bound decode pass almost
for free; past it every token costs compute. ``ridge_tokens`` is the largest chunk whose
pass beside ``decodes`` decodes costs at most ``(1 + eps)`` times the pass with a
minimal chunk (``c_min`` tokens) beside them: the pace cap (``AlignedGateConfig.
pace_tokens``); the same ridge at ``SURGE_EPS`` is the surge cap, a tick's where some
rank can fill a dense pass on its own (``AlignedGateConfig.surge_tokens``). ``regime``
says whether holding can pay at all: only where a mixed pass costs more than the
decode-only pass it replaces by a fixed penalty (graph break, launch cost) above
``hold_share`` of that pass; otherwise fire every tick.
Modeled: every figure is the model's, traceable to its inputs.
"""

from __future__ import annotations

from dataclasses import dataclass

from densegate.lab.cost.model import PassModel, PassWork

__all__ = ["C_MIN", "EPS", "HOLD_SHARE", "SURGE_EPS", "Regime", "regime", "ridge_tokens"]

C_MIN = 16
"""The minimal chunk the ridge is measured against (tokens)."""
EPS = 0.25
"""How much dearer than a minimal chunk's pass the ridge chunk's pass may be."""
SURGE_EPS = 1.0
"""How much dearer than a minimal chunk's pass the surge cap's pass may be: twice its cost.
Chosen from the tables (docs/BENCHMARKS.md): where a rank holds a dense pass's worth, the
ridge cap drains it in ``dense_tokens / pace_tokens`` ticks (9 on H200) while TTFT grows; a
surge at eps 1.0 (H100-SXM 706, H200 475 tokens) halves that for ITL p99 still a third of
the best engine rule's, where 3x the ridge cap (eps ~2) raised ITL p99 by half again and
bought no better TTFT."""
HOLD_SHARE = 1.0
"""A mixed pass's fixed penalty over the decode-only pass, as a share of that pass,
above which the profile is in the hold regime. Chosen from the tables: at 3x the
roofline's launch cost (H100-SXM: +56% at 128 decodes) holding (K = 30, with or
without ALIGNED at 0) lost TTFT p99 by 2-6x for at most 2.5% tokens/s, so the paced
mode stays the default there; only a mixed pass dearer than two decode-only passes
is taken as the regime where holding can pay."""


def _mixed(decodes: int, context: int, chunk: int) -> PassWork:
    pairs = chunk * (chunk + 1) // 2
    return PassWork(chunk, 1 if chunk else 0, pairs, chunk, decodes, decodes * context)


def ridge_tokens(
    model: PassModel,
    decodes: int,
    context: int = 512,
    budget: int = 2048,
    eps: float = EPS,
    c_min: int = C_MIN,
) -> int:
    """The largest chunk in [c_min, budget] whose pass beside ``decodes`` decodes of
    ``context`` keys each costs at most (1 + eps) x the pass with a ``c_min`` chunk."""
    limit = (1 + eps) * model.pass_ms(_mixed(decodes, context, c_min))
    lo, hi = c_min, budget
    while lo < hi:  # pass cost is non-decreasing in the chunk
        mid = (lo + hi + 1) // 2
        if model.pass_ms(_mixed(decodes, context, mid)) <= limit:
            lo = mid
        else:
            hi = mid - 1
    return lo


@dataclass(frozen=True)
class Regime:
    """Which mode the default picks for a profile, and the figures it was picked on."""

    mode: str
    """"paced" (fire every tick, capped) or "hold" (the aligned gate's hold, K and ALIGNED)."""
    pace_tokens: int
    surge_tokens: int
    decode_ms: float
    mixed_ms: float
    penalty_share: float


def regime(model: PassModel, decodes: int, context: int = 512, budget: int = 2048) -> Regime:
    """The profile's regime at ``decodes`` decodes: "hold" where a minimal chunk's mixed
    pass costs more than ``HOLD_SHARE`` above the decode-only pass, else "paced"."""
    decode = model.pass_ms(_mixed(decodes, context, 0))
    mixed = model.pass_ms(_mixed(decodes, context, C_MIN))
    share = (mixed - decode) / decode if decode > 0 else 0.0
    mode = "hold" if share > HOLD_SHARE else "paced"
    pace = ridge_tokens(model, decodes, context, budget)
    surge = ridge_tokens(model, decodes, context, budget, eps=SURGE_EPS)
    return Regime(mode, pace, surge, decode, mixed, share)
