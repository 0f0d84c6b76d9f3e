"""S6's tie to the per-slot scheduler for any number of requests: a window fact only S15 refutes.

``densegate prove`` proves S6 on the TTFT window given its facts, and S15 proves those
facts of every undisturbed per-slot window pass for any number of requests. A window
fact true of every pass with at most three requests (at most three decodes) is built
into S6, S8's window clause at 3 request slots and S15 and run through ``densegate
prove`` (``tests.support.planted_window``): S6 and S8 still prove, S15 fails, its
property check caught with a trace of four decoding requests ahead of the tracked one.
"""

from __future__ import annotations

import pytest

from densegate.spec.scheduler import RUNNING, WAITING
from tests.support.planted_runs import prove_level_json
from tests.support.planted_window import EXPECTED, FEW, WINDOW_LINKS_LEVEL


def test_densegate_prove_refutes_a_window_fact_only_the_fold_sees(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, doc = prove_level_json(WINDOW_LINKS_LEVEL, monkeypatch, capsys)
    by_id = {o["id"]: o for o in doc["obligations"]}
    assert rc == 1
    assert {i: o["status"] for i, o in by_id.items()} == EXPECTED, by_id
    w3 = by_id["W3"]
    # the induction's property check caught it, nothing else
    assert [c["name"] for c in w3["checks"] if c["status"] == "sat"] == ["property"], w3
    rows = w3["counterexample"]["trace"]
    t = w3["counterexample"]["params"]["t"]
    # more decoding requests than the fact allows, and the tracked one waiting or running
    assert sum(1 for row in rows if row["dec"]) > FEW, rows
    assert any(row["pass"] == t and row["st"] in (WAITING, RUNNING) for row in rows), rows
