"""Shared helpers: run `phantom` as a user would, in a subprocess.

Interception must be installed before torch is imported, so anything that needs the fake
CUDA device runs in its own process through the real CLI.

Note [Test isolation]
~~~~~~~~~~~~~~~~~~~~~
phantom keeps state between runs in its cache directory ($PHANTOM_CACHE_DIR, by default
~/.cache/phantom): the native library and this machine's host-time calibration. The suite
never reads or writes the user's copy. At the start of a session (in the controller, before
pytest-xdist starts its workers, which inherit the environment) a seed directory is made:
the native library is built into it and `phantom calibrate` measures this machine once, as a
user would. Every test then gets an empty cache directory of its own holding a read-only link
to the library and a copy of the calibration, so what one test writes no other test sees
(module- and session-scoped fixtures, set up before it, share one such directory per process).
Set PHANTOM_TEST_SEED_CACHE to a directory prepared the same way to skip the ~40 s set-up.

Note [Expected skips]
~~~~~~~~~~~~~~~~~~~~~
Every dependency the tests use is in the `test` extra, so a skip usually means something is
broken (an import error inside DeepSpeed turned into a module skip, no Chromium for the HTML
test). tests/expected_skips.txt lists the skips a CPU-only machine legitimately has; with
PHANTOM_STRICT_SKIPS=1 (set by .ci/run) any other skip fails the run at the end.
"""
from __future__ import annotations

import contextlib
import json
import shutil
import signal
import tempfile
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from phantom.native.build import cache_dir, library_path  # imports no torch

REPO = Path(__file__).resolve().parents[1]


def run_phantom(args: list[str], cwd: Path | None = None, timeout: int = 600,
                env: dict | None = None) -> subprocess.CompletedProcess:
    """`phantom ARGS` in a subprocess, in a process group of its own that is killed if the call
    times out or the test is interrupted (pytest-timeout). Its ranks run in sessions of their
    own and end with it (phantom/launcher/lifetime.py)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    command = [sys.executable, "-m", "phantom.cli", *args]
    with subprocess.Popen(command, cwd=cwd or REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, env=full_env, start_new_session=True) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.communicate(timeout=30)
            raise
    return subprocess.CompletedProcess(command, proc.returncode, stdout, stderr)


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


# -- isolation (Note [Test isolation]) --------------------------------------------------------
SEED_ENV = "PHANTOM_TEST_SEED_CACHE"


def prepare_seed_cache() -> Path:
    """Build the native library and calibrate this machine into a fresh directory."""
    seed = Path(tempfile.mkdtemp(prefix="phantom-test-cache-"))
    env = {**os.environ, "PHANTOM_CACHE_DIR": str(seed)}
    # The library's file name pins its source and torch (native.build.library_path), so an
    # identical build in the user's cache is copied instead of compiled again; nothing else is.
    user_library = library_path(cache_dir())
    if user_library.is_file():
        shutil.copyfile(user_library, seed / user_library.name)
    build = subprocess.run([sys.executable, "-c", "from phantom.native.build import build_fake_cuda; "
                            "print(build_fake_cuda())"], env=env, capture_output=True, text=True)
    if build.returncode != 0:
        raise pytest.UsageError(f"could not build phantom's native library for the tests:\n{build.stderr}")
    # --force: a calibration measured while another process is busy is still this machine's,
    # only slower; tests that compare times leave host time out (--host-time off) or bound
    # it by what a real run's host side may take.
    calibrate = subprocess.run([sys.executable, "-m", "phantom.cli", "calibrate", "--force"],
                               env=env, capture_output=True, text=True)
    if calibrate.returncode != 0:
        raise pytest.UsageError(f"`phantom calibrate` failed before the tests:\n{calibrate.stderr}")
    for item in seed.iterdir():
        item.chmod(0o444)
    return seed


def _fill_from_seed(cache: Path) -> Path:
    """A read-only link to the seed's native library and a copy of its calibration."""
    seed = Path(os.environ[SEED_ENV])
    for item in seed.iterdir():
        if item.suffix == ".so":
            (cache / item.name).symlink_to(item)
        else:
            shutil.copyfile(item, cache / item.name)
    return cache


