"""``python -m densegate.lab.docs --check | --write``: the docs' generated tables, regenerated.

A doc (``README.md``, ``docs/**/*.md``) carries each deterministic table between

    <!-- densegate-table: NAME ARGS -->
    ...
    <!-- /densegate-table -->

directly under a line that names where the table comes from (the command, or the source
file, that ``densegate.lab.doc_tables.GENERATORS[NAME]`` says). ``--check`` regenerates
every block and exits 1, printing a unified diff naming the doc and the block, when one
differs, when the line above does not name its command, or when a marker is malformed; it
also fails on a relative link to a file that does not exist and on a README over
``README_MAX_LINES`` lines. An ``engine SCRIPT ARGS`` block is a table only an engine's venv
can make (vLLM, SGLang): here its source line is checked and it is counted, and the script
compares it (``SCRIPT ARGS --doc DOC``, ``engine_diffs``) where CI's engine group runs it.
``--write`` rewrites the blocks in place. Measured (wall-clock) tables are never inside a
block: they say where and when they were measured.
"""

from __future__ import annotations

import argparse
import difflib
import pathlib
import re
import shlex
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from densegate.lab.doc_tables import GENERATORS, SECONDS, GeneratorError

__all__ = [
    "README_MAX_LINES",
    "Block",
    "Report",
    "broken_links",
    "check",
    "doc_files",
    "engine_diffs",
    "find_blocks",
    "main",
    "readme_length",
]

README_MAX_LINES = 300
BEGIN = re.compile(r"^<!-- densegate-table: (?P<spec>.*?) -->\s*$")
END = re.compile(r"^<!-- /densegate-table -->\s*$")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|!\[[^\]]*\]\(([^)\s]+)\)")
ROOT = pathlib.Path(__file__).resolve().parent.parent
"""The checkout this module sits in (``lab/`` is one level below its root)."""
ENGINE = "engine"
"""The block kind whose table an engine side by side script prints (``engine SCRIPT ARGS``)."""
_NOT_TABLE_FLAGS = ("--json", "--goal", "--write-doc")


@dataclass(frozen=True)
class Block:
    """One generated block of a doc: its marker's spec and the lines between the markers."""

    path: str
    spec: str
    begin: int
    """Index of the begin marker's line."""
    end: int
    """Index of the end marker's line."""
    body: tuple[str, ...]
    above: str
    """The nearest non-blank line above the begin marker (it must name the source)."""

    @property
    def name(self) -> str:
        return self.spec.split(maxsplit=1)[0] if self.spec.strip() else ""

    @property
    def args(self) -> list[str]:
        return shlex.split(self.spec)[1:]


@dataclass
class Report:
    """What a check found: problems (one line each) and diffs (unified, per block)."""

    problems: list[str]
    diffs: list[str]
    blocks: int
    changed: list[str]
    engine: int = 0
    """Engine blocks: counted and their source lines checked, compared by their scripts."""

    @property
    def ok(self) -> bool:
        return not self.problems and not self.diffs


def doc_files(root: pathlib.Path) -> list[pathlib.Path]:
    """The README and every Markdown file under ``docs/``."""
    out = [root / "README.md"] if (root / "README.md").exists() else []
    return out + sorted((root / "docs").rglob("*.md"))


def _fenced(lines: Sequence[str]) -> list[bool]:
    """For each line, whether it is inside a fenced code block (or is a fence)."""
    out, inside = [], False
    for line in lines:
        fence = line.lstrip().startswith("```")
        out.append(inside or fence)
        inside = inside != fence
    return out


def find_blocks(rel: str, lines: Sequence[str]) -> tuple[list[Block], list[str]]:
    """The blocks of one doc, and its malformed markers (one problem line each)."""
    blocks: list[Block] = []
    problems: list[str] = []
    fenced = _fenced(lines)
    i = 0
    while i < len(lines):
        if fenced[i]:  # a marker shown in a code block is an example, not a block
            i += 1
            continue
        m = BEGIN.match(lines[i])
        if END.match(lines[i]):
            problems.append(f"{rel}:{i + 1}: an end marker with no block open")
        if not m:
            i += 1
            continue
        j = next((k for k in range(i + 1, len(lines)) if END.match(lines[k])), None)
        nested = next(
            (k for k in range(i + 1, j or len(lines)) if BEGIN.match(lines[k]) and not fenced[k]),
            None,
        )
        if j is None or nested is not None:
            problems.append(f"{rel}:{i + 1}: block {m['spec']!r} is not closed before the next")
            i = nested if nested is not None else len(lines)
            continue
        above = next((lines[k] for k in range(i - 1, -1, -1) if lines[k].strip()), "")
        blocks.append(Block(rel, m["spec"], i, j, tuple(lines[i + 1 : j]), above))
        i = j + 1
    return blocks, problems


