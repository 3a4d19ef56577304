"""Process helpers for the tests that start runs and clusters: what is left of a run, and a
private local Ray cluster stopped without touching anybody else's."""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

import pytest

from phantom.launcher.launch import free_port


def _pids() -> list[int]:
    return [int(pid) for pid in os.listdir("/proc") if pid.isdigit()]


def _is_zombie(pid: int) -> bool:
    """Zombies are dead: their table entry is the parent's to reap."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        return f.read().rsplit(b")", 1)[1].split()[0] == b"Z"


def leftovers(marker: Path) -> list[str]:
    """Live processes of a run started in directory `marker` ("pid: command line"): the
    launcher and the fork server run there, and every rank's environment carries the
    script's path (in its run configuration), wherever it runs."""
    found = []
    for pid in _pids():
        if pid == os.getpid():
            continue
        try:
            if _is_zombie(pid):
                continue
            cwd = os.readlink(f"/proc/{pid}/cwd")
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ = f.read()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if cwd == str(marker) or str(marker).encode() in environ:
            found.append(f"{pid}: {cmdline}")
    return found


def assert_no_leftovers(marker: Path) -> None:
    """Nothing of the run started in `marker` is alive; what is, is killed before failing."""
    deadline = time.monotonic() + 5  # a killed process may take a moment to leave the table
    while leftovers(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = leftovers(marker)
    for line in left:
        with contextlib.suppress(OSError):
            os.kill(int(line.split(":", 1)[0]), signal.SIGKILL)
    assert left == []


def kill_run(proc: subprocess.Popen, marker: Path) -> None:
    """After a failed test: kill `proc` and whatever of its run is left, then reap it."""
    pids = [int(line.split(":", 1)[0]) for line in leftovers(marker)]
    for pid in [proc.pid, *pids]:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.communicate(timeout=30)


# -- a private Ray cluster ----------------------------------------------------------------------
@contextlib.contextmanager
def ray_cluster() -> Iterator[tuple[str, dict[str, str]]]:
    """A private local Ray cluster (`ray start --head`): (address, environment to reach it).
    Stopped by its own processes, never by `ray stop`, which would stop every Ray cluster on
    the machine, another test worker's included."""
    ray_cli = shutil.which("ray", path=os.path.dirname(sys.executable)) or shutil.which("ray")
    if ray_cli is None:
        pytest.fail("the `ray` command is not on PATH (Ray is in the test extra)")
    port = free_port()
    # Token authentication (Ray >= 2.5x's default for `ray start`) is off for this private,
    # local test cluster; a user's cluster brings its own token (RAY_AUTH_TOKEN).
    env = {"RAY_AUTH_MODE": "disabled"}
    # A short directory: Ray puts its Unix sockets under it, and a socket path may not exceed
    # 107 bytes (pytest's basetemp under a longer TMPDIR made `ray start` fail).
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    try:
        # a session of its own: the cluster's processes form one process group to stop
        started = subprocess.run([ray_cli, "start", "--head", "--port", str(port), "--num-cpus", "2",
                                  "--include-dashboard=false", "--disable-usage-stats",
                                  f"--temp-dir={temp}"], env={**os.environ, **env}, capture_output=True,
                                 text=True, timeout=180, start_new_session=True)
        if started.returncode != 0:
            pytest.fail(f"`ray start` failed (exit {started.returncode}):\n{started.stderr[-3000:]}")
        yield f"127.0.0.1:{port}", env
    finally:
        _stop_ray_cluster(temp)
        shutil.rmtree(temp, ignore_errors=True)


def _stop_ray_cluster(temp: str) -> None:
    """Stop the process groups of the processes that name `temp` on their command line."""
    groups = set()
    for pid in _pids():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if temp.encode() in f.read():
                    groups.add(os.getpgid(pid))
        except OSError:
            continue
    groups.discard(os.getpgrp())  # never this test process's own
    for sig, wait_s in ((signal.SIGTERM, 3), (signal.SIGKILL, 10)):
        for group in groups:
            with contextlib.suppress(OSError):
                os.killpg(group, sig)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and any(_group_alive(g) for g in groups):
            time.sleep(0.2)


def _group_alive(group: int) -> bool:
    """Whether a process of `group` is alive (zombies answer signal 0 too)."""
    try:
        os.killpg(group, 0)
    except OSError:
        return False
    for pid in _pids():
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            if int(fields[2]) == group and fields[0] != b"Z":
                return True
        except (OSError, IndexError, ValueError):
            continue
    return False
