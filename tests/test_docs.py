"""The docs say what the code does: every generated table matches its command, the README
is a front page, and every relative link leads to a file.

``densegate.lab.docs`` regenerates each deterministic table (property tables, the proof
registry, pass counts and modeled times of ``densegate bench``, ``densegate tune``, the
conformance verdicts) and compares it with the doc's block. The real check runs over the
real docs; its twins run it on copies with a planted drift, a missing command line, bad
markers and a broken link, to show that each is caught, not merely that the docs pass.
"""

from __future__ import annotations

import pathlib
import shutil

import pytest

from densegate.lab import docs

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _copy(tmp_path: pathlib.Path) -> pathlib.Path:
    root = tmp_path / "checkout"
    (root / "docs").mkdir(parents=True)
    shutil.copy(ROOT / "README.md", root / "README.md")
    for p in (ROOT / "docs").glob("*.md"):
        shutil.copy(p, root / "docs" / p.name)
    return root


def _write(root: pathlib.Path, rel: str, text: str) -> pathlib.Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_readme_is_a_front_page() -> None:
    assert docs.readme_length(ROOT) <= docs.README_MAX_LINES


def test_every_relative_link_leads_to_a_file() -> None:
    assert docs.broken_links(ROOT) == []


def test_every_generated_table_matches_its_command() -> None:
    report = docs.check(ROOT)
    assert report.blocks > 0
    assert report.ok, "\n".join(report.diffs + report.problems)


