"""``densegate.impl`` must import without z3 or the spec: engines embed it alone."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import densegate.impl

IMPL = pathlib.Path(densegate.impl.__file__).parent


def test_importing_impl_loads_no_z3_and_no_spec() -> None:
    code = (
        "import sys, densegate.impl, densegate.impl.batch, densegate.impl.gate\n"
        "bad = sorted(m for m in sys.modules if m == 'z3' or m.startswith(('z3.', 'densegate.spec',"
        " 'densegate.proofs')))\n"
        "print(bad); sys.exit(1 if bad else 0)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_no_impl_module_imports_z3_or_spec_anywhere() -> None:
    """Covers imports inside functions too, which the subprocess check cannot reach."""
    offenders = []
    files = sorted(IMPL.rglob("*.py"))
    assert files
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for n in names:
                if n == "z3" or n.startswith(("z3.", "densegate.spec", "densegate.proofs")):
                    offenders.append(f"{path.name}: {n}")
    assert offenders == []
