"""Shared helpers: run `phantom` as a user would, in a subprocess.

Interception must be installed before torch is imported, so anything that needs the fake
CUDA device runs in its own process through the real CLI.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def run_phantom(args: list[str], cwd: Path | None = None, timeout: int = 600,
                env: dict | None = None) -> subprocess.CompletedProcess:
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "phantom.cli", *args],
        cwd=cwd or REPO, capture_output=True, text=True, timeout=timeout, env=full_env,
    )


@pytest.fixture
def script(tmp_path: Path):
    """Write a script from dedented text and return its path."""
    def make(text: str, name: str = "script.py") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text))
        return path
    return make


@pytest.fixture
def run_script(script, tmp_path: Path):
    """Run a script text through `phantom run`; returns (CompletedProcess, report dict|None)."""
    def run(text: str, *options: str, args: tuple[str, ...] = ()) -> tuple[subprocess.CompletedProcess, dict | None]:
        path = script(text)
        report = tmp_path / "report.json"
        proc = run_phantom(["run", "--report", str(report), *options, str(path), *args],
                           cwd=tmp_path)
        data = json.loads(report.read_text()) if report.exists() else None
        return proc, data
    return run
