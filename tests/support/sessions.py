"""The processes of a session, read from ``/proc``: what a launcher left running.

A launcher started with ``start_new_session=True`` leads a session that all its
descendants join (none of them calls ``setsid``), so the session id still finds a
child after its parent died and it was re-parented to PID 1. A zombie is gone: it
runs nothing and holds nothing but its exit status.
"""

from __future__ import annotations

import pathlib
import time

__all__ = ["in_session", "wait_until_gone"]


def _stat(path: pathlib.Path) -> list[str] | None:
    try:
        text = (path / "stat").read_text()
    except OSError:  # gone while we looked
        return None
    return text[text.rindex(")") + 2 :].split()  # after "pid (comm) "; comm may hold spaces


def in_session(sid: int) -> dict[int, str]:
    """Live (non-zombie) processes of session ``sid``: pid -> its command line."""
    found: dict[int, str] = {}
    for p in pathlib.Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        fields = _stat(p)
        if fields is None or fields[0] in "ZX" or int(fields[3]) != sid:
            continue
        try:
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        found[int(p.name)] = cmd.strip()
    return found


def wait_until_gone(sid: int, deadline_s: float = 60.0) -> dict[int, str]:
    """Poll until session ``sid`` has no live process or ``deadline_s`` passes (a guard
    against a hang, not a figure); returns what is still there."""
    end = time.monotonic() + deadline_s
    while True:
        left = in_session(sid)
        if not left or time.monotonic() > end:
            return left
        time.sleep(0.05)
