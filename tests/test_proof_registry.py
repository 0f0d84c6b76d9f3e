"""Every obligation of the registry, proved once by ``densegate prove --json`` as users run it.

One case per registry obligation (ids from ``densegate.proofs.registry``) reads the
session's one run (``tests.support.prove_run``): the obligation proved (every query
``unsat``, every code path explored), its premise and triggers satisfiable, each of its
mutants refuted with a trace, and every mutant a level defines used. The rest tests
the registry and the planning without proving anything the command proves.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from densegate.cli.main import main
from densegate.proofs.obligation import Obligation
from densegate.proofs.plan import tasks
from densegate.proofs.refinement.scheduler_wide import TraceRefinement
from densegate.proofs.registry import LEVELS, Level, RegistryError, level, obligations
from densegate.proofs.workers import prove_all
from tests.support.prove_run import prove_run
from tests.support.toy_obligations import TOY_LEVEL

CASES = [(lv.name, ob_id) for lv in LEVELS for ob_id in lv.ids]


@pytest.fixture(scope="session")
def proved() -> dict[str, dict[str, Any]]:
    return prove_run().by_id


def _registered(ob_id: str) -> Any:
    return next(ob for ob in obligations() if ob.id == ob_id)


def test_densegate_prove_exits_zero_and_reports_the_registry_in_order() -> None:
    run = prove_run()
    ids = [o["id"] for o in run.doc["obligations"]]
    assert ids == [ob_id for _, ob_id in CASES]
    bad = [(o["id"], o["status"]) for o in run.doc["obligations"] if o["status"] != "proved"]
    assert run.returncode == 0, (bad, run.stderr[-2000:])


def _why(o: dict[str, Any]) -> list[tuple[str, str, str]]:
    checks = [*o["checks"], *o["sanity_checks"]]
    return [(c["name"], c["status"], c["reason"]) for c in checks]


@pytest.mark.parametrize(("level_name", "ob_id"), CASES, ids=[i for _, i in CASES])
def test_proved_and_every_mutant_refuted_with_a_trace(
    proved: dict[str, dict[str, Any]], level_name: str, ob_id: str
) -> None:
    o, ob = proved[ob_id], _registered(ob_id)
    assert (o["level"], o["statement"]) == (level_name, ob.statement)
    assert o["scope_statement"] == ob.scope_statement
    assert o["status"] == "proved", _why(o)
    assert o["checks"] and {c["status"] for c in o["checks"]} == {"unsat"}, _why(o)
    if o["about"] == "model":
        names = [c["name"] for c in o["checks"]]
        assert names[:3] == ["initiation", "consecution", "property"], names
        _assert_not_vacuous_model(o, ob)
    else:
        # symbolic execution explores every path; R4 runs every one of its fixed traces
        how = ": every trace" if isinstance(ob, TraceRefinement) else ": every path"
        assert all(c["name"].endswith(how) for c in o["checks"]), o["checks"]
        assert isinstance(ob, TraceRefinement) == (
            o["parametric"] is False and "traces" in (o["bound"] or "")
        )
        _assert_every_class_reached(o, ob)
    # every mutant the obligation carries ran, and each was refuted by a real trace
    assert o["mutants"], "an obligation with no broken variant shows nothing it catches"
    assert [m["name"] for m in o["mutants"]] == [m.name for m in ob.mutants]
    for m in o["mutants"]:
        assert m["status"] == "refuted", (m["name"], m["reason"])
        assert isinstance(m["params"], dict) and m["params"], m["name"]
        assert [row["pass"] for row in m["trace"]] == list(range(len(m["trace"]))), m["name"]
        assert m["trace"] and all(row for row in m["trace"]), m["name"]
        assert m["display"] is None or len(m["display"]) == len(m["trace"]), m["name"]


def _assert_not_vacuous_model(o: dict[str, Any], ob: Any) -> None:
    """Initial state, premise, totality, one command, every trigger reached in time."""
    assert o["initial_state_satisfiable"] is True, _why(o)
    assert o["premise_satisfiable"] is True, _why(o)
    assert o["total"] is True, _why(o)
    assert o["exactly_one_command"] is True, _why(o)
    assert o["reach_depth"] == ob.reach_depth >= 1
    for t in o["triggers"]:
        assert t["reachable"] and t["within"] == ob.reach_depth, t
        assert 0 <= t["at_pass"] < ob.reach_depth, t
    assert o["precondition_satisfiable"] is None and o["coverage"] == []


def _assert_every_class_reached(o: dict[str, Any], ob: Any) -> None:
    """Each check's precondition satisfiable and passed, each named class reached by it."""
    assert o["precondition_satisfiable"] is True, o["sanity_checks"]
    pre = [c for c in o["sanity_checks"] if c["name"].endswith(": precondition")]
    assert [c["name"] for c in pre] == [f"{via}: precondition" for via in ob.checks], pre
    assert all(c["status"] == "sat" for c in pre), pre
    want = [(via, name) for via in ob.checks for name in ob.classes]
    assert [(c["check"], c["class"]) for c in o["coverage"]] == want
    assert all(c["satisfiable"] and c["reached"] for c in o["coverage"]), o["coverage"]
    model_only = ("initial_state_satisfiable", "premise_satisfiable", "total")
    assert all(o[k] is None for k in model_only) and o["triggers"] == []


@pytest.mark.parametrize("lv", LEVELS, ids=[lv.name for lv in LEVELS])
def test_every_mutant_a_level_defines_is_refuted_by_one_of_its_obligations(lv: Level) -> None:
    assert lv.unused_mutants() == set()


