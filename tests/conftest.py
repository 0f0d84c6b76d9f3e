"""Hypothesis profiles: ``ci`` (default: derandomized, bounded) and ``nightly``.

Select with ``DENSEGATE_PROFILE=nightly`` (or Hypothesis' own
``HYPOTHESIS_PROFILE``). Tests scale their example counts through
``settings()`` so one switch deepens the whole suite.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings

from tests.support.profiles import PROFILE

# The "explain" phase re-runs a failing stateful case hundreds of times to
# annotate it; the shrunk steps it would annotate are printed anyway.
_PHASES = [Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink]

_COMMON: dict[str, Any] = {
    "deadline": None,
    "print_blob": True,
    "phases": _PHASES,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
}
# ci replays nothing from a local example database: a clean clone tests what this checkout does.
settings.register_profile("ci", derandomize=True, database=None, max_examples=100, **_COMMON)
settings.register_profile("nightly", derandomize=False, max_examples=2_000, **_COMMON)
settings.load_profile(PROFILE)


@pytest.fixture(scope="module")
def one_torch_thread() -> Iterator[None]:
    """Torch on one thread for a module, restored after it.

    Tiny matmuls gain nothing from threads; with a busy core the OpenMP barrier
    costs ms. Torch is imported here, not at the top, so runs without torch
    tests do not pay for it.
    """
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
