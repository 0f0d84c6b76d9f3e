"""``densegate profile`` and the grid it times: kinds, work and the written profile.

The times themselves are never checked, only that every grid point was timed
as the kind its work says and that the profile reloads to the same model.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from densegate.cli.main import main as cli_main
from densegate.lab.cost import PassWork, Profile, kind_of
from densegate.lab.cost.measure import (
    PROFILE_LAYOUT,
    GridPoint,
    _batch,
    default_grid,
    model_config_from_dir,
    small_grid,
)


def test_grid_batches_carry_the_work_they_name() -> None:
    point = GridPoint(((0, 16), (32, 8)), (10, 40))
    w = PassWork.from_batch(_batch(point, PROFILE_LAYOUT, 0))
    assert w == PassWork(24, 2, 16 * 17 // 2 + 8 * 32 + 8 * 9 // 2, 16 + 40, 2, 50)
    for p in default_grid():
        b = _batch(p, PROFILE_LAYOUT, 0)
        n = sum(s + k for s, k in p.prefills) + sum(p.decodes)
        assert all(len(c.block_table) * 16 >= c.start + len(c.token_ids) for c in b.prefills)
        assert n <= PROFILE_LAYOUT.num_slots
    kinds = {kind_of(PassWork.from_batch(_batch(p, PROFILE_LAYOUT, 0)), 0) for p in small_grid()}
    assert kinds == {"prefill", "mixed", "decode_eager"}


def test_profile_cli_writes_a_profile_that_reloads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "p.json"
    argv = ["profile", "--grid", "small", "--repeats", "1", "--quiet", "--out", str(out)]
    assert cli_main(argv) == 0
    text = capsys.readouterr().out
    for kind in ("prefill", "mixed", "decode_eager"):
        assert f"| {kind} |" in text
    prof = Profile.load(out)
    assert prof.source == "measured" and len(prof.samples) == len(small_grid())
    assert {s.kind for s in prof.samples} == {"prefill", "mixed", "decode_eager"}
    assert all(s.kind == kind_of(s.work, 0) for s in prof.samples)
    assert set(prof.fit_error) == {"prefill", "mixed", "decode_eager"}
    assert json.loads(out.read_text())["inputs"]["threads"] == 1


def test_model_dir_shape_and_its_errors(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "vocab_size": 100,
                "hidden_size": 32,
                "num_hidden_layers": 1,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "intermediate_size": 48,
                "max_position_embeddings": 256,
                "rms_norm_eps": 1e-5,
                "rope_theta": 10000.0,
            }
        )
    )
    cfg = model_config_from_dir(tmp_path)
    assert (cfg.hidden, cfg.n_layers, cfg.n_kv_heads, cfg.head_dim) == (32, 1, 2, 8)
    with pytest.raises(ValueError, match="cannot read a model shape"):
        model_config_from_dir(tmp_path / "missing")
    assert cli_main(["profile", "--model", str(tmp_path / "missing"), "--quiet"]) == 2


def test_cost_model_check_benchmark_smoke(tmp_path: Path) -> None:
    import subprocess
    import sys

    prof = tmp_path / "p.json"
    assert (
        cli_main(["profile", "--grid", "small", "--repeats", "1", "--quiet", "--out", str(prof)])
        == 0
    )
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run(
        [sys.executable, str(root / "benchmarks" / "cost_model_check.py"), "--gen", "3",
         "--profile", str(prof)],
        capture_output=True, text=True, timeout=300, check=True,
    ).stdout  # fmt: skip
    assert "### whole --gen 3 runs" in out and "gate off, predicted (modeled)" in out
    assert "| all passes |" in out
