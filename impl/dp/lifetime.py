"""The launcher's children die with it, and a Ctrl-C stops the launcher alone.

A SIGKILL of ``densegate run --dp N`` runs no cleanup, so its children must notice
the death themselves. On Linux each asks the kernel (``prctl(PR_SET_PDEATHSIG)``) for
a SIGKILL when its parent dies: the forkserver's parent is the launcher and every
rank's is the forkserver, so the launcher's death kills the server, whose death
kills the ranks; the resource tracker then exits by itself, as nobody holds its
pipe any more. Without prctl (not Linux) nothing is armed, and a rank ends only when
its next call to the store, which lived in the launcher, fails.

A terminal's Ctrl-C reaches its whole foreground process group, every rank included,
and each printed a ``KeyboardInterrupt`` traceback. The ranks ignore SIGINT instead
(the forkserver gives the ranks it forks its own disposition from before it started
serving, so it is set here, on import, among the server's preloads) and the
launcher stops them itself (``densegate.impl.dp.launch``).

The server learns it is the launcher's from ``LAUNCHER_ENV`` (the launcher's pid),
set only while the launcher starts its processes.
"""

from __future__ import annotations

import ctypes
import os
import signal

__all__ = ["ARMED_IN", "LAUNCHER_ENV", "arm_rank", "die_with_parent"]

LAUNCHER_ENV = "DENSEGATE_DP_LAUNCHER"
_PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int) -> bool:
    """Have the kernel SIGKILL this process when its parent, ``parent``, dies; if it has
    died already, exit now. False where there is no ``prctl``."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return False
    if prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
        return False
    if os.getppid() != parent:  # it died before the request took effect
        os._exit(1)
    return True


def _on_import() -> int | None:
    """In a process the launcher started itself (its forkserver, or a rank where ranks
    are spawned): ignore SIGINT and die with the launcher; the pid armed, or None."""
    launcher = os.environ.get(LAUNCHER_ENV, "")
    if not launcher.isdigit() or os.getppid() != int(launcher):
        return None
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent(int(launcher))
    return os.getpid()


ARMED_IN = _on_import()
"""The process this module armed on import: the forkserver, whose forks inherit the value."""


def arm_rank() -> None:
    """In a rank, first thing: ignore SIGINT and die with the process that started it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if os.getpid() != ARMED_IN:  # forked by the server (ARMED_IN), or by something else
        die_with_parent(ARMED_IN or os.getppid())
