"""Run Python with optional packages blocked, the way a missing install blocks them.

``sys.modules[name] = None`` makes ``import name`` raise ``ModuleNotFoundError``,
so a test can show what a lean install does on a machine that has every extra.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

OPTIONAL = (
    "numpy",
    "torch",
    "rich",
    "z3",
    "crosshair",
    "hypothesis",
    "safetensors",
    "tokenizers",
    "matplotlib",
    "transformers",
    "vllm",
    "sglang",
)
"""Every package an extra brings: none may be needed by the runtime."""


def run_blocked(
    code: str, blocked: tuple[str, ...], cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -c code`` in a fresh interpreter where ``blocked`` cannot be imported."""
    prelude = f"import sys\nfor _m in {blocked!r}:\n    sys.modules[_m] = None\n"
    return subprocess.run(
        [sys.executable, "-c", prelude + code],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
    )