def test_the_unused_mutant_check_can_fail() -> None:
    assert TOY_LEVEL.unused_mutants() == {"dense_overlap"}


def test_ids_are_unique_and_every_level_loads_its_ids_in_order() -> None:
    ids = [ob_id for _, ob_id in CASES]
    assert len(ids) == len(set(ids))
    for lv in LEVELS:
        obs = lv.obligations()
        assert [ob.id for ob in obs] == list(lv.ids)
        assert {ob.level for ob in obs} == {lv.name}


def test_a_registry_that_disagrees_with_its_modules_is_an_error() -> None:
    gate = level("gate")
    with pytest.raises(RegistryError, match=r"in no module \['P8'\]"):
        replace(gate, ids=(*gate.ids, "P8")).obligations()
    with pytest.raises(RegistryError, match=r"not in the registry \['P7'\]"):
        replace(gate, ids=tuple(i for i in gate.ids if i != "P7")).obligations()
    with pytest.raises(RegistryError, match="says level gate, registry dp"):
        replace(gate, name="dp").obligations()
    with pytest.raises(RegistryError, match="unknown proof level 'gates'"):
        obligations(["gates"])


def test_the_summaries_name_the_scopes_the_obligations_are_proved_at() -> None:
    from densegate.proofs.refinement import scheduler as r3
    from densegate.proofs.scheduler.per_slot import BLOCK_SIZE, SLOTS

    summary = {lv.name: lv.summary for lv in LEVELS}
    assert f"S8 at {SLOTS} request slots" in summary["scheduler"]
    assert f"block size {BLOCK_SIZE}" in summary["scheduler"]
    assert f"{r3.SLOTS} requests, block size {r3.BLOCK_SIZE}" in summary["refinement-scheduler"]


def test_help_lists_every_level_from_the_registry(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["prove", "--help"])
    text = " ".join(capsys.readouterr().out.split()).replace("- ", "-")  # argparse wraps
    for lv in LEVELS:
        left_out = "" if lv.default else " (not in the default run)"
        assert f"{lv.name}{left_out}: {lv.summary}" in text, lv.name


def test_the_default_run_leaves_out_only_the_levels_marked_so_and_says_which(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No ``--level``: the default levels, and a line per level left out; ``--all``: every
    level; ``--only`` finds its ids in any level. (The registry's levels are swapped for
    two quick ones so the test proves little.)"""
    from dataclasses import replace

    from densegate.proofs import registry

    gate = registry.level("gate")
    p1 = [o for o in gate.obligations() if o.id == "P1"]
    quick = replace(gate, ids=("P1",))
    off = replace(quick, name="gate-again", default=False)
    monkeypatch.setattr(registry, "LEVELS", (quick, off))
    monkeypatch.setattr(Level, "obligations", lambda lv: [replace(p1[0], level=lv.name)])
    assert [lv.name for lv in registry.default_levels()] == ["gate"]
    assert main(["prove", "--jobs", "1"]) == 0
    out = capsys.readouterr().out
    assert "1/1 obligations in 1 level" in out, out
    assert "(not in this run: gate-again (P1)" in out and "densegate prove --all)" in out, out
    assert main(["prove", "--jobs", "1", "--all"]) == 0
    out = capsys.readouterr().out
    assert "2/2 obligations in 2 levels" in out and "not in this run" not in out, out
    assert main(["prove", "--all", "--level", "gate"]) == 2
    assert (
        capsys.readouterr().err.strip() == "densegate prove: --all and --level exclude each other"
    )


def test_unknown_level_is_one_line_naming_the_closest(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["prove", "--level", "gates"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown level 'gates' (did you mean gate?)" in err, err
    assert "levels: gate, scheduler, dp" in err and "[" not in err, err  # no Python list


# -- planning and workers, on the registry (planned, not proved) and on toy obligations -----


def test_tasks_cover_every_obligation_and_its_mutants_once() -> None:
    work = [(lv, ob) for lv in LEVELS for ob in lv.obligations()]
    planned = tasks(work)
    proved_ids = [i for t in planned if not t.mutants_only for i in t.ids]
    assert sorted(proved_ids) == sorted(ob.id for _, ob in work)
    refuted = [t.ids for t in planned if t.mutants_only]
    assert all(len(ids) == 1 for ids in refuted)
    # a model obligation's mutants run on their own; a code obligation's with its proof
    want = sorted(ob.id for _, ob in work if isinstance(ob, Obligation) and ob.mutants)
    assert sorted(ids[0] for ids in refuted) == want
    # obligations sharing a machine are proved in one task (they share its invariant)
    s8_group = next(t for t in planned if "S8" in t.ids and not t.mutants_only)
    assert s8_group.level.name == "scheduler"


def test_worker_processes_give_the_results_of_one_process() -> None:
    work = [(TOY_LEVEL, ob) for ob in TOY_LEVEL.obligations()]
    one, two = prove_all(work, jobs=1), prove_all(work, jobs=2)
    assert [r.id for r in two] == ["T1", "T2"]
    for a, b in zip(one, two, strict=True):
        assert a.ok and b.ok, (a.id, a.status, b.status)
        assert [c.status for c in a.checks] == [c.status for c in b.checks]
        # the mutants ran in a task of their own and came back to their obligation
        assert [(m.name, m.status) for m in a.mutants] == [(m.name, m.status) for m in b.mutants]
        assert all(m.trace is not None and m.trace.rows for m in b.mutants)
