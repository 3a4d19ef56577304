"""A rank process ends when the process that started it does, even one killed outright.

The launcher stops its ranks itself when it can (a failure, Ctrl-C, SIGTERM); SIGKILL, the
kernel's OOM killer included, leaves it no time to. So every rank asks the kernel for SIGKILL
when its parent ends (Linux PR_SET_PDEATHSIG): the fork server, the launcher (ranks started
without the fork server) or a Ray actor. The fork server itself exits when its connection to
the launcher closes.
"""
from __future__ import annotations

import ctypes
import os
import signal

PARENT_PID_ENV = "PHANTOM_PARENT_PID"
"""Set by a parent that starts a rank as a new program: its own process id."""

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> None:
    """SIGKILL this process when `parent_pid`, its parent, ends; exit now if it already has
    (the kernel's request only covers a parent still alive when it is made)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:  # no C library to ask (not Linux): the launcher stops ranks itself
        return
    if not hasattr(libc, "prctl"):
        return
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL) != 0:
        return  # refused (not Linux): as above
    if os.getppid() != parent_pid:
        os._exit(1)


def started_by_me(env: dict[str, str]) -> dict[str, str]:
    """The environment for a rank this process starts as a new program: it names this process
    as the one the rank dies with (die_with_starter)."""
    return {**env, PARENT_PID_ENV: str(os.getpid())}


def die_with_starter() -> None:
    """die_with_parent for a rank started as a new program, whose parent named itself in
    PARENT_PID_ENV (a forked rank calls die_with_parent directly)."""
    parent = os.environ.pop(PARENT_PID_ENV, None)
    if parent is not None:
        die_with_parent(int(parent))
