"""The gated schedulers against the installed vLLM's scheduler contract (0.32 and 0.33 in CI).

vLLM builds whatever ``--scheduler-cls`` names through ``SchedulerInterface``: every abstract
method of the installed release must resolve to a concrete one on both gated classes, the
methods they define themselves (``schedule``, ``has_request``) must take what the installed
interface passes, and the recommended class for GPUs, ``GatedAsyncScheduler``, must keep
``AsyncScheduler`` (its overlap of scheduling with execution) in its bases.
"""

from __future__ import annotations

import inspect

import pytest

from tests.vllm.conftest import HAS_VLLM, SKIP_REASON

pytestmark = pytest.mark.skipif(not HAS_VLLM, reason=SKIP_REASON)


def _classes() -> list[type]:
    from densegate.integrations.vllm import GatedAsyncScheduler, GatedScheduler

    return [GatedScheduler, GatedAsyncScheduler]


def _abstract(cls: type) -> set[str]:
    return {n for n in dir(cls) if getattr(getattr(cls, n, None), "__isabstractmethod__", False)}


def test_every_abstract_method_of_the_installed_interface_is_concrete() -> None:
    from vllm.v1.core.sched.interface import SchedulerInterface

    wanted = _abstract(SchedulerInterface)
    assert {"schedule", "update_from_output", "add_request"} <= wanted  # the contract is read
    for cls in _classes():
        assert issubclass(cls, SchedulerInterface)
        assert not inspect.isabstract(cls) and not _abstract(cls), cls.__name__


def _params(fn: object) -> list[tuple[str, object]]:
    sig = inspect.signature(fn)  # type: ignore[arg-type]
    return [(p.name, p.default) for p in sig.parameters.values()]


def test_the_methods_the_gate_defines_take_what_vllm_passes() -> None:
    from vllm.v1.core.sched.interface import SchedulerInterface
    from vllm.v1.core.sched.scheduler import Scheduler

    for cls in _classes():
        assert _params(cls.schedule) == _params(Scheduler.schedule), cls.__name__
        assert _params(cls.schedule) == _params(SchedulerInterface.schedule), cls.__name__
        interface_has = getattr(SchedulerInterface, "has_request", None)  # 0.33's addition
        if interface_has is not None:
            assert _params(cls.has_request) == _params(interface_has), cls.__name__
        assert list(inspect.signature(cls.has_request).parameters) == ["self", "request_id"]


def test_the_recommended_class_keeps_vllms_async_scheduler() -> None:
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler

    sync, async_ = _classes()
    assert issubclass(async_, AsyncScheduler)
    assert not issubclass(sync, AsyncScheduler) and issubclass(sync, Scheduler)
    from densegate.integrations.vllm.scheduler import _Gated

    # the gate's part comes first, so vLLM's own schedule() runs under it, not beside it
    for cls, base in ((sync, Scheduler), (async_, AsyncScheduler)):
        assert cls.__mro__.index(_Gated) < cls.__mro__.index(base), cls.__name__