def test_a_planted_drift_is_caught_named_and_rewritten(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _copy(tmp_path)
    proofs, dp = root / "docs" / "PROOFS.md", root / "docs" / "DATA_PARALLEL.md"
    original = proofs.read_text(), dp.read_text()
    row = next(ln for ln in original[0].splitlines() if ln.startswith("| P2 | gate |"))
    proofs.write_text(original[0].replace(row, row.replace("no idle pass", "no idle pas")))
    dp.write_text(original[1].replace("| D4 | no deadlock |", "| D4 | no dedlock |"))
    paths = ["docs/PROOFS.md", "docs/DATA_PARALLEL.md"]

    assert docs.main(["--check", "--root", str(root), *paths]) == 1
    out = capsys.readouterr().out
    assert "--- docs/PROOFS.md [proofs] (in the doc" in out
    assert "+++ docs/PROOFS.md [proofs] (regenerated)" in out
    assert "-" + row.replace("no idle pass", "no idle pas") in out
    assert "+" + row in out
    assert "docs/DATA_PARALLEL.md [properties D1-D8]" in out
    assert "-| D4 | no dedlock |" in out

    assert docs.main(["--write", "--root", str(root), *paths]) == 0
    assert (proofs.read_text(), dp.read_text()) == original
    assert docs.main(["--check", "--root", str(root), *paths]) == 0


def test_a_block_must_sit_under_the_line_naming_its_source(tmp_path: pathlib.Path) -> None:
    body = "\n<!-- densegate-table: properties P1 -->\n<!-- /densegate-table -->\n"
    path = _write(tmp_path, "docs/X.md", "From somewhere else:\n" + body)
    report = docs.check(tmp_path, [path])
    assert report.problems and "must name 'spec/properties.py'" in report.problems[0]
    path.write_text("From `spec/properties.py`:\n" + body)
    assert not docs.check(tmp_path, [path]).problems
    assert docs.check(tmp_path, [path], write=True).changed == ["docs/X.md"]
    assert "| P1 | counter bound |" in path.read_text()
    assert docs.check(tmp_path, [path]).ok


def test_bad_markers_generators_and_flags_are_findings(tmp_path: pathlib.Path) -> None:
    text = "\n".join(
        [
            "`spec/properties.py`",
            "<!-- densegate-table: no-such-generator -->",
            "<!-- /densegate-table -->",
            "`densegate bench --no-such-flag`",
            "<!-- densegate-table: bench-passes --no-such-flag -->",
            "<!-- /densegate-table -->",
            "`spec/properties.py`",
            "<!-- densegate-table: properties P99 -->",
            "<!-- /densegate-table -->",
            "<!-- /densegate-table -->",
            "<!-- densegate-table: properties P1 -->",
            "never closed",
        ]
    )
    report = docs.check(tmp_path, [_write(tmp_path, "docs/X.md", text)])
    found = "\n".join(report.problems)
    assert "unknown generator 'no-such-generator'" in found
    assert "--no-such-flag" in found and "exited 2" in found
    assert "no property 'P99'" in found
    assert "an end marker with no block open" in found
    assert "is not closed" in found
    assert not report.ok


def test_a_marker_inside_a_code_block_is_an_example(tmp_path: pathlib.Path) -> None:
    marker = "<!-- densegate-table: properties P1 -->\n...\n<!-- /densegate-table -->"
    text = f"```markdown\n{marker}\n```\n"
    report = docs.check(tmp_path, [_write(tmp_path, "docs/X.md", text)])
    assert report.blocks == 0 and report.ok


def test_a_broken_link_is_found(tmp_path: pathlib.Path) -> None:
    readme = "[ok](docs/A.md#a-top-x_y) [web](https://example.org) [x](#here) [y](#gone)\n"
    _write(tmp_path, "README.md", readme + "## Here\n")
    a = "[back](../README.md) [gone](B.md) ![img](pic.png) [no](C.md#top-1) [c](C.md#top)\n"
    _write(tmp_path, "docs/A.md", a + "# A `top`: (x_y)\n")
    _write(
        tmp_path, "docs/C.md", "```\n[in a code block](nowhere.md)\n# not a heading\n```\n# Top\n"
    )
    assert docs.broken_links(tmp_path) == [
        "README.md:1: link to '#gone': no heading has that anchor",
        "docs/A.md:1: link to 'B.md', which does not exist",
        "docs/A.md:1: link to 'pic.png', which does not exist",
        "docs/A.md:1: link to 'C.md#top-1': no heading has that anchor",
    ]


def test_a_repeated_heading_s_anchor_is_numbered(tmp_path: pathlib.Path) -> None:
    path = _write(tmp_path, "docs/A.md", "# Top\n## Top\n## Data parallel (`DP=1`)\n")
    assert docs.anchors(path) == {"top", "top-1", "data-parallel-dp1"}


def test_outside_a_checkout_the_check_is_one_line(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An installed (not editable) densegate has no README.md or docs/ beside it."""
    assert docs.main(["--check", "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not a densegate checkout" in err, err


def test_the_whole_check_fails_on_a_long_readme(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _write(tmp_path, "README.md", "line\n" * (docs.README_MAX_LINES + 1))
    assert docs.main(["--check", "--root", str(tmp_path)]) == 1
    assert f"README.md: {docs.README_MAX_LINES + 1} lines" in capsys.readouterr().out


def _engine_doc(tmp_path: pathlib.Path, above: str, script: str, body: str) -> pathlib.Path:
    _write(tmp_path, "benchmarks/side.py", "")
    spec = f"engine {script}"
    text = f"{above}\n\n<!-- densegate-table: {spec} -->\n{body}<!-- /densegate-table -->\n"
    return _write(tmp_path, "docs/E.md", text)


def test_an_engine_block_is_counted_and_its_source_line_checked(tmp_path: pathlib.Path) -> None:
    good = _engine_doc(tmp_path, "`python benchmarks/side.py` prints:", "benchmarks/side.py", "")
    report = docs.check(tmp_path, [good])
    assert report.ok and (report.blocks, report.engine) == (1, 1)
    # twins: the line above names no command; the block names no script of the checkout
    bad = _engine_doc(tmp_path, "It prints:", "benchmarks/side.py", "")
    found = docs.check(tmp_path, [bad])
    assert found.problems and "must name 'python benchmarks/side.py'" in found.problems[0]
    gone = _engine_doc(tmp_path, "`python benchmarks/gone.py`:", "benchmarks/gone.py", "")
    found = docs.check(tmp_path, [gone])
    assert found.engine == 0 and "names no script" in found.problems[0]


def test_an_engine_table_s_script_finds_its_drift_and_rewrites_it(tmp_path: pathlib.Path) -> None:
    table = "| a | b |\n|---|---|\n| 1 | 2 |"
    doc = _engine_doc(tmp_path, "`python benchmarks/side.py`:", "benchmarks/side.py", "")
    doc.write_text(doc.read_text().replace("-->\n<!--", f"-->\n\n{table}\n\n<!--"))
    flags = ["--json", "--doc", str(doc), "--goal"]  # flags that do not change the table
    assert docs.engine_diffs(doc, "benchmarks/side.py", flags, table) == []
    drift = docs.engine_diffs(doc, "benchmarks/side.py", flags, table.replace("2", "3"))
    assert len(drift) == 1 and "-| 1 | 2 |" in drift[0] and "+| 1 | 3 |" in drift[0]
    # a run with other arguments is another table: it has no block to compare with
    other = docs.engine_diffs(doc, "benchmarks/side.py", ["--dps", "2"], table)
    assert other == [
        f"{doc}: no block <!-- densegate-table: engine benchmarks/side.py --dps 2 --> "
        "to compare the table with"
    ]
    assert docs.engine_diffs(doc, "benchmarks/side.py", [f"--doc={doc}"], "x", write=True) == []
    assert docs.engine_diffs(doc, "benchmarks/side.py", [], "x") == []
    assert "\n\nx\n\n<!-- /densegate-table -->" in doc.read_text()
