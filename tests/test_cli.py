"""The `phantom` command's surface: presets, argument errors, process semantics."""
from __future__ import annotations

from conftest import REPO, run_phantom

from phantom.launcher.args import UsageError, parse_run_args
from phantom.hardware import get_gpu
from phantom.hardware.gpus import UnknownGPUError

import pytest


def test_gpus_lists_required_presets():
    proc = run_phantom(["gpus"])
    assert proc.returncode == 0
    for name in ("H100", "H200", "A100", "A100-40GB"):
        assert f"\n{name} " in proc.stdout
    assert "989" in proc.stdout and "3350" in proc.stdout  # H100 bf16 peak, HBM GB/s


def test_gpu_names_are_case_insensitive():
    assert get_gpu("h200").name == "H200"
    assert get_gpu("a100-40gb").memory_gib == pytest.approx(40.0)
    with pytest.raises(UnknownGPUError, match="H100, H200, A100, A100-40GB"):
        get_gpu("V100")


def test_unknown_gpu_is_a_clear_error(tmp_path):
    s = tmp_path / "s.py"
    s.write_text("print('hi')\n")
    proc = run_phantom(["run", "--gpu", "B300", str(s)])
    assert proc.returncode == 2
    assert "unknown GPU 'B300'" in proc.stderr and "H100" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_missing_script_is_a_clear_error():
    proc = run_phantom(["run", "no_such_script.py"])
    assert proc.returncode == 2
    assert "script not found: no_such_script.py" in proc.stderr


def test_a_leading_python_is_named_as_the_slip_it_is(tmp_path):
    s = tmp_path / "train.py"
    s.write_text("print('hi')\n")
    proc = run_phantom(["run", "--", "python", str(s), "--lr", "1"])
    assert proc.returncode == 2
    assert "drop 'python'" in proc.stderr and f"-- {s} --lr 1" in proc.stderr
    proc = run_phantom(["run", "--", "python3", "-m", "torchtitan.train", "--steps", "2"])
    assert proc.returncode == 2 and "run [options] -m torchtitan.train --steps 2`" in proc.stderr


@pytest.mark.parametrize("value", ["0", "-3", "1e9"])
def test_bad_vram_is_a_clear_error(tmp_path, value):
    s = tmp_path / "s.py"
    s.write_text("print('hi')\n")
    proc = run_phantom(["run", "--vram-gib", value, str(s)])
    assert proc.returncode == 2 and "--vram-gib must be a positive number" in proc.stderr


def test_script_args_are_not_taken_as_phantom_options(tmp_path):
    s = tmp_path / "s.py"
    s.write_text("")
    config = parse_run_args(["--gpu", "h200", "--", str(s), "--gpu", "x", "-m", "y"])
    assert config.gpu == "h200" and config.args == ["--gpu", "x", "-m", "y"]
    config = parse_run_args([str(s), "--steps", "3"])
    assert config.script == str(s) and config.args == ["--steps", "3"]
    config = parse_run_args(["-m", "pkg.mod", "--x", "1"])
    assert config.module == "pkg.mod" and config.args == ["--x", "1"]


def test_distributed_options_resolve_the_cluster(tmp_path):
    s = tmp_path / "s.py"
    s.write_text("")
    config = parse_run_args(["--nproc-per-node", "8", str(s)])
    assert config.distributed and config.world_size == 8 and config.gpu == "H100"
    config = parse_run_args(["--cluster", "h200-ib", "--nnodes", "2", str(s)])
    assert (config.nnodes, config.nproc_per_node, config.gpu) == (2, 8, "H200")
    assert not parse_run_args([str(s)]).distributed  # plain `phantom run` is `python`


@pytest.mark.parametrize("argv, message", [
    (["--nproc-per-node", "9"], "have 8 GPUs"),
    (["--nnodes", "2"], "single node without a network"),
    (["--cluster", "h100-xyz"], "h100-ib"),
    (["--nproc-per-node", "0"], ">= 1"),
])
def test_bad_cluster_options_are_clear_errors(tmp_path, argv, message):
    s = tmp_path / "s.py"
    s.write_text("")
    with pytest.raises(UsageError, match=message):
        parse_run_args([*argv, str(s)])


def test_clusters_lists_the_presets():
    proc = run_phantom(["clusters"])
    assert proc.returncode == 0
    for name in ("h100-ib", "h200-ib", "a100-ib", "nvlink-node"):
        assert name in proc.stdout


def test_argv_main_cwd_stdout_and_exit_code(run_script, tmp_path):
    proc, _ = run_script(
        """
        import os, sys
        print("argv", sys.argv[1:], __name__, os.getcwd())
        print("to stderr", file=sys.stderr)
        sys.exit(7)
        """,
        "--quiet", args=("a", "--b", "c"),
    )
    assert proc.returncode == 7
    assert f"argv ['a', '--b', 'c'] __main__ {tmp_path}" in proc.stdout
    assert "to stderr" in proc.stderr


