"""A broken checkpoint is one ``CheckpointError`` naming the file and the tensor (issue 26).

The ``safetensors`` package refuses a truncated or garbled file with a message
naming neither ("header too large"), and NaN weights used to load silently and
generate token 0 forever. Each broken file here is a good checkpoint written by
transformers, then damaged one way; the loader, ``EngineConfig``/``Engine`` and
``densegate run --model`` must each refuse it in one line, and the good one
must still load (the twin of every case).
"""

from __future__ import annotations

import json
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from densegate.cli.main import main
from densegate.impl.engine import Engine, EngineConfig
from densegate.impl.runners.checkpoint import load_model
from densegate.impl.runners.hf_config import CheckpointError
from densegate.impl.runners.tokenizer import TextCodec
from tests.support.hf_llama import make_checkpoint

pytestmark = pytest.mark.usefixtures("one_torch_thread")

WEIGHTS = "model.safetensors"
UP = "model.layers.1.mlp.up_proj.weight"


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_checkpoint(tmp_path_factory.mktemp("good"), max_pos=96)


def _header(data: bytes) -> tuple[dict[str, dict[str, list[int]]], bytes]:
    n = struct.unpack("<Q", data[:8])[0]
    return json.loads(data[8 : 8 + n]), data[8 + n :]


def _with_header(header: dict[str, dict[str, list[int]]], body: bytes) -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + body


def _shift(name: str, by: int) -> Callable[[bytes], bytes]:
    def edit(data: bytes) -> bytes:
        header, body = _header(data)
        b, e = header[name]["data_offsets"]
        header[name]["data_offsets"] = [b + by, e + by]
        return _with_header(header, body)

    return edit


def _reshape(data: bytes) -> bytes:
    header, body = _header(data)
    header[UP]["shape"] = [48, 33]  # one column more than its bytes hold
    return _with_header(header, body)


BROKEN_BYTES: dict[str, tuple[Callable[[bytes], bytes], str]] = {
    "truncated": (lambda d: d[:-100], "tensor model.norm.weight: its data ends at byte"),
    "empty": (lambda d: b"", "0 bytes, too short for a safetensors file"),
    "garbage": (lambda d: b"\x00garbage" * 40, "does not fit the file (320 bytes)"),
    "bad header length": (
        lambda d: struct.pack("<Q", 10**9) + d[8:],
        "header length 1000000000 does not fit the file",
    ),
    "header not JSON": (
        lambda d: struct.pack("<Q", 4) + b"\xff\xfe{[" + d[12:],
        "its header is not JSON",
    ),
    "offsets past the end": (_shift(UP, 10**7), f"tensor {UP}: its data ends at byte"),
    "bytes do not match the shape": (_reshape, f"tensor {UP}: 6144 bytes stored for shape"),
}


@pytest.mark.parametrize("case", list(BROKEN_BYTES))
def test_a_damaged_file_is_named_with_its_tensor(good: Path, tmp_path: Path, case: str) -> None:
    edit, needle = BROKEN_BYTES[case]
    ck = tmp_path / "ck"
    shutil.copytree(good, ck)
    (ck / WEIGHTS).write_bytes(edit((good / WEIGHTS).read_bytes()))
    with pytest.raises(CheckpointError) as caught:
        load_model(ck)
    assert str(ck / WEIGHTS) in str(caught.value) and needle in str(caught.value)
    with pytest.raises(CheckpointError, match=r"model\.safetensors"):
        Engine(EngineConfig(model=str(ck)))


def test_the_good_file_loads(good: Path) -> None:
    """The twin: the undamaged checkpoint passes every header and value check."""
    model = load_model(good)
    assert model.config.vocab_size == 96


