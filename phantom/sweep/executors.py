"""Where a sweep's points run: `phantom run` subprocesses here (LocalPoints), or Ray tasks
(phantom/sweep/ray_tasks.py). Both are called as `execute(PointCall)` and answer a
`PointOutput`; `stop()` ends what runs (Ctrl-C)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from phantom.launcher.lifetime import started_by_me

RUN_COMMAND = [sys.executable, "-m", "phantom.cli", "run"]


@dataclass
class PointCall:
    """One `phantom run` of a point."""
    run_args: list[str]
    env: dict[str, str]
    files: dict[str, str]
    """Config copies to write first, by path."""
    report_path: str
    cwd: str
    """The directory the sweep runs in: relative paths in the command are from there."""
    ship: dict[str, bytes] = field(default_factory=dict)
    """Files the run reads that another node may lack (a host profile), by path."""
    bring_back: str | None = None
    """A directory the run writes (a saved host profile) whose files come back."""


@dataclass
class PointOutput:
    exit_code: int
    stdout: str
    stderr: str
    report: str | None
    """The run report's text, or None when the run wrote none."""
    brought: dict[str, bytes] = field(default_factory=dict)


class Executor(Protocol):
    def __call__(self, call: PointCall) -> PointOutput | None: ...
    def stop(self) -> None: ...


class Stopped(Exception):
    """The sweep is stopping: the point did not run (or was killed)."""


def run_point_process(call: PointCall, on_start=None) -> PointOutput:
    """Run `phantom run` for one point to its end, in a process group of its own that dies with
    this process (launcher/lifetime.py); `on_start(proc)` is told the process once it runs."""
    for path, data in call.ship.items():
        target = Path(path)
        if not target.exists() or target.read_bytes() != data:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
    for path, text in call.files.items():
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text)
    report = Path(call.report_path)
    report.parent.mkdir(parents=True, exist_ok=True)
    report.unlink(missing_ok=True)
    proc = subprocess.Popen(RUN_COMMAND + ["--report", str(report)] + call.run_args,
                            env=started_by_me({**os.environ, **call.env}), cwd=call.cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        if on_start is not None:
            on_start(proc)
        out, err = proc.communicate()
    except BaseException:
        kill_group(proc)
        raise
    brought = {}
    if call.bring_back and Path(call.bring_back).is_dir():
        brought = {str(f): f.read_bytes() for f in sorted(Path(call.bring_back).iterdir())}
    return PointOutput(proc.returncode, out, err, report.read_text() if report.exists() else None,
                       brought)


def kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


class LocalPoints:
    """Runs points as subprocesses here; `stop` kills the running ones and starts no more."""

    def __init__(self) -> None:
        self._live: set[subprocess.Popen] = set()
        self._lock = threading.Lock()
        self._stopping = False

    def __call__(self, call: PointCall) -> PointOutput:
        try:
            return run_point_process(call, self._started)
        finally:
            with self._lock:
                self._live = {p for p in self._live if p.poll() is None}

    def _started(self, proc: subprocess.Popen) -> None:
        with self._lock:
            if self._stopping:
                kill_group(proc)
                raise Stopped()
            self._live.add(proc)

    def stop(self) -> None:
        with self._lock:
            self._stopping = True
            live = list(self._live)
        for proc in live:
            kill_group(proc)