@pytest.mark.parametrize("ranks", ["1", "2"])
def test_exit_runs_the_scripts_exit_hooks_and_keeps_its_files(run_script, tmp_path, ranks):
    """A rank process ends without the interpreter's teardown (bootstrap.exit_process: after a
    backward pass the autograd thread could abort it there), yet what a script relies on at
    exit still happens: its non-daemon threads finish, atexit handlers run, files it never
    closed keep what it wrote, and its exit code stands. On one rank and on two (the fork
    server's children)."""
    proc, _ = run_script(
        """
        import atexit, os, sys, threading, time, torch
        log = open(f"{sys.argv[1]}.{os.environ.get('RANK', '0')}", "w")  # never closed
        log.write("written, never closed\\n")
        x = torch.randn(64, 64, device="cuda", requires_grad=True)
        (x @ x).sum().backward()
        atexit.register(lambda: print("atexit ran", flush=True))
        threading.Thread(target=lambda: (time.sleep(0.3), print("thread finished", flush=True))).start()
        sys.exit(3)
        """,
        "--quiet", "--nproc-per-node", ranks, args=(str(tmp_path / "log"),),
    )
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert "thread finished" in proc.stdout and "atexit ran" in proc.stdout
    assert proc.stdout.index("thread finished") < proc.stdout.index("atexit ran")
    for rank in range(int(ranks)):
        assert (tmp_path / f"log.{rank}").read_text() == "written, never closed\n"
    assert "terminate called" not in proc.stderr


def test_script_exception_shows_its_traceback_and_exits_1(run_script):
    proc, _ = run_script(
        """
        def inner():
            raise ValueError("boom from the script")
        inner()
        """,
        "--quiet",
    )
    assert proc.returncode == 1
    assert "ValueError: boom from the script" in proc.stderr
    assert "in inner" in proc.stderr
    assert "bootstrap.py" not in proc.stderr and "runpy" not in proc.stderr


def test_a_distributed_script_without_a_launch_is_told_how_to_launch_it(run_script):
    proc, _ = run_script(
        """
        import os
        import torch.distributed as dist
        for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
            os.environ.pop(name, None)  # as from a shell: no torchrun around phantom
        dist.init_process_group("nccl")
        """,
        "--quiet",
    )
    assert proc.returncode == 1
    assert "expected, but not set" in proc.stderr  # torch's own error, as under python
    assert "phantom run --nproc-per-node N" in proc.stderr