def _expected(block: Block, root: pathlib.Path) -> tuple[list[str] | None, str | None]:
    """The block's regenerated lines, or why they could not be made (neither, for an
    engine block whose source line names its script: its script compares it)."""
    if block.name == ENGINE:
        script = block.args[0] if block.args else ""
        if not script or not (root / script).is_file():
            return None, f"an engine block names no script of this checkout: {script!r}"
        if f"python {script}" not in block.above:
            return None, f"the line above the block must name 'python {script}'"
        return None, None
    gen = GENERATORS.get(block.name)
    if gen is None:
        return None, f"unknown generator {block.name!r} (known: {', '.join(GENERATORS)})"
    try:
        args = block.args
        sources = gen.sources(args)
        missing = [s for s in sources if s not in block.above]
        if missing:
            return None, f"the line above the block must name {' and '.join(map(repr, missing))}"
        return ["", *gen.render(args).splitlines(), ""], None
    except (GeneratorError, ValueError) as e:
        return None, str(e)
    except Exception as e:  # a generator's source that does not load is a finding, not a crash
        return None, f"generator failed: {type(e).__name__}: {e}"


def check(
    root: pathlib.Path = ROOT, paths: Iterable[pathlib.Path] | None = None, write: bool = False
) -> Report:
    """Regenerate every block of ``paths`` (default: every doc under ``root``) and compare;
    with ``write``, put the regenerated blocks in place instead of reporting their diffs."""
    files = list(paths) if paths is not None else doc_files(root)
    report = Report([], [], 0, [])
    for path in files:
        rel = str(path.relative_to(root)) if path.is_relative_to(root) else str(path)
        text = path.read_text()
        lines = text.splitlines()
        blocks, problems = find_blocks(rel, lines)
        report.problems += problems
        report.blocks += len(blocks)
        new = list(lines)
        for b in reversed(blocks):  # later blocks first, so earlier indices stay right
            want, why = _expected(b, root)
            if want is None and why is None:
                report.engine += 1
                continue
            if want is None:
                report.problems.append(f"{rel}:{b.begin + 1}: block {b.spec!r}: {why}")
                continue
            if list(b.body) == want:
                continue
            if write:
                new[b.begin + 1 : b.end] = want
                continue
            report.diffs.append(_diff(b, want))
        if write and new != lines:
            path.write_text("\n".join(new) + ("\n" if text.endswith("\n") else ""))
            report.changed.append(rel)
    return report


def _diff(b: Block, want: list[str]) -> str:
    return "\n".join(
        difflib.unified_diff(
            list(b.body),
            want,
            fromfile=f"{b.path} [{b.spec}] (in the doc, line {b.begin + 2})",
            tofile=f"{b.path} [{b.spec}] (regenerated)",
            lineterm="",
        )
    )


def engine_diffs(
    doc: pathlib.Path, script: str, argv: Sequence[str], table: str, write: bool = False
) -> list[str]:
    """Compare (``write``: replace) ``doc``'s ``engine SCRIPT ARGS`` blocks, ARGS being
    ``argv`` less the flags that do not change the table (``--json``, ``--goal``,
    ``--doc D``, ``--write-doc``), with ``table``; the diffs, or one line if none is there."""
    args, skip = [], False
    for a in argv:
        if skip or a in _NOT_TABLE_FLAGS or a.startswith("--doc="):
            skip = False
            continue
        skip = a == "--doc"
        if not skip:
            args.append(a)
    lines = doc.read_text().splitlines()
    found = [
        b for b in find_blocks(str(doc), lines)[0] if b.name == ENGINE and b.args == [script, *args]
    ]
    if not found:
        spec = shlex.join([ENGINE, script, *args])
        return [f"{doc}: no block <!-- densegate-table: {spec} --> to compare the table with"]
    want = ["", *table.splitlines(), ""]
    if write:
        for b in reversed(found):
            lines[b.begin + 1 : b.end] = want
        doc.write_text("\n".join(lines) + "\n")
        return []
    return [_diff(b, want) for b in found if list(b.body) != want]


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped (backticks,
    colons, parentheses, ``=``), spaces as hyphens; ``_`` and ``-`` kept."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: pathlib.Path) -> set[str]:
    """Every heading anchor of the Markdown file ``path`` (a repeated one as ``x-1``, ...)."""
    lines = path.read_text().splitlines()
    counts: dict[str, int] = {}
    out: set[str] = set()
    for line, fenced in zip(lines, _fenced(lines), strict=True):
        m = None if fenced else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            s = slug(m[1])
            n = counts.get(s, 0)
            out.add(s if n == 0 else f"{s}-{n}")
            counts[s] = n + 1
    return out


