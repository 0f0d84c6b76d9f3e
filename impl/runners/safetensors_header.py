"""A safetensors file's header, read and checked by hand before the library opens the file.

The ``safetensors`` package refuses a truncated, empty or garbled file with a
message that names neither the file nor the tensor ("header too large",
"invalid shape, data type, or offset for tensor"). Reading the header here
(8 bytes of little-endian length, then that many bytes of JSON: each tensor's
dtype, shape and byte range in the data that follows) lets every such error
be a ``CheckpointError`` naming both.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from densegate.impl.runners.hf_config import CheckpointError
from densegate.impl.validation import is_int, json_value

__all__ = ["TensorEntry", "read_header"]

_MAX_HEADER = 100_000_000
"""The safetensors format's own cap on the header's length, in bytes."""

_ITEMSIZE = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1,
    "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U64": 8, "U32": 4, "U16": 2, "U8": 1, "BOOL": 1,
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class TensorEntry:
    """One tensor as the header lists it; ``begin``/``end``: bytes into the data section."""

    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int


def read_header(path: Path) -> dict[str, TensorEntry]:
    """Every tensor ``path`` declares, each checked to lie inside the file with as many bytes
    as its shape and dtype need; ``CheckpointError`` naming the file (and tensor) otherwise."""
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            head = f.read(8)
            n = int.from_bytes(head, "little") if len(head) == 8 else -1
            raw = f.read(n) if 0 < n <= min(size - 8, _MAX_HEADER) else b""
    except OSError as e:
        raise CheckpointError(f"{path}: cannot be read ({e.strerror or e})") from None
    if n < 0:
        raise CheckpointError(f"{path}: {size} bytes, too short for a safetensors file")
    if n == 0 or n > size - 8 or n > _MAX_HEADER:
        raise CheckpointError(
            f"{path}: header length {n} does not fit the file ({size} bytes): not a "
            "safetensors file, or a truncated one"
        )
    try:
        header = json_value(raw.decode("utf-8"), str(path))
    except ValueError:  # not UTF-8, not JSON, or nested too deep
        raise CheckpointError(f"{path}: its header is not JSON: not a safetensors file") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: its header is not a JSON object")
    data = size - 8 - n
    out: dict[str, TensorEntry] = {}
    for name, entry in header.items():
        if name != "__metadata__":
            out[name] = _entry(path, name, entry, data)
    return out


def _entry(path: Path, name: str, e: object, data: int) -> TensorEntry:
    where = f"{path}: tensor {name}"
    if not isinstance(e, dict):
        raise CheckpointError(f"{where}: header entry {e!r} is not an object")
    dtype, shape, offsets = e.get("dtype"), e.get("shape"), e.get("data_offsets")
    if not isinstance(dtype, str):
        raise CheckpointError(f"{where}: dtype {dtype!r} is not a string")
    if not isinstance(shape, list) or not all(is_int(d) and d >= 0 for d in shape):
        raise CheckpointError(f"{where}: shape {shape!r} is not a list of sizes")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(is_int(x) and x >= 0 for x in offsets)
        or offsets[0] > offsets[1]
    ):
        raise CheckpointError(f"{where}: data_offsets {offsets!r} are not [begin, end]")
    begin, end = offsets
    if end > data:
        raise CheckpointError(
            f"{where}: its data ends at byte {end} of the data section, which holds only "
            f"{data} bytes (the file is truncated, or its header is wrong)"
        )
    size = _ITEMSIZE.get(dtype)
    if size is not None and end - begin != math.prod(shape) * size:
        raise CheckpointError(
            f"{where}: {end - begin} bytes stored for shape {shape} of {dtype} "
            f"({math.prod(shape) * size} needed)"
        )
    return TensorEntry(dtype, tuple(shape), begin, end)
