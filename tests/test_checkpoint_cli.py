"""``densegate run --model DIR``: tokens and text identical to transformers' greedy output.

The checkpoint is written by transformers and its ``tokenizer.json`` by the
``tokenizers`` package (a word-level vocabulary, no download); transformers'
own fast tokenizer reads the same file, so prompt ids and decoded text are
checked against transformers too, not only against ``tokenizers``.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from densegate.cli.main import main
from tests.support.hf_llama import hf_float64, hf_greedy, make_checkpoint

pytestmark = pytest.mark.usefixtures("one_torch_thread")

VOCAB = 96
PROMPT = "w3 w17 w55 w2 w90 w41 w8"


def _tokenizer(path: Path) -> None:
    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(VOCAB)}, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens([AddedToken("w95", special=True)])  # an EOS-like special
    tok.save(str(path / "tokenizer.json"))


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any, Any]:
    path = make_checkpoint(tmp_path_factory.mktemp("cli"), vocab=VOCAB, seed=5)
    _tokenizer(path)
    hf_tok = PreTrainedTokenizerFast(tokenizer_file=str(path / "tokenizer.json"))
    return path, hf_float64(path), hf_tok


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["run", "--dtype", "float64", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_text_prompt_prints_transformers_tokens_and_text(
    ckpt: tuple[Path, Any, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    path, hf, hf_tok = ckpt
    code, out, _ = _run(capsys, "--model", str(path), "--prompt", PROMPT, "--max-tokens", "10")
    assert code == 0
    ids = hf_tok.encode(PROMPT)
    want = hf_greedy(hf, ids, 10)
    code, out, _ = _run(
        capsys, "--model", str(path), "--prompt", PROMPT, "--max-tokens", "10", "--json"
    )
    (req,) = json.loads(out)["requests"]
    assert req["prompt_ids"] == ids
    assert req["output_ids"] == want
    assert req["text"] == hf_tok.decode(want, skip_special_tokens=True)
    assert req["finish_reason"] == "length" and req["status"] == "finished"


def test_human_output_names_tokens_text_and_reason(
    ckpt: tuple[Path, Any, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    path, hf, hf_tok = ckpt
    code, out, _ = _run(capsys, "--model", str(path), "--prompt", PROMPT, "--max-tokens", "6")
    assert code == 0
    want = hf_greedy(hf, hf_tok.encode(PROMPT), 6)
    lines = out.splitlines()
    assert lines[0] == "request 0 (finished: length)"
    assert lines[1] == "  tokens: " + " ".join(map(str, want))
    assert lines[2] == f"  text: {hf_tok.decode(want, skip_special_tokens=True)!r}"


def test_stop_token_ends_with_reason_stop(
    ckpt: tuple[Path, Any, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    path, hf, _ = ckpt
    ids = [5, 9, 13, 21]
    free = hf_greedy(hf, ids, 10)
    k = next(i for i in range(1, 10) if free[i] not in free[:i])
    code, out, _ = _run(
        capsys,
        "--model",
        str(path),
        "--prompt-ids",
        "5, 9 13 21",
        "--max-tokens",
        "10",
        "--stop-token-id",
        str(free[k]),
        "--json",
    )
    assert code == 0
    (req,) = json.loads(out)["requests"]
    assert req["output_ids"] == free[: k + 1]
    assert req["finish_reason"] == "stop"


def test_token_ids_need_no_tokenizer(
    ckpt: tuple[Path, Any, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, hf, _ = ckpt
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "generation_config.json", "model.safetensors"):
        shutil.copy(path / name, bare / name)
    code, out, _ = _run(
        capsys, "--model", str(bare), "--prompt-ids", "7 8 9", "--max-tokens", "5", "--json"
    )
    assert code == 0
    (req,) = json.loads(out)["requests"]
    assert req["output_ids"] == hf_greedy(hf, [7, 8, 9], 5) and "text" not in req
    code, _, err = _run(capsys, "--model", str(bare), "--prompt", "w1 w2")
    assert code == 2 and "tokenizer.json" in err


def test_token_ids_need_no_tokenizers_package_beside_a_tokenizer_json(
    ckpt: tuple[Path, Any, Any], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every real checkpoint has a ``tokenizer.json``: ``--prompt-ids`` still needs no
    ``[text]`` (the output stays ids); a text prompt names the extra and its install."""
    path, hf, _ = ckpt
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    code, out, _ = _run(capsys, "--model", str(path), "--prompt-ids", "7 8 9", "--max-tokens", "3")
    assert code == 0 and "tokens: " + " ".join(map(str, hf_greedy(hf, [7, 8, 9], 3))) in out
    assert "text:" not in out
    code, _, err = _run(capsys, "--model", str(path), "--prompt", "w1 w2")
    assert code == 2 and "pip install '.[text]' (token ids, --prompt-ids, need none)" in err


def test_prompts_need_a_model(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "--prompt-ids", "1 2")
    assert code == 2 and "--model" in err
    code, _, err = _run(capsys, "--model", "/nonexistent/ckpt", "--prompt-ids", "1 2")
    assert code == 2 and "/nonexistent/ckpt" in err


def test_bad_prompt_ids_are_named(
    ckpt: tuple[Path, Any, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _run(capsys, "--model", str(ckpt[0]), "--prompt-ids", "1 x2")
    assert code == 2 and "'x2'" in err


def test_workload_runs_on_a_checkpoint_within_its_positions(
    ckpt: tuple[Path, Any, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """Without prompts, --model runs the synthetic workload, capped at max_position_embeddings."""
    code, out, _ = _run(capsys, "--model", str(ckpt[0]), "--gen", "4", "--json")
    s = json.loads(out)
    assert code == 0 and s["finished"] == s["requests"] == 4
    assert s["runner_kind"] == "torch" and s["finish_reasons"] == {"length": 4}


def test_engine_generate_takes_and_returns_text(ckpt: tuple[Path, Any, Any]) -> None:
    from densegate.impl.engine import Engine, EngineConfig

    path, hf, hf_tok = ckpt
    engine = Engine(EngineConfig(model=str(path), dtype="float64"))
    want = [hf_greedy(hf, hf_tok.encode(p), 6) for p in (PROMPT, "w9 w9 w4")]
    texts = [hf_tok.decode(w, skip_special_tokens=True) for w in want]
    assert engine.generate([PROMPT, "w9 w9 w4"], 6) == texts
    assert engine.generate([hf_tok.encode(PROMPT)], 6) == [want[0]]  # ids in, ids out


def test_missing_tokenizers_package_says_what_to_install(
    ckpt: tuple[Path, Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from densegate.impl.engine import Engine, EngineConfig

    monkeypatch.setitem(sys.modules, "tokenizers", None)
    engine = Engine(EngineConfig(model=str(ckpt[0])))
    with pytest.raises(ValueError, match=r"pip install .\.\[text\]. \(token ids"):
        engine.generate(["w1 w2"], 2)
    assert engine.generate([[1, 2]], 2)[0] == hf_greedy(ckpt[1], [1, 2], 2)  # ids need none
