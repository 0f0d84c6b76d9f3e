"""Broken implementations for the refinement obligations: the shipped class with one edit.

A mutant is the shipped method's own source with exactly one snippet replaced,
compiled in the shipped module's namespace and installed on a subclass. So each
mutant differs from the code users run by that one edit, and a mutant whose
snippet no longer occurs in the shipped source is an error, not a silent pass.
"""

from __future__ import annotations

import inspect
import sys
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

__all__ = ["CodeMutant"]


@dataclass(frozen=True)
class CodeMutant:
    """``cls`` with ``old`` replaced by ``new`` (each occurring once) in ``method``."""

    name: str
    description: str
    cls: type
    method: str
    old: str
    new: str
    focus: Mapping[str, Mapping[str, object]] = field(default_factory=dict, hash=False)
    """Check name -> a partial state (the rest symbolic) where the prover looks first, when no
    state sampled from the target's proof tells the mutant apart. Speed only: a refutation
    found there is replayed like any other, and without one every path is explored."""

    @cached_property
    def build(self) -> type:
        source = textwrap.dedent(inspect.getsource(getattr(self.cls, self.method)))
        if source.count(self.old) != 1:
            raise ValueError(
                f"mutant {self.name}: {self.old!r} occurs {source.count(self.old)} times in "
                f"{self.cls.__name__}.{self.method}, expected once"
            )
        code = compile(source.replace(self.old, self.new), f"<mutant {self.name}>", "exec")
        scope: dict[str, Any] = {}
        exec(code, vars(sys.modules[self.cls.__module__]), scope)
        body = {self.method: scope[self.method], "__slots__": (), "__module__": __name__}
        return type(f"{self.cls.__name__}__{self.name}", (self.cls,), body)
