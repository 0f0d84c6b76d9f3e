"""The SGLang test group: runs where SGLang 0.5.23 is installed, in a venv of its own.

``.ci/sglang_venv DIR`` makes that venv (SGLang without its GPU stack, the
packages its scheduler modules import, densegate with its entry point) and
``.ci/run`` runs this folder there. Anywhere else every test here skips, with
the reason below.
"""

from __future__ import annotations

import importlib.util

HAS_SGLANG = importlib.util.find_spec("sglang") is not None
SKIP_REASON = (
    "skipped because SGLang is not installed here: the SGLang group runs in its own venv "
    "(sglang==0.5.23 --no-deps plus pinned packages), made by .ci/sglang_venv and run by .ci/run"
)
