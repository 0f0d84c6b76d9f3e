"""An oracle for the side by sides' ``dominated_by``, written apart from
``densegate.lab.bench.side_goal.beats`` so the engine tests do not check it against itself."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

_KEYS = ("tokens_per_s", "ttft_ms_p99", "itl_ms_p99")


def check_front(
    rows: Sequence[Mapping[str, Any]], front: Sequence[Mapping[str, Any]], scenario: str, arm: str
) -> None:
    """Every (scenario, dp) of ``rows`` has a ``front`` entry, and it lists exactly the arms
    no worse than densegate on each modeled figure and different from it on one."""
    keys = {(r[scenario], r["dp"]) for r in rows}
    assert {(f["scenario"], f["dp"]) for f in front} == keys
    for f in front:
        at = [r for r in rows if (r[scenario], r["dp"]) == (f["scenario"], f["dp"])]
        us = next(r["modeled"] for r in at if r[arm] == "densegate")
        for r in at:
            m = r["modeled"]
            no_worse = (m["tokens_per_s"] >= us["tokens_per_s"]
                        and m["ttft_ms_p99"] <= us["ttft_ms_p99"]
                        and m["itl_ms_p99"] <= us["itl_ms_p99"])  # fmt: skip
            same = all(m[k] == us[k] for k in _KEYS)
            assert (r[arm] in f["arms"]) == (no_worse and not same), (f, r[arm])
