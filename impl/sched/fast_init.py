"""A faster ``__init__`` for the frozen records a replay builds once per pass.

A frozen dataclass's generated ``__init__`` sets every field with ``object.__setattr__``
(its own ``__setattr__`` refuses), which finds the field's slot by name each time.
``fast_init`` gives a frozen slots dataclass an ``__init__`` that calls each slot's
descriptor directly: the same parameters and defaults, the same object (fields,
equality, hash, repr, immutability), in about half the time. Only for classes whose
``__init__`` does nothing else (no ``__post_init__``, no default factory).
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

__all__ = ["fast_init"]

T = TypeVar("T")


def fast_init(cls: type[T]) -> type[T]:
    """Replace ``cls.__init__`` (a frozen slots dataclass's) as the module docstring says."""
    params = dataclasses.fields(cls) if dataclasses.is_dataclass(cls) else ()
    frozen = bool(params) and cls.__dataclass_params__.frozen  # type: ignore[attr-defined]
    plain = all(
        f.init and not f.kw_only and f.default_factory is dataclasses.MISSING for f in params
    )
    if not (frozen and plain and "__slots__" in vars(cls) and not hasattr(cls, "__post_init__")):
        raise TypeError(f"fast_init needs a frozen slots dataclass of plain fields, got {cls!r}")
    names: dict[str, Any] = {}
    sig: list[str] = []
    body: list[str] = []
    for f in params:
        names[f"_set_{f.name}"] = vars(cls)[f.name].__set__
        if f.default is dataclasses.MISSING:
            sig.append(f.name)
        else:
            names[f"_default_{f.name}"] = f.default
            sig.append(f"{f.name}=_default_{f.name}")
        body.append(f"    _set_{f.name}(self, {f.name})")
    src = f"def __init__(self, {', '.join(sig)}):\n" + "\n".join(body) + "\n"
    exec(src, names)  # as dataclasses builds the __init__ it replaces
    init = names["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    setattr(cls, "__init__", init)  # noqa: B010
    return cls