def broken_links(
    root: pathlib.Path = ROOT, paths: Iterable[pathlib.Path] | None = None
) -> list[str]:
    """Relative links (``[text](path)``, ``![alt](path)``) to files that do not exist, and
    links whose ``#anchor`` names no heading of the Markdown page (this one for ``#x``).
    A URL (``scheme:``) is not checked."""
    out = []
    for path in list(paths) if paths is not None else doc_files(root):
        rel = path.relative_to(root) if path.is_relative_to(root) else path
        lines = path.read_text().splitlines()
        for n, (line, fenced) in enumerate(zip(lines, _fenced(lines), strict=True), 1):
            if fenced:
                continue
            for m in LINK.finditer(line):
                link = m[1] or m[2]
                target, _, anchor = link.partition("#")
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                    continue
                page = path.parent / target if target else path
                if not page.exists():
                    out.append(f"{rel}:{n}: link to {target!r}, which does not exist")
                elif anchor and page.suffix == ".md" and anchor not in anchors(page):
                    out.append(f"{rel}:{n}: link to {link!r}: no heading has that anchor")
    return out


def readme_length(root: pathlib.Path = ROOT) -> int:
    return len((root / "README.md").read_text().splitlines())


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m densegate.lab.docs",
        description="regenerate the docs' generated tables and compare them (or write them)",
    )
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="exit 1 with a diff if a table drifted")
    mode.add_argument("--write", action="store_true", help="rewrite the tables in place")
    mode.add_argument("--list", action="store_true", help="list the blocks and generators")
    p.add_argument("--root", type=pathlib.Path, default=ROOT, help="the checkout (default: this)")
    p.add_argument("paths", nargs="*", type=pathlib.Path, help="docs (default: README + docs/)")
    args = p.parse_args(argv)
    root = args.root.resolve()
    if not (root / "README.md").is_file():
        print(
            f"python -m densegate.lab.docs: {root} is not a densegate checkout (no README.md "
            "there: the docs are not installed with the package); run it in an editable "
            "install, or give --root CHECKOUT",
            file=sys.stderr,
        )
        return 2
    paths = [(q if q.is_absolute() else root / q) for q in args.paths] or doc_files(root)
    if args.list:
        for path in paths:
            for b in find_blocks(str(path.relative_to(root)), path.read_text().splitlines())[0]:
                print(f"{b.path}:{b.begin + 1}: {b.spec}")
        for g in GENERATORS.values():
            print(f"generator {g.name}: {g.about}")
        return 0
    t0 = time.perf_counter()
    report = check(root, paths, write=args.write)
    if not args.paths:
        report.problems += broken_links(root)
        if (n := readme_length(root)) > README_MAX_LINES:
            report.problems.append(f"README.md: {n} lines, over {README_MAX_LINES}")
    for d in report.diffs:
        print(d)
    for line in report.problems:
        print(line)
    for rel in report.changed:
        print(f"wrote {rel}")
    for cmd, seconds in SECONDS.items():
        print(f"  {seconds:6.1f} s  {cmd}", file=sys.stderr)
    verdict = "ok" if report.ok else f"{len(report.diffs)} drifted, {len(report.problems)} other"
    print(
        f"densegate docs: {report.blocks} generated blocks in {len(paths)} docs ({report.engine} "
        f"engine tables, compared by their scripts' --doc in CI's engine groups), {verdict} "
        f"({time.perf_counter() - t0:.1f} s)",
        file=sys.stderr,
    )
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
