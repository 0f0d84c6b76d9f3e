"""The DP gate's plugin on vLLM's real ``DPEngineCoreProc`` class, in this process (no collective).

The entry point is declared for vLLM's plugin loader, inert without the env
var, refuses a vLLM outside the range before touching anything, wraps exactly
the three methods and can be undone; on a real engine core (its __init__ not
run) the cadence beside an enabled gate and a per-rank gated scheduler are
refused, and a disabled gate gives back vLLM's own cadence answer.
"""

from __future__ import annotations

from collections.abc import Iterator
from importlib.metadata import entry_points
from typing import Any

import pytest

from tests.support.vllm_harness import Limits
from tests.vllm.conftest import HAS_VLLM, SKIP_REASON

pytestmark = pytest.mark.skipif(not HAS_VLLM, reason=SKIP_REASON)

ENV = "DENSEGATE_VLLM_DP"


@pytest.fixture
def originals() -> Iterator[dict[str, Any]]:
    from vllm.v1.engine.core import DPEngineCoreProc

    from densegate.integrations.vllm import dp_core

    saved = {
        n: DPEngineCoreProc.__dict__.get(n, getattr(DPEngineCoreProc, n)) for n in dp_core.TARGETS
    }
    yield saved
    dp_core.uninstall()
    for n in dp_core.TARGETS:
        assert getattr(DPEngineCoreProc, n) is saved[n]


def _core(interval: int, densegate: dict[str, Any], cls: Any = None) -> Any:
    from tests.support.vllm_dp import build_scheduler, make_core
    from tests.support.vllm_harness import build

    limits = Limits(prefill_schedule_interval=interval)
    sched = build(cls, limits, densegate) if cls else build_scheduler(limits, densegate, 2)
    return make_core(sched, None, 0, 2, 5)


def test_the_entry_point_is_in_vllms_general_plugins_group() -> None:
    eps = [e for e in entry_points(group="vllm.general_plugins") if e.name == "densegate_dp"]
    assert [e.value for e in eps] == ["densegate.integrations.vllm.dp_plugin:register"]
    from densegate.integrations.vllm.dp_plugin import register

    assert eps[0].load() is register


def test_without_the_env_var_the_plugin_changes_nothing(
    originals: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from vllm.v1.engine.core import DPEngineCoreProc

    from densegate.integrations.vllm import dp_core
    from densegate.integrations.vllm.dp_plugin import register

    monkeypatch.delenv(ENV, raising=False)
    register()
    assert not dp_core.installed()
    assert all(getattr(DPEngineCoreProc, n) is f for n, f in originals.items())


def test_with_the_env_var_it_wraps_the_three_methods_once(
    originals: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from vllm.v1.engine.core import DPEngineCoreProc, EngineCoreProc

    from densegate.integrations.vllm import dp_core
    from densegate.integrations.vllm.dp_plugin import register

    monkeypatch.setenv(ENV, "1")
    register()
    register()  # vLLM may load plugins more than once per process
    assert dp_core.installed()
    for n, f in originals.items():
        assert getattr(DPEngineCoreProc, n) is not f
        assert getattr(DPEngineCoreProc, n) is getattr(dp_core, n if n[0] == "_" else f"_{n}")
    # Only the DP engine core: the one-engine core keeps vLLM's methods.
    assert EngineCoreProc._process_engine_step is originals["_process_engine_step"]


@pytest.mark.parametrize("version", ["0.31.2", "0.34.0", "1.0.0"])
def test_a_vllm_outside_the_range_is_refused_at_plugin_load(
    version: str, originals: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    import vllm

    from densegate.integrations.vllm import UnsupportedVllmVersion, dp_core
    from densegate.integrations.vllm.dp_plugin import register

    monkeypatch.setenv(ENV, "1")
    monkeypatch.setattr(vllm, "__version__", version)
    with pytest.raises(
        UnsupportedVllmVersion, match=rf"{ENV}=1 .*vllm>=0\.32\.0,<0\.34.*{version}"
    ):
        register()
    assert not dp_core.installed()


def test_a_bad_env_value_is_refused_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from densegate.integrations.vllm.dp_plugin import register

    monkeypatch.setenv(ENV, "true")
    with pytest.raises(ValueError, match="got 'true'"):
        register()


def test_vllms_cadence_beside_the_gate_is_refused_on_a_real_engine_core() -> None:
    from densegate.integrations.vllm.dp_core import DpGate

    with pytest.raises(ValueError, match=r"prefill_schedule_interval=4 .* both defer prefills"):
        DpGate(_core(4, {}))


def test_a_disabled_gate_leaves_vllms_cadence_as_it_is(originals: dict[str, Any]) -> None:
    from densegate.integrations.vllm import dp_core

    core = _core(2, {"enabled": False})
    dp_core.install()
    core.densegate_dp = dp_core.DpGate(core)  # what attach keeps, without its handshake
    got = []
    for step in range(6):
        core.step_counter = step
        got.append(core._should_throttle_prefills())
    assert got == [originals["_should_throttle_prefills"](core) for core.step_counter in range(6)]
    assert got == [False, True, False, True, False, True]  # vLLM's interval-2 cadence


def test_an_enabled_gate_answers_the_throttle_from_its_decision(originals: dict[str, Any]) -> None:
    from densegate.integrations.vllm import dp_core

    core = _core(1, {})
    dp_core.install()
    core.densegate_dp = gate = dp_core.DpGate(core)
    for held in (True, False, True):
        gate.throttle = held
        assert core._should_throttle_prefills() is held


def test_a_per_rank_gated_scheduler_beside_the_dp_gate_is_refused() -> None:
    from densegate.integrations.vllm import GatedScheduler
    from densegate.integrations.vllm.dp_core import DpGate

    with pytest.raises(ValueError, match=r"GatedScheduler gates each rank .* would stack"):
        DpGate(_core(1, {}, GatedScheduler))


def test_the_busy_loop_handshakes_before_vllms_loop_runs(
    originals: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from densegate.integrations.vllm import dp_core
    from tests.support.vllm_dp import build_scheduler, dp_group, make_core
    from tests.support.vllm_dp_runs import free_port

    core = make_core(build_scheduler(Limits(), {}, 1), None, 0, 1, 5)
    core.dp_group = dp_group(free_port(), 0, 1, 5)  # one rank: the all-reduce is local
    dp_core.install()
    seen: list[object] = []
    monkeypatch.setitem(
        dp_core._ORIGINALS, "run_busy_loop", lambda c: seen.append(c.__dict__.get("densegate_dp"))
    )
    core.run_busy_loop()
    assert len(seen) == 1 and isinstance(seen[0], dp_core.DpGate)  # attached, then vLLM's loop
    assert core.densegate_dp is seen[0] and not core.densegate_dp.log
