"""Nothing outlives ``densegate run --dp N`` (issue 34, item 2), and Ctrl-C is one line.

A SIGKILL of the launcher used to leave the forkserver (torch loaded) and the
resource tracker running, re-parented to PID 1, and ranks with them; a Ctrl-C
printed a ``KeyboardInterrupt`` traceback per rank and no summary. Each test
starts the launcher as a real command in a session of its own, so its session id
finds every process it started, even re-parented ones, and polls until none is
left (the deadline guards against a hang; no figure is asserted).

Rank 1 hangs at the start of the second phase (``DENSEGATE_DP_CRASH``) and the
timeout is long, so after the first phase's reports the run stays put until it
is killed: killed then, a rank that outlived the launcher would sleep on.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch.distributed as dist

from tests.support.sessions import in_session, wait_until_gone

pytestmark = pytest.mark.skipif(
    not (sys.platform.startswith("linux") and dist.is_available() and dist.is_gloo_available()),
    reason="needs Linux (/proc, prctl) and torch.distributed gloo",
)

RUN = [
    *("run", "--dp", "2", "--runner", "null", "--gen", "12", "--rate", "1.5", "--json"),
    *("--max-num-seqs", "8", "--max-num-batched-tokens", "256", "--num-blocks", "160"),
    *("--max-model-len", "512", "--dp-timeout", "3600"),
]
DEADLINE_S = 120.0


def _start(out: Path, capture: bool = True) -> subprocess.Popen[str]:
    """The launcher; ``capture=False`` where an orphan holding the pipes would block a read."""
    env = dict(os.environ, DENSEGATE_DP_OUT=str(out), DENSEGATE_DP_CRASH="1:0:hang@1")
    pipe = subprocess.PIPE if capture else subprocess.DEVNULL
    return subprocess.Popen(
        [sys.executable, "-m", "densegate.cli.main", *RUN],
        env=env,
        stdout=pipe,
        stderr=pipe,
        text=True,
        start_new_session=True,  # a session of its own, as a terminal's job is
    )


def _wait_for(what: str, ready: object, proc: subprocess.Popen[str]) -> None:
    end = time.monotonic() + DEADLINE_S
    while not ready():  # type: ignore[operator]
        if proc.poll() is not None:
            raise AssertionError(f"the launcher exited ({proc.returncode}) before {what}")
        if time.monotonic() > end:
            proc.kill()
            raise AssertionError(f"no {what} within {DEADLINE_S} s")
        time.sleep(0.05)


def _first_phase_done(out: Path, proc: subprocess.Popen[str]) -> None:
    """Both ranks reported the first phase; rank 1 is about to hang in the second."""
    _wait_for("first phase", lambda: all((out / f"rank{r}.json").exists() for r in (0, 1)), proc)
    time.sleep(1.0)  # not a criterion: lets rank 1 reach its hang, where it would linger


def _ranks_forked(proc: subprocess.Popen[str]) -> None:
    """The forkserver and both ranks run (three processes with its command line)."""
    forked = lambda: sum("forkserver" in c for c in in_session(proc.pid).values()) >= 3  # noqa: E731
    _wait_for("ranks", forked, proc)


def _nothing_left(proc: subprocess.Popen[str]) -> None:
    left = wait_until_gone(proc.pid, DEADLINE_S)
    for pid in left:
        os.kill(pid, signal.SIGKILL)  # leave the machine as it was, then fail
    assert left == {}, f"still running after the launcher: {left}"


@pytest.mark.parametrize("when", ["start-up", "mid-run"])
def test_a_sigkill_of_the_launcher_takes_every_child_with_it(when: str, tmp_path: Path) -> None:
    proc = _start(tmp_path, capture=False)
    try:
        if when == "start-up":
            _ranks_forked(proc)
        else:
            _first_phase_done(tmp_path, proc)
        assert len(in_session(proc.pid)) >= 5  # launcher, tracker, forkserver, two ranks
        proc.kill()
        proc.wait()
    finally:
        proc.kill()
        _nothing_left(proc)


def test_ctrl_c_mid_run_is_one_line_a_partial_summary_and_130(tmp_path: Path) -> None:
    proc = _start(tmp_path)
    try:
        _first_phase_done(tmp_path, proc)
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal does: the whole group
        out, err = proc.communicate(timeout=DEADLINE_S)
    finally:
        proc.kill()
        _nothing_left(proc)
    assert proc.returncode == 130, err
    assert err.splitlines() == [
        "densegate run: interrupted (Ctrl-C): 2 ranks stopped after 1 of 3 phases; "
        "the summary covers that one"
    ]
    s = json.loads(out)
    assert s["interrupted"] and s["finished"] == 12 and s["unaccounted"] == []
    assert set(s["alignment"]) == {"coordinated"}  # the phase every rank had finished


def test_ctrl_c_at_start_up_is_one_line_and_130(tmp_path: Path) -> None:
    proc = _start(tmp_path)
    try:
        _ranks_forked(proc)
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=DEADLINE_S)
    finally:
        proc.kill()
        _nothing_left(proc)
    assert proc.returncode == 130, err
    (line,) = err.splitlines()
    assert line.startswith("densegate run: interrupted (Ctrl-C)"), line
    assert "Traceback" not in out + err
