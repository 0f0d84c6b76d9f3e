"""Every bad input of issue 26, per command: one line naming the value, exit 2, before work.

Each row is a command line (``{tmp}`` is a scratch directory holding the files
the row needs) and the text the one error line must contain. A row refused
after any work would have written ``--dump-trace``'s file, printed to stdout or
taken long; none may. The twins at the bottom are good command lines next to
the bad ones: the same checks let them through.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from densegate.cli.main import build_parser, main

PROFILE = Path(__file__).resolve().parent.parent / "benchmarks" / "profiles" / "cpu.json"


def _profile(edit: str) -> str:
    """The shipped CPU profile, broken one way (its JSON text, for ``{tmp}/p.json``)."""
    d = json.loads(PROFILE.read_text())
    coefs = d["model"]["coefficients_ms"]["prefill"]
    if edit == "list":
        return json.dumps([d])
    if edit == "string":
        coefs[1] = "fast"
    elif edit == "negative":
        coefs[0] = -1e6
    elif edit == "nan":
        coefs[0] = math.nan
    elif edit == "sample":
        d["samples"][0] = ["prefill", [1, 2], 3.0]
    return json.dumps(d)


TRACE_3E8 = json.dumps([{"arrival_pass": 0, "prompt_len": 300_000_000, "output_len": 5}])
CONFORM_NONE = "def gate(config):\n    return None\n"

# (argv, {file name under {tmp}: text or bytes}, what the one line must say)
CASES: dict[str, tuple[list[str], dict[str, str | bytes], str]] = {
    # -- run ---------------------------------------------------------------------------
    "run trace 3e8": (
        ["run", "--trace", "{tmp}/t.json"],
        {"t.json": TRACE_3E8},
        "entry 0: prompt_len + output_len must be <= max_model_len (2048), got 300000000 + 5",
    ),
    "run trace not utf-8": (
        ["run", "--trace", "{tmp}/t.json"],
        {"t.json": b"\xff\xfe[]"},
        "t.json: not UTF-8 text",
    ),
    "run trace over the kv cache": (
        ["run", "--requests", "4", "--num-blocks", "1", "--block-size", "1", "--runner", "null"],
        {},
        "the workload entry 0: needs",
    ),
    "run device tpu": (["run", "--device", "tpu"], {}, "cpu, cuda or cuda:N, got 'tpu'"),
    "run rate inf": (["run", "--rate", "inf"], {}, "--rate: the value must be finite, got inf"),
    "run requests huge": (
        ["run", "--gen", "99999999999999999999"],
        {},
        "--gen: the value must be <= 1000000, got 99999999999999999999",
    ),
    "run max-model-len 1": (["run", "--max-model-len", "1"], {}, "must be >= 2, got 1"),
    "run prompt with requests": (
        ["run", "--prompt", "hi", "--requests", "5"],
        {},
        "not with --requests",
    ),
    "run prompt with trace": (
        ["run", "--prompt-ids", "1 2", "--trace", "{tmp}/t.json"],
        {"t.json": "[]"},
        "not with --trace",
    ),
    "run prompt with seed": (["run", "--prompt", "hi", "--seed", "3"], {}, "not with --seed"),
    "run prompt with runner null": (
        ["run", "--prompt", "hi", "--runner", "null"],
        {},
        "not with --runner null",
    ),
    "run prompt with dp": (["run", "--prompt", "hi", "--dp", "2"], {}, "not with --dp"),
    "bench device with the null runner": (
        ["bench", "--runner", "null", "--device", "cuda"],
        {},
        "--device cuda is for --runner torch",
    ),
    "run device with the null runner": (
        ["run", "--runner", "null", "--device", "cuda", "--requests", "3"],
        {},
        "--device is for the torch runner: not with --runner null",
    ),
    "run dtype with the null runner": (
        ["run", "--runner", "null", "--dtype", "float16", "--requests", "3"],
        {},
        "--dtype is for the torch runner",
    ),
    "run threads with the null runner": (
        ["run", "--runner", "null", "--threads", "2", "--dp", "2", "--requests", "3"],
        {},
        "--threads is for the torch runner",
    ),
    "run more local ranks than the cores can hold": (
        ["run", "--dp", "99999", "--requests", "4"],
        {},
        "must be <=",
    ),
    "run router without dp": (
        ["run", "--requests", "3", "--router", "least-loaded"],
        {},
        "--router is for a data-parallel run",
    ),
    "run rounds without dp": (["run", "--requests", "3", "--rounds", "1"], {}, "--rounds is for"),
    "run dp timeout without dp": (
        ["run", "--requests", "3", "--dp-timeout", "3"],
        {},
        "--dp-timeout is for a data-parallel run",
    ),
    "run model with runner null": (
        ["run", "--model", "{tmp}", "--runner", "null"],
        {},
        "--model runs the torch runner: not with --runner null",
    ),
    "run max-tokens without a prompt": (["run", "--max-tokens", "5"], {}, "--max-tokens is for"),
    "run stop id without a prompt": (
        ["run", "--stop-token-id", "9"],
        {},
        "--stop-token-id is for",
    ),
    "run rate with a trace": (
        ["run", "--trace", "{tmp}/t.json", "--rate", "2"],
        {"t.json": "[]"},
        "--rate is for a generated workload",
    ),
    "run dump-trace at a directory": (
        ["run", "--dump-trace", "{tmp}"],
        {},
        "is a directory, not a file",
    ),
    "run dump-trace in a missing folder": (
        ["run", "--dump-trace", "{tmp}/no/t.json"],
        {},
        "cannot be written",
    ),
    # -- bench -------------------------------------------------------------------------
    "bench device tpu": (["bench", "--device", "tpu"], {}, "got 'tpu'"),
    "bench threads -1": (["bench", "--threads", "-1"], {}, "--threads: the value must be >= 0"),
    "bench plot at a file": (["bench", "--plot", "{tmp}/f"], {"f": "x"}, "is not a directory"),
    "bench plot under a file": (
        ["bench", "--plot", "{tmp}/f/sub"],
        {"f": "x"},
        "f/sub' cannot be created",
    ),
    "bench requests huge": (["bench", "--requests", "10000000"], {}, "must be <= 1000000"),
    "bench cost a list": (
        ["bench", "--cost", "{tmp}/p.json"],
        {"p.json": _profile("list")},
        "p.json: a profile is a JSON object, got a list",
    ),
    "bench cost a string coefficient": (
        ["bench", "--cost", "{tmp}/p.json"],
        {"p.json": _profile("string")},
        "coefficient prefill_tokens must be a number, got 'fast'",
    ),
    "bench cost negative": (
        ["bench", "--cost", "{tmp}/p.json"],
        {"p.json": _profile("negative")},
        "coefficient base must be >= 0.0, got -1000000.0",
    ),
    "bench cost a bad sample": (
        ["bench", "--cost", "{tmp}/p.json"],
        {"p.json": _profile("sample")},
        "PassWork needs a list of 6 counts, got [1, 2]",
    ),
    # -- tune --------------------------------------------------------------------------
    "tune cost nan": (
        ["tune", "--cost", "{tmp}/p.json"],
        {"p.json": _profile("nan")},
        "coefficient base must be finite, got nan",
    ),
    "tune cost not utf-8": (
        ["tune", "--cost", "{tmp}/p.json"],
        {"p.json": b"\xff\xfe{}"},
        "p.json: not UTF-8 text",
    ),
    "tune requests huge": (
        ["tune", "--cost", "roofline:H200", "--requests", "10000000"],
        {},
        "must be <= 1000000",
    ),
    # -- profile -----------------------------------------------------------------------
    "profile device tpu": (["profile", "--device", "tpu"], {}, "got 'tpu'"),
    "profile collective nan": (["profile", "--collective-ms", "nan"], {}, "finite, got nan"),
    "profile out in a missing folder": (
        ["profile", "--out", "{tmp}/no/p.json"],
        {},
        "no/p.json' cannot be written",
    ),
    "profile out at a directory": (["profile", "--out", "{tmp}"], {}, "is a directory"),
    "profile max-model-len 1": (["profile", "--max-model-len", "1"], {}, "must be >= 2"),
    # -- conform and prove -------------------------------------------------------------
    "conform syntax error": (
        ["conform", "broken_syntax_26:gate"],
        {"broken_syntax_26.py": "def gate(:\n"},
        "importing broken_syntax_26 raised SyntaxError: invalid syntax (broken_syntax_26.py",
    ),
    "conform factory returning None": (
        ["conform", "returns_none_26:gate"],
        {"returns_none_26.py": CONFORM_NONE},
        "returns_none_26:gate returned None: it must return a fresh gate",
    ),
    "conform prove factory returning None": (
        ["conform", "--prove", "returns_none_26b:gate"],
        {"returns_none_26b.py": CONFORM_NONE},
        "returned None",
    ),
    "conform max-examples huge": (
        ["conform", "--max-examples", "99999999999999"],
        {},
        "--max-examples: the value must be <= 10000, got 99999999999999",
    ),
    "prove jobs -1": (["prove", "--jobs", "-1"], {}, "--jobs: the value must be >= 0, got -1"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_one_line_naming_it_and_exit_2(
    case: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    argv, files, needle = CASES[case]
    for name, text in files.items():
        path = tmp_path / name
        path.write_bytes(text) if isinstance(text, bytes) else path.write_text(text)
    monkeypatch.chdir(tmp_path)  # conform imports its target from the working directory
    args = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    dump = tmp_path / "dumped.json"
    if args[0] == "run" and "--dump-trace" not in args:
        args += ["--dump-trace", str(dump)]
    assert main(args) == 2
    out = capsys.readouterr()
    assert out.out == "", out.out
    assert out.err.count("\n") == 1 and needle in out.err, out.err
    assert not dump.exists()  # refused before any work


# -- the twins: the good values beside the bad ones pass the same checks -------------------
@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--device", "cuda:1", "--rate", "2", "--max-model-len", "2"],
        ["run", "--prompt", "hi", "--max-tokens", "5", "--stop-token-id", "9", "--model", "d"],
        ["bench", "--device", "cuda", "--threads", "0", "--plot", "{tmp}/new/plots"],
        ["bench", "--requests", "1000000"],
        ["profile", "--out", "{tmp}/p.json", "--max-model-len", "2", "--collective-ms", "0"],
        ["conform", "--max-examples", "10000"],
        ["prove", "--jobs", "0"],
    ],
)
def test_the_good_values_next_to_them_parse(argv: list[str], tmp_path: Path) -> None:
    args = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    build_parser([args[0]]).parse_args(args)
    assert not (tmp_path / "new").exists()  # checking an output path creates nothing


def test_a_good_trace_and_plot_directory_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The twin of the trace rows: a trace that fits runs, and its dump is written."""
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps([{"arrival_pass": 0, "prompt_len": 2000, "output_len": 48}]))
    dump = tmp_path / "d.json"
    argv = ["run", "--trace", str(trace), "--runner", "null", "--dump-trace", str(dump), "--json"]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["finished"] == 1 and dump.exists()


def test_a_good_module_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The twin of the conform rows: a factory that builds a gate gets a report, not exit 2."""
    (tmp_path / "good_gate_26.py").write_text(
        "from densegate.impl.gate import PrefillGate\n\ndef gate(config):\n"
        "    return PrefillGate(config)\n"
    )
    monkeypatch.chdir(tmp_path)
    assert main(["conform", "good_gate_26:gate", "--max-examples", "5", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["conforms"] is True