def _shard(ck: Path, cut_second: int = 0, misplace: bool = False) -> None:
    """Split the weights into two shards behind an index (the second shorter by ``cut``)."""
    tensors = load_file(str(ck / WEIGHTS))
    (ck / WEIGHTS).unlink()
    names = sorted(tensors)
    halves = names[: len(names) // 2], names[len(names) // 2 :]
    weight_map = {}
    for i, half in enumerate(halves, 1):
        save_file({n: tensors[n] for n in half}, str(ck / f"m-{i}.safetensors"))
        weight_map |= {n: f"m-{i}.safetensors" for n in half}
    if misplace:
        weight_map[halves[1][0]] = "m-1.safetensors"
    (ck / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    if cut_second:
        second = ck / "m-2.safetensors"
        second.write_bytes(second.read_bytes()[:-cut_second])


@pytest.mark.parametrize(
    ("kw", "needle"),
    [
        ({"cut_second": 64}, "m-2.safetensors: tensor model.norm.weight: its data ends at byte"),
        ({"misplace": True}, "puts tensor model.layers.0.self_attn.v_proj.weight in .*m-1"),
        ({}, None),  # the twin: a good sharded checkpoint loads
    ],
)
def test_a_shard_is_checked_too(
    good: Path, tmp_path: Path, kw: dict[str, object], needle: str | None
) -> None:
    ck = tmp_path / "ck"
    shutil.copytree(good, ck)
    _shard(ck, **kw)  # type: ignore[arg-type]
    if needle is None:
        assert load_model(ck).config.vocab_size == 96
        return
    with pytest.raises(CheckpointError, match=needle):
        load_model(ck)


def _poison(value: float, dtype: torch.dtype = torch.float32) -> Callable[[Path], None]:
    def edit(ck: Path) -> None:
        tensors = load_file(str(ck / WEIGHTS))
        tensors[UP] = tensors[UP].to(dtype)
        tensors[UP][3, 4] = value
        save_file(tensors, str(ck / WEIGHTS))

    return edit


@pytest.mark.parametrize(
    ("edit", "dtype"),
    [
        (_poison(float("nan")), None),
        (_poison(float("inf")), None),
        (_poison(1e6), torch.float16),  # finite when stored, infinite once cast to float16
    ],
    ids=["nan", "inf", "overflow in the cast"],
)
def test_non_finite_weights_are_refused_unless_told_not_to_check(
    good: Path, tmp_path: Path, edit: Callable[[Path], None], dtype: torch.dtype | None
) -> None:
    ck = tmp_path / "ck"
    shutil.copytree(good, ck)
    edit(ck)
    with pytest.raises(CheckpointError, match=f"{UP} holds NaN or infinite values"):
        load_model(ck, dtype=dtype)
    assert load_model(ck, dtype=dtype, check_finite=False).config.vocab_size == 96
    cfg = EngineConfig(model=str(ck), dtype="float16" if dtype else "float32")
    with pytest.raises(CheckpointError, match="--no-finite-check"):
        Engine(cfg)
    Engine(EngineConfig(model=str(ck), check_weights=False))


@pytest.mark.parametrize(
    "text",
    ['{"model": {"vocab": {1: 2}}}', '{"version": "1.0", "model": 5}', "\xff not json"],
    ids=["key not a string", "wrong model", "not JSON"],
)
def test_a_malformed_tokenizer_is_named(good: Path, tmp_path: Path, text: str) -> None:
    ck = tmp_path / "ck"
    shutil.copytree(good, ck)
    (ck / "tokenizer.json").write_text(text, encoding="latin-1")
    with pytest.raises(CheckpointError, match=r"tokenizer\.json: not a valid tokenizer\.json"):
        TextCodec(ck).load()


def test_a_config_that_is_not_utf8_is_named(good: Path, tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    shutil.copytree(good, ck)
    (ck / "config.json").write_bytes(b"\xff\xfe{}")
    with pytest.raises(CheckpointError, match=r"config\.json: not UTF-8 text"):
        EngineConfig(model=str(ck))


def _declare(**fields: int) -> Callable[[Path], None]:
    """``config.json`` declaring shape ``fields`` its weights do not have (issue 34: 10^6
    layers ran out of memory after 132 s, before any tensor was found missing)."""

    def edit(ck: Path) -> None:
        config = json.loads((ck / "config.json").read_text())
        (ck / "config.json").write_text(json.dumps(config | fields))

    return edit


@pytest.mark.parametrize(
    ("damage", "needle"),
    [
        (lambda ck: (ck / WEIGHTS).write_bytes(b""), "too short for a safetensors file"),
        (_poison(float("nan")), "holds NaN or infinite values"),
        (lambda ck: (ck / "tokenizer.json").write_text("{1: 2}"), "not a valid tokenizer.json"),
        (_declare(num_hidden_layers=10**6), "declares num_hidden_layers 1000000 (7,744,006,176"),
        (_declare(num_hidden_layers=10**9), "files hold 2 layers (21,664 weights): refused"),
        (_declare(hidden_size=2**20), "config.json implies [96, 1048576]"),
    ],
    ids=["empty weights", "nan", "tokenizer", "10^6 layers", "10^9 layers", "2^20 hidden"],
)
def test_densegate_run_says_it_in_one_line(
    good: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    damage: Callable[[Path], object],
    needle: str,
) -> None:
    ck = tmp_path / "ck"
    shutil.copytree(good, ck)
    damage(ck)
    assert main(["run", "--model", str(ck), "--prompt-ids", "1 2 3", "--max-tokens", "2"]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.count("\n") == 1
    assert str(ck) in out.err and needle in out.err, out.err
