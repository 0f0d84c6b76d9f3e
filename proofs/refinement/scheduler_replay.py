"""R3's witnesses replayed outside CrossHair: real lists, real blocks, the spec on constants.

The symbolic check (``scheduler``) reads lists as their lengths; a replay
builds the state with real token lists and block tables allocated by the
shipped BlockManager, plans concretely, and compares with the spec's plan
terms built over the witness's constants and simplified by z3 to values.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import z3

from densegate.impl.gate import GateConfig
from densegate.impl.sched.request import Request, RequestStatus
from densegate.proofs.refinement.gate import Replay
from densegate.proofs.refinement.scheduler import (
    BLOCK_SIZE,
    PARAMS,
    SLOTS,
    code_view,
    config_for,
    constant,
    spec_vars,
    spec_view,
)
from densegate.spec.scheduler import RUNNING, WAITING

__all__ = ["TRACE_PARAMS", "concrete", "replay", "show", "spec_plan"]


def concrete(cls: type, witness: Mapping[str, Any]) -> dict[str, Any]:
    """Plan ``witness``'s state concretely with ``cls``: real lists and block ids, the
    validating config, blocks allocated through the BlockManager."""
    v = witness
    sched = cls(config_for(v, True))
    reqs = []
    for i in range(SLOTS):
        r = Request(str(i), i, list(range(100, 100 + v[f"P{i}"])), v[f"M{i}"], 0, 0.0)
        r.output_token_ids = [7] * v[f"g{i}"]
        r.num_computed = v[f"c{i}"]
        if v[f"st{i}"] == RUNNING:
            r.status = RequestStatus.RUNNING
            sched.blocks.allocate(r.block_table, v[f"b{i}"] * BLOCK_SIZE)
            sched.running.append(r)
        elif v[f"st{i}"] == WAITING:
            sched.add(r)
        reqs.append(r)
    if sched.blocks.num_free != v["free"]:
        raise ValueError(f"witness has free={v['free']}, the blocks leave {sched.blocks.num_free}")
    plan = sched.plan()
    return code_view(sched, reqs, plan, sched.observe(plan))


def spec_plan(witness: Mapping[str, Any]) -> dict[str, Any]:
    """The spec's plan on ``witness``: its terms built over constants, simplified to values."""
    p, s = spec_vars(witness, constant)
    out = {}
    for k, t in spec_view(p, s).items():
        val = z3.simplify(t)
        out[k] = z3.is_true(val) if z3.is_bool(val) else val.as_long()
    return out


def _where(view: Mapping[str, Any], i: int) -> str:
    """R running, W queued, - neither (the spec's status after step 1)."""
    return "R" if view[f"running{i}"] else "W" if view[f"queued{i}"] else "-"


def _text(view: Mapping[str, Any]) -> str:
    slots = " ".join(
        f"{_where(view, i)}{'D' if view[f'decode{i}'] else '-'}"
        f"{'A' if view[f'admit{i}'] else '-'}"
        f"+{view[f'chunk{i}']} c={view[f'c{i}']} b={view[f'b{i}']}"
        for i in range(SLOTS)
    )
    queue = f"queue {'in order' if view['queue_order'] else 'out of order'}"
    return (
        f"w={view['w']} d={view['d']} preempted={view['preempted']} free={view['free']} "
        f"{queue} queued_tokens={view['queued_tokens']} | {slots}"
    )


def replay(cls: type, via: str, witness: Mapping[str, Any]) -> Replay:
    """Run ``cls`` and the spec on the witness, outside CrossHair."""
    if via == "inputs":
        try:
            config = config_for(witness, True)
            got = (config.dense, config.chunk_cap, config.gate_config())
        except Exception as e:
            return Replay(f"raised {type(e).__name__}: {e}", "no error")
        v = witness
        return Replay(str(got), str((v["B"], v["cap"], GateConfig(v["B"], v["K"], v["enabled"]))))
    try:
        code = _text(concrete(cls, witness))
    except Exception as e:
        return Replay(f"raised {type(e).__name__}: {e}", "no error")
    return Replay(code, _text(spec_plan(witness)))


def show(row: dict[str, Any]) -> dict[str, Any]:
    """A counterexample row with each request as the spec prints it: ``<status><c>/<g>b<b>``
    (W waiting, R running, F finished, A aborted, - not arrived)."""
    reqs = " ".join(
        f"{'-WRFA'[row[f'st{i}']]}{row[f'c{i}']}/{row[f'g{i}']}b{row[f'b{i}']}"
        for i in range(SLOTS)
    )
    keep = ("pass", "entry", "free")
    return {**{k: row[k] for k in keep}, "requests": reqs, "code": row["code"], "spec": row["spec"]}


TRACE_PARAMS = (*PARAMS, *(f"{k}{i}" for i in range(SLOTS) for k in ("P", "M")))
"""The witness entries shown as parameters; the rest (the state) form the trace row."""
