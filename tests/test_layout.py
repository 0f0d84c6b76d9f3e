"""The house rules a newcomer relies on: every module is on the map, small, and self-contained.

``docs/ARCHITECTURE.md`` lists every module by its path inside its room; no
module grows past 400 lines; nothing in the repository points outside it.
"""

from __future__ import annotations

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
ROOMS = ("spec", "proofs", "impl", "lab", "cli", "integrations")
MAX_LINES = 400
OUTSIDE = re.compile(r"shared/|DESIGN\.md")


def _modules(rooms: tuple[str, ...]) -> list[pathlib.Path]:
    return sorted(
        p for room in rooms for p in (ROOT / room).rglob("*.py") if p.name != "__init__.py"
    )


def _sources() -> list[pathlib.Path]:
    out: list[pathlib.Path] = []
    for pattern in ("*.py", "*.md", "*.toml"):
        out.extend(
            p
            for p in ROOT.rglob(pattern)
            if not {".venv", ".git", "build", "node_modules"} & set(p.relative_to(ROOT).parts)
        )
    return sorted(out)


def test_every_module_is_on_the_architecture_map() -> None:
    doc = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    missing = [
        str(p.relative_to(ROOT))
        for p in _modules(ROOMS)
        if str(p.relative_to(ROOT / p.relative_to(ROOT).parts[0])) not in doc
    ]
    assert missing == [], "add these to docs/ARCHITECTURE.md's module map"


@pytest.mark.parametrize("room", [*ROOMS, "tests", "benchmarks"])
def test_no_module_over_the_line_limit(room: str) -> None:
    files = sorted((ROOT / room).rglob("*.py"))
    assert files
    long = {
        str(p.relative_to(ROOT)): n
        for p in files
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


def test_nothing_points_outside_the_repository() -> None:
    hits = []
    for path in _sources():
        if path == pathlib.Path(__file__).resolve():
            continue  # the pattern itself
        for i, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if OUTSIDE.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    assert hits == []
