"""Running ``densegate prove`` on a planted level: the one way the planted tests do it.

A planted level (a false fact, an edit only a fold sees) is added to the registry
for one test and run through the real CLI, so what fails is what a user would see.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from densegate.cli.main import main
from densegate.proofs import registry
from densegate.proofs.obligation import Obligation
from densegate.proofs.registry import Level

__all__ = ["planted", "prove_level", "prove_level_json"]


def planted(base: Obligation, id: str, level: str, **changes: object) -> Obligation:
    """``base`` renamed into a planted level, without its mutants, with ``changes``."""
    return replace(base, id=id, level=level, mutants=(), **changes)  # type: ignore[arg-type]


def prove_level(
    level: Level, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *argv: str
) -> tuple[int, str]:
    """``densegate prove --level <level> --jobs 1 *argv`` with ``level`` registered."""
    monkeypatch.setattr(registry, "LEVELS", (*registry.LEVELS, level))
    rc = main(["prove", "--level", level.name, "--jobs", "1", *argv])
    return rc, capsys.readouterr().out


def prove_level_json(
    level: Level, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[int, Any]:
    """``prove_level`` with ``--json``, parsed."""
    rc, out = prove_level(level, monkeypatch, capsys, "--json")
    return rc, json.loads(out)
