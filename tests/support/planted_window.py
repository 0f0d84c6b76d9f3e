"""A planted window fact that only the fold over the requests sees: S6's tie for any R.

The TTFT window with one more fact, true of every pass with at most three requests
(at most three decodes in a window pass), built into the obligations it touches and
run by ``densegate prove`` on a level of its own (tests patch it in):

- S6 on that window still proves (a fact more only narrows what the window meets) (W1);
- S8's window clause at its 3 request slots, checking that window's facts, still
  proves (no pass of three requests has four decodes) (W2);
- S15 built from that window fails: a pass of four decoding requests ahead of a
  waiting tracked request meets the per-slot scheduler's folds but not the fact (W3).
"""

from __future__ import annotations

import z3

from densegate.proofs.obligation import Obligation
from densegate.proofs.registry import Level, Source
from densegate.proofs.scheduler.per_slot import PER_SLOT_OBLIGATIONS
from densegate.proofs.scheduler.ttft_cover import meets_window_of
from densegate.proofs.scheduler.window import WINDOW_OBLIGATIONS
from densegate.proofs.scheduler.window_scan import window_scan_obligation
from densegate.spec.machine import Vars
from densegate.spec.ttft_window import TtftWindow
from tests.support.planted_runs import planted

__all__ = ["EXPECTED", "WINDOW_LINKS", "WINDOW_LINKS_LEVEL", "WINDOW_LINKS_OBLIGATIONS"]

WINDOW_LINKS = "planted-window"
FEW = 3
"""The planted fact's bound on a window pass's decodes (S8's slot count)."""


class FewDecodes(TtftWindow):
    """The TTFT window with a wrong fact: at most three decodes in a window pass."""

    def facts(self, p: Vars, s: Vars, o: Vars, fire: z3.BoolRef) -> z3.BoolRef:
        return z3.And(super().facts(p, s, o, fire), o["d"] <= FEW)


def _planted(base: Obligation, id: str, **changes: object) -> Obligation:
    return planted(base, id, WINDOW_LINKS, **changes)


_WRONG = FewDecodes(name="ttft window[few_decodes]")
(_S6,) = WINDOW_OBLIGATIONS
(_S8,) = PER_SLOT_OBLIGATIONS

WINDOW_LINKS_OBLIGATIONS: list[Obligation] = [
    _planted(_S6, "W1", machine=_WRONG),
    _planted(_S8, "W2", prop=meets_window_of(_WRONG), triggers=None, trigger_names=None),
    _planted(window_scan_obligation(_WRONG), "W3"),
]

EXPECTED = {"W1": "proved", "W2": "proved", "W3": "failed"}
"""Planted id -> the status ``densegate prove`` must report."""

WINDOW_LINKS_LEVEL = Level(
    WINDOW_LINKS,
    "a planted window fact that only the fold over the requests sees",
    tuple(ob.id for ob in WINDOW_LINKS_OBLIGATIONS),
    (Source("tests.support.planted_window", "WINDOW_LINKS_OBLIGATIONS"),),
)
