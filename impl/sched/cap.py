"""A pass's prefill under a per-tick token cap: the paced release's one limit on a pass.

The aligned gate's paced mode (``densegate.impl.dp_gate``) fires every tick that work
waits and carries, beside FIRE, one prefill-token cap identical on every rank, so no
rank's pass grows past the cost model's ridge and stretches the tick of every rank
that only decodes. The plan is made under the pass's whole token budget before the
ranks agree; the cap then keeps a prefix of it: owed chunks first, then admissions
in queue order, each cut to what the cap has left (an admission that does not fit
whole waits when chunked prefill is off). What is cut stays owed or waiting, in
order, for the next tick.
"""

from __future__ import annotations

from collections.abc import Sequence

from densegate.impl.sched.request import Request

__all__ = ["capped_prefill"]

Chunks = list[tuple[Request, int]]


def capped_prefill(
    partials: Sequence[tuple[Request, int]],
    admits: Sequence[tuple[Request, int]],
    cap: int | None,
    chunked: bool,
) -> tuple[Chunks, Chunks]:
    """The planned owed chunks and admissions that run under ``cap`` tokens (None: all).

    The result is a prefix of each list (the admissions' only if every owed chunk fits
    whole), every size at most the planned one and the sizes summing to at most ``cap``.
    """
    if cap is None:
        return list(partials), list(admits)
    left = cap
    out_partials: Chunks = []
    for r, n in partials:
        if left == 0:
            return out_partials, []
        take = min(n, left)
        out_partials.append((r, take))
        left -= take
    out_admits: Chunks = []
    for r, n in admits:
        if left == 0 or (n > left and not chunked):
            break
        take = min(n, left)
        out_admits.append((r, take))
        left -= take
    return out_partials, out_admits
