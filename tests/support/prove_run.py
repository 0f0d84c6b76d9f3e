"""``densegate prove --json``, run once per test session: what CI proves, read by the tests.

The suite proves each obligation once, at the scope users run: the first test that
asks runs the real command in a subprocess (every level, default workers) and every
proof test reads its JSON. A test that proves something at another scope (more
request slots, other block sizes, a broken spec) calls the prover itself.
"""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["ProveRun", "prove_run"]

HANG_GUARD_S = 1800
"""Kills a run that hangs; never a verdict (the command takes seconds)."""


@dataclass(frozen=True)
class ProveRun:
    """The command's exit status, its JSON object and what it printed on stderr."""

    returncode: int
    doc: dict[str, Any]
    stderr: str

    @property
    def by_id(self) -> dict[str, dict[str, Any]]:
        return {o["id"]: o for o in self.doc["obligations"]}


def _densegate() -> str:
    """The ``densegate`` script of the environment running the tests."""
    beside = Path(sys.executable).with_name("densegate")
    found = str(beside) if beside.exists() else shutil.which("densegate")
    if found is None:
        raise AssertionError(f"no densegate command next to {sys.executable} or on PATH")
    return found


@functools.cache
def prove_run() -> ProveRun:
    argv = [_densegate(), "prove", "--all", "--json"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=HANG_GUARD_S)
    try:
        doc = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise AssertionError(
            f"`densegate prove --json` printed no JSON (exit {proc.returncode}):\n"
            f"{proc.stderr[-4000:]}"
        ) from None
    return ProveRun(proc.returncode, doc, proc.stderr)