def test_run_module(tmp_path):
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "train.py").write_text("import sys\nprint('module main', __name__, sys.argv[1:])\n")
    proc = run_phantom(["run", "--quiet", "-m", "mypkg.train", "--lr", "3"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "module main __main__ ['--lr', '3']" in proc.stdout


def test_no_db_leaves_the_shipped_database_out(tmp_path):
    s = tmp_path / "s.py"
    s.write_text("")
    assert parse_run_args([str(s)]).shipped_db
    assert not parse_run_args(["--no-db", str(s)]).shipped_db


def _start_forever(tmp_path, logged: bool, nproc: int = 0):
    """`phantom run` of a script that never ends, and its ranks' pids once they run."""
    import subprocess
    import sys
    import time

    script = tmp_path / "forever.py"
    script.write_text(f"import os, torch\nrank = os.environ.get('RANK', '0')\n"
                      f"open({str(tmp_path)!r} + f'/rank{{rank}}.pid', 'w').write(str(os.getpid()))\n"
                      "x = torch.ones(8, device='cuda')\nwhile True:\n    x = x + 1\n")
    options = ["--log-dir", str(tmp_path / "logs")] if logged else []
    options += ["--nproc-per-node", str(nproc)] if nproc else []
    proc = subprocess.Popen([sys.executable, "-m", "phantom.cli", "run", *options,
                             str(script)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    files = [tmp_path / f"rank{r}.pid" for r in range(max(nproc, 1))]
    deadline = time.time() + 120
    while not all(f.exists() and f.read_text() for f in files) and time.time() < deadline:
        time.sleep(0.2)
    assert all(f.exists() for f in files), "the ranks never started"
    return proc, [int(f.read_text()) for f in files]


def _gone(pid: int, within_s: float) -> bool:
    import os
    import time

    deadline = time.time() + within_s
    while time.time() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("logged, nproc", [(False, 0), (True, 0), (False, 2)])
@pytest.mark.parametrize("sig, status", [("SIGTERM", 143), ("SIGINT", 130)])
def test_a_signal_to_phantom_ends_the_ranks(tmp_path, logged, nproc, sig, status):
    """SIGTERM to `phantom run` (a scheduler's cancel, a CI timeout) ends the simulated ranks too
    (a one-process run's rank used to go on simulating, orphaned), with the shell's status for
    it; so does a SIGINT sent to phantom alone (not through the terminal's process group)."""
    import os
    import signal

    proc, ranks = _start_forever(tmp_path, logged, nproc)
    try:
        proc.send_signal(getattr(signal, sig))
        assert proc.wait(timeout=60) == status
        assert all(_gone(rank, within_s=5) for rank in ranks), "a rank outlived phantom"
    finally:
        proc.kill()
        for rank in ranks:
            if not _gone(rank, within_s=0.1):
                os.kill(rank, signal.SIGKILL)


# -- one source for options -------------------------------------------------------------------

def test_the_docs_option_table_is_the_generated_one():
    from phantom.launcher.args import options_markdown

    doc = (REPO / "docs" / "configuration.md").read_text()
    start = doc.index("\n", doc.index("<!-- Generated from phantom/config.py")) + 1
    committed = doc[start:doc.index("<!-- end of generated table -->")]
    assert committed == options_markdown(), (
        "docs/configuration.md's option table is stale: regenerate it with the command in the "
        "comment above it")


def test_options_with_a_value_are_read_from_the_parser():
    from phantom.launcher.args import RUN_OPTIONS_WITH_VALUE
    from phantom.config import option_fields

    flags = {f.metadata["flag"]: f for f in option_fields()}
    assert RUN_OPTIONS_WITH_VALUE == {flag for flag, f in flags.items() if f.type != "bool"}
    assert {"--gpu", "--db", "--trace-ranks", "-m"} <= RUN_OPTIONS_WITH_VALUE
    assert not {"--quiet", "--no-db"} & RUN_OPTIONS_WITH_VALUE


def test_no_options_give_the_config_defaults(tmp_path, monkeypatch):
    """Defaults are written once, on RunConfig: a run without options gets them, and the
    options whose default depends on others resolve to the same values on one GPU."""
    from dataclasses import replace

    from phantom.config import RunConfig

    s = tmp_path / "s.py"
    s.write_text("")
    # ranks aside: the CLI resolves `all` to the list of ranks that run
    assert parse_run_args([str(s), "--x"]) == replace(RunConfig(), script=str(s), args=["--x"], ranks="0")


def test_host_time_options_are_checked_together(tmp_path):
    s = tmp_path / "s.py"
    s.write_text("")
    (tmp_path / "prof").mkdir()
    config = parse_run_args(["--host-time", "counted", "--host-profile", str(tmp_path / "prof"), str(s)])
    assert config.host_time == "counted"
    for argv, words in ((["--host-time", "counted"], "--host-profile"),
                        (["--host-profile", str(tmp_path / "prof")], "only with --host-time counted"),
                        (["--host-time", "counted", "--host-profile", str(tmp_path / "none")], "no such directory"),
                        (["--host-time", "off", "--save-host-profile", str(tmp_path)], "measured")):
        with pytest.raises(UsageError, match=words):
            parse_run_args([*argv, str(s)])


def test_defaults_that_depend_on_other_options(tmp_path):
    s = tmp_path / "s.py"
    s.write_text("")
    assert parse_run_args(["--nproc-per-node", "8", "--quiet", str(s)]).ranks == "0,1,2,3,4,5,6,7"
    assert parse_run_args(["--cluster", "h100-ib", "--nnodes", "2", str(s)]).ranks == "auto"
    assert parse_run_args(["--cluster", "h100-ib", "--nnodes", "2", "--ranks", "0,8", str(s)]).ranks == "0,8"
    assert parse_run_args(["--cluster", "h200-ib", "--gpu", "H100", str(s)]).gpu == "H100"
    # --power-limit and --db are checked against the GPU the run simulates: the cluster's
    with pytest.raises(UsageError, match="A100 was never measured"):
        parse_run_args(["--cluster", "a100-ib", "--power-limit", "300", str(s)])
    from phantom.cost.db import shipped_db_path

    h200_db = str(shipped_db_path("H200"))
    assert parse_run_args(["--cluster", "h200-ib", "--db", h200_db, str(s)]).db_paths == [h200_db]
    assert parse_run_args(["--gpu", "h200", "--db", h200_db, str(s)]).db_paths == [h200_db]
    with pytest.raises(UsageError, match="expected 'H100'"):
        parse_run_args(["--cluster", "h100-ib", "--db", h200_db, str(s)])


def test_every_environment_variable_is_documented():
    """docs/configuration.md's table lists every PHANTOM_* variable the code, tests or CI use,
    and no other."""
    import re

    # C++ macros of phantom/native (compile-time, not environment) and an attribute of the
    # simulated Transformer Engine package.
    not_variables = {"PHANTOM_CUDA_BUILD", "PHANTOM_FAKE_DEVICE_SLOT", "PHANTOM_SIMULATED"}
    token = re.compile(r"(?<![A-Za-z0-9_])PHANTOM_[A-Z][A-Z0-9_]*")
    used = set()
    for path in [*(REPO / "phantom").rglob("*"), *(REPO / "tests").rglob("*.py"),
                 *(REPO / ".ci").rglob("*"), *(REPO / "examples").rglob("*.py")]:
        if path.is_file() and path.suffix in ("", ".py", ".cpp", ".sh", ".toml", ".json"):
            used |= set(token.findall(path.read_text(errors="replace")))
    used -= not_variables
    doc = (REPO / "docs" / "configuration.md").read_text()
    documented = set(re.findall(r"^\| `(PHANTOM_[A-Z0-9_]+)` \|", doc, re.M))
    assert used - documented == set(), "undocumented: add them to docs/configuration.md"
    assert documented - used == set(), "documented but used nowhere: remove them"