def _check_seed(seed: Path) -> None:
    """A seed given in PHANTOM_TEST_SEED_CACHE must hold what prepare_seed_cache makes."""
    needed = (library_path(seed), seed / "host_calibration.json")
    missing = [path.name for path in needed if not path.is_file()]
    if missing:
        raise pytest.UsageError(f"{SEED_ENV}={seed} lacks {', '.join(missing)} (for this torch): unset "
                                "it to have the tests prepare one, or see docs/testing.md")


def pytest_configure(config: pytest.Config) -> None:
    # The seed: made once, in the controller (a pytest-xdist worker inherits it through the
    # environment) unless given.
    if not hasattr(config, "workerinput"):
        if os.environ.get(SEED_ENV):
            _check_seed(Path(os.environ[SEED_ENV]))
        else:
            seed = prepare_seed_cache()
            os.environ[SEED_ENV] = str(seed)
            config._phantom_seed_cache = seed  # removed at the end of the session
    # This process's cache, for what runs outside a test's own (module- and session-scoped
    # fixtures run before the per-test fixture below is set up).
    config._phantom_user_cache = os.environ.get("PHANTOM_CACHE_DIR")
    config._phantom_process_cache = _fill_from_seed(Path(tempfile.mkdtemp(prefix="phantom-test-cache-")))
    os.environ["PHANTOM_CACHE_DIR"] = str(config._phantom_process_cache)


def pytest_unconfigure(config: pytest.Config) -> None:
    process_cache = getattr(config, "_phantom_process_cache", None)
    if process_cache is not None:
        shutil.rmtree(process_cache, ignore_errors=True)
        if config._phantom_user_cache is None:
            os.environ.pop("PHANTOM_CACHE_DIR", None)
        else:
            os.environ["PHANTOM_CACHE_DIR"] = config._phantom_user_cache
    seed = getattr(config, "_phantom_seed_cache", None)
    if seed is not None:
        shutil.rmtree(seed, ignore_errors=True)
        os.environ.pop(SEED_ENV, None)


@pytest.fixture(autouse=True)
def phantom_cache_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's own $PHANTOM_CACHE_DIR, filled from the seed (Note [Test isolation])."""
    cache = _fill_from_seed(tmp_path_factory.mktemp("phantom-cache"))
    monkeypatch.setenv("PHANTOM_CACHE_DIR", str(cache))
    return cache


# -- skips (Note [Expected skips]) ------------------------------------------------------------
EXPECTED_SKIPS = Path(__file__).with_name("expected_skips.txt")


def _expected_skips() -> list[tuple[str, str]]:
    """(test id prefix, reason substring) pairs from tests/expected_skips.txt."""
    rules = []
    for line in EXPECTED_SKIPS.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            test, _, reason = line.partition("|")
            rules.append((test.strip(), reason.strip()))
    return rules


def _unexpected_skips(stats: dict) -> list[str]:
    rules = _expected_skips()
    unexpected = []
    for report in stats.get("skipped", []):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        if not any(report.nodeid.startswith(test) and words in reason for test, words in rules):
            unexpected.append(f"{report.nodeid}: {reason}")
    return unexpected


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # Runs inside the terminal reporter's own sessionfinish, before its summary is printed.
    if hasattr(session.config, "workerinput"):
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    unexpected = _unexpected_skips(reporter.stats) if reporter is not None else []
    session.config._phantom_unexpected_skips = unexpected
    if unexpected and os.environ.get("PHANTOM_STRICT_SKIPS") == "1" and exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    unexpected = getattr(config, "_phantom_unexpected_skips", [])
    if unexpected:
        strict = os.environ.get("PHANTOM_STRICT_SKIPS") == "1"
        terminalreporter.section("unexpected skips" + (" (PHANTOM_STRICT_SKIPS=1: the run fails)" if strict else ""))
        for line in unexpected:
            terminalreporter.line(line)
