"""A list reduced to its length, for symbolic execution of code that only counts.

CrossHair walks a list of symbolic length element by element and never finishes; the
scheduler's planning reads nothing of a token list, a block table or the free list
but its length, so R3 (``densegate.proofs.refinement.scheduler``) hands it these.
"""

from __future__ import annotations

from collections.abc import Iterator

__all__ = ["Counted"]


class Counted:
    """A list reduced to its length: all that planning reads of a token list, a block
    table or the free list.

    It has exactly the list operations ``Request`` and ``BlockManager`` use in planning
    (``len``, truth, ``append``, ``pop``, ``extend``, ``reversed``, ``clear``, a slice
    read, deleted or reversed); any other use (reading an element, iterating) raises,
    which fails the check.
    """

    __slots__ = ("n",)

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __bool__(self) -> bool:
        return True if self.n != 0 else False  # noqa: SIM210 (a branch, not a symbolic bool)

    def append(self, item: int) -> None:
        self.n += 1

    def pop(self) -> int:
        if self.n == 0:
            raise IndexError("pop from empty list")
        self.n -= 1
        return 0

    def extend(self, items: Counted) -> None:
        self.n += items.n

    def __reversed__(self) -> Counted:
        return Counted(self.n)

    def clear(self) -> None:
        self.n = 0

    def _span(self, i: slice) -> object:
        if not isinstance(i, slice) or i.step is not None:
            raise TypeError("a Counted list is read by slices only")
        lo = min(max(0 if i.start is None else i.start, 0), self.n)
        hi = self.n if i.stop is None else min(max(i.stop, 0), self.n)
        return max(hi - lo, 0)

    def __getitem__(self, i: slice) -> Counted:
        return type(self)(self._span(i))  # type: ignore[arg-type]

    def __delitem__(self, i: slice) -> None:
        self.n -= self._span(i)  # type: ignore[operator]

    def reverse(self) -> None:
        return None

    def __iter__(self) -> Iterator[int]:  # a slice read would make it iterable
        raise TypeError("a Counted list cannot be iterated: planning reads its length only")
