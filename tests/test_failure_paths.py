"""Failure paths through the real CLI: every way a distributed run can go wrong ends it
within seconds, with a message that names the cause and the ranks, a defined exit status
(docs/distributed.md, 'Failures') and no process left behind.

Each run is bounded by `_run`'s timeout: a hang fails the test (and its processes are
killed) instead of blocking the suite.
"""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from processes import assert_no_leftovers, kill_run, ray_cluster

# A run that ends "within seconds": start-up of 4 forked ranks is 3-6 s on a loaded 2-core
# machine; a hang runs into this and fails.
RUN_TIMEOUT_S = 60


def _start(tmp_path: Path, args: list[str], env: dict | None = None) -> subprocess.Popen:
    """`phantom ARGS` in `tmp_path`, in a process group of its own (as a terminal's job)."""
    return subprocess.Popen([sys.executable, "-m", "phantom.cli", *args], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})}, start_new_session=True)


def _finish(proc: subprocess.Popen, tmp_path: Path,
            timeout: float = RUN_TIMEOUT_S) -> subprocess.CompletedProcess:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_run(proc, tmp_path)
        pytest.fail(f"the run did not end within {timeout} s")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _run(tmp_path: Path, text: str, *options: str, nproc: int = 4,
         name: str = "s.py") -> subprocess.CompletedProcess:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return _finish(_start(tmp_path, ["run", "--nproc-per-node", str(nproc), "--host-time", "off",
                                     *options, str(path)]), tmp_path)


def _no_traceback(run: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in run.stderr, run.stderr[-3000:]


# -- collective mismatches --------------------------------------------------------------------
# Rank 0 makes a different call from its peers at the script's line 5; the coordinator names
# the kind of mismatch, the ranks and both call sites. kind: (what the message says, the call,
# ranks); `g` is a group of ranks 0 and 1 on rank 0, of every rank on the others.
MISMATCHES = {
    "size": ("different sizes or dtypes",
             "dist.all_reduce(torch.ones(8 * (rank + 1), device='cuda'))", 2),
    "kind": ("different collectives",
             "dist.all_reduce(x) if rank == 0 else "
             "dist.all_gather_into_tensor(torch.empty(16, device='cuda'), x)", 2),
    "members": ("different member ranks", "dist.all_reduce(x, group=g)", 3),
    "root": ("different roots", "dist.broadcast(x, src=rank)", 2),
}


@pytest.mark.parametrize("kind", list(MISMATCHES))
def test_a_collective_mismatch_names_the_mismatch_and_the_ranks(tmp_path, kind):
    problem, call, nproc = MISMATCHES[kind]
    run = _run(tmp_path, f"""\
import torch, torch.distributed as dist
dist.init_process_group("nccl"); rank = dist.get_rank()
x = torch.ones(8, device="cuda")
g = dist.new_group([0, 1] if rank == 0 else list(range(dist.get_world_size())))
{call}
""", nproc=nproc, name="mm.py")
    assert run.returncode == 1, run.stderr[-3000:]
    assert f"phantom: error: collective mismatch ({problem})" in run.stderr, run.stderr[-3000:]
    assert "  rank 0: " in run.stderr and ("  rank 1: " in run.stderr or "  rank 2: " in run.stderr)
    # both call sites, in the launcher's message (not a wrapper's line inside a library)
    message = run.stderr.split("phantom: error: ", 1)[1]
    assert message.count("mm.py:5 (<module>)") == 2, run.stderr[-3000:]
    _no_traceback(run)


# -- one rank fails in a 4-rank run -----------------------------------------------------------
# Rank 2 fails at line 6 while ranks 0, 1 and 3 wait for it in an all-reduce. The run ends with
# rank 2's own message and its exit status (128 + N for signal N, as a shell reports it).
FAULTS = {
    "oom": ("torch.empty(200 * 2**30, dtype=torch.uint8, device='cuda')",
            1, "exit code 1", "CUDA out of memory"),
    "raise": ("raise ValueError('rank two broke')", 1, "exit code 1", "ValueError: rank two broke"),
    "sigkill": ("os.kill(os.getpid(), signal.SIGKILL)", 128 + signal.SIGKILL, "killed by SIGKILL", None),
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_failing_rank_ends_a_four_rank_run_with_its_message_and_status(tmp_path, fault):
    action, status, how, message = FAULTS[fault]
    run = _run(tmp_path, f"""\
import os, signal, torch, torch.distributed as dist
dist.init_process_group("nccl"); rank = dist.get_rank()
x = torch.ones(1024, device="cuda")
dist.all_reduce(x)
if rank == 2:
    {action}
dist.all_reduce(x)
print("rank", rank, "passed the all-reduce", flush=True)
""", name="fault.py")
    assert run.returncode == status, run.stderr[-3000:]
    assert f"phantom: rank 2 failed ({how}); stopping the other ranks." in run.stderr, run.stderr[-3000:]
    if message is not None:
        assert message in run.stderr  # rank 2's own output, shown by the launcher
        assert "fault.py\", line 6" in run.stderr
    # rank 0 (on the terminal) says where it was stopped, in one line; the only traceback
    # is rank 2's own
    assert "phantom: rank 0 was stopped in all_reduce at " in run.stderr, run.stderr[-3000:]
    assert run.stderr.count("Traceback") == (0 if message is None else 1), run.stderr[-3000:]
    assert "passed the all-reduce" not in run.stdout
    assert_no_leftovers(tmp_path)


# -- bad configuration files ------------------------------------------------------------------
# (file text, what the message must name after the file: the field and what was expected)
BAD_CLUSTERS = {
    "not_toml": ("gpu = H100\n", "not valid TOML"),
    "missing_gpu": ("nodes = 2\n", "gpu: missing; expected"),
    "unknown_gpu": ('gpu = "H900"\n', "gpu: expected one of"),
    "wrong_type": ('gpu = "H100"\ngpus_per_node = "eight"\n', "gpus_per_node: expected"),
    "unknown_key": ('gpu = "H100"\nnvlink_gbs = 450\n', "nvlink_gbs"),
}


@pytest.mark.parametrize("case", list(BAD_CLUSTERS))
def test_a_bad_cluster_file_is_a_clear_usage_error(tmp_path, case):
    text, expected = BAD_CLUSTERS[case]
    cluster = tmp_path / "my_cluster.toml"
    cluster.write_text(text)
    (tmp_path / "s.py").write_text("print('never runs')\n")
    run = _finish(_start(tmp_path, ["run", "--cluster", str(cluster), "s.py"]), tmp_path)
    assert run.returncode == 2, run.stderr[-3000:]
    line, = run.stderr.strip().splitlines()  # one line: no traceback
    assert line.startswith("phantom: error: ") and str(cluster) in line and expected in line, line
    assert "never runs" not in run.stdout


BAD_GPUS = {
    # --gpu takes a preset's name; a file's path is not one
    "gpu_option": (["--gpu", "my_gpu.toml"], "--gpu: unknown GPU 'my_gpu.toml'; known GPUs: H100"),
    # a kernel database is the measured spec of a GPU's kernels (--db)
    "db_not_json": (["--db", "kernels.json"], "--db: kernels.json: not JSON"),
}


@pytest.mark.parametrize("case", list(BAD_GPUS))
def test_a_bad_gpu_is_a_clear_usage_error(tmp_path, case):
    options, expected = BAD_GPUS[case]
    (tmp_path / "my_gpu.toml").write_text('name = "H900"\n')
    (tmp_path / "kernels.json").write_text('{"header": {"gpu": "H100"}, "rows": [')
    (tmp_path / "s.py").write_text("print('never runs')\n")
    run = _finish(_start(tmp_path, ["run", *options, "s.py"]), tmp_path)
    assert run.returncode == 2, run.stderr[-3000:]
    line, = run.stderr.strip().splitlines()
    assert line.startswith("phantom: error: ") and expected in line, line


# -- Ctrl-C and SIGTERM -----------------------------------------------------------------------
FOREVER = """\
import torch, torch.distributed as dist
dist.init_process_group("nccl")
x = torch.ones(8, device="cuda")
dist.all_reduce(x)
print("running", flush=True)
while True:
    dist.all_reduce(x)
"""


def _interrupt(tmp_path: Path, options: list[str], how: str, env: dict | None = None,
               start_timeout: float = RUN_TIMEOUT_S) -> subprocess.CompletedProcess:
    """Start FOREVER, wait until rank 0 runs, then Ctrl-C (SIGINT to the terminal's process
    group: phantom's) or `kill` (SIGTERM to phantom alone)."""
    path = tmp_path / "forever.py"
    path.write_text(FOREVER)
    proc = _start(tmp_path, ["run", *options, str(path)], env)
    try:
        _wait_for_line(proc, "running", start_timeout)
    except BaseException:
        kill_run(proc, tmp_path)
        raise
    if how == "SIGINT":
        os.killpg(proc.pid, signal.SIGINT)
    else:
        proc.send_signal(signal.SIGTERM)
    return _finish(proc, tmp_path, timeout=30)


def _wait_for_line(proc: subprocess.Popen, line: str, timeout: float) -> None:
    """Read the run's stdout until `line`. From the pipe's descriptor, unbuffered: a line
    already in a buffered reader's memory would never wake select again."""
    fd, seen = proc.stdout.fileno(), b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 1)
        if ready:
            chunk = os.read(fd, 65536)
            seen += chunk
            if (line + "\n").encode() in seen:
                return
            if not chunk:
                pytest.fail(f"the run ended before printing {line!r}:\n{proc.stderr.read()[-3000:]}")
    pytest.fail(f"the run printed no {line!r} within {timeout} s")


@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM"])
def test_an_interrupted_local_run_stops_every_rank(tmp_path, how):
    run = _interrupt(tmp_path, ["--nproc-per-node", "4", "--host-time", "off"], how)
    assert run.returncode == 128 + getattr(signal, how), run.stderr[-3000:]
    assert run.stderr.strip().splitlines() == ["phantom: interrupted; stopping all ranks"], run.stderr[-3000:]
    assert_no_leftovers(tmp_path)


# With the fork server (the default) a rank dies with the server; without it, with the launcher.
@pytest.mark.parametrize("fork_server", [True, False], ids=["fork-server", "no-fork-server"])
def test_ranks_end_on_their_own_when_phantom_itself_is_killed(tmp_path, fork_server):
    """SIGKILL to `phantom` (the OOM killer, `kill -9`) leaves it no time to stop the ranks:
    they end by themselves, a rank computing as well as ranks waiting in a collective."""
    path = tmp_path / "orphan.py"
    path.write_text(textwrap.dedent("""\
        import torch, torch.distributed as dist
        dist.init_process_group("nccl")
        x = torch.ones(8, device="cuda")
        dist.all_reduce(x)
        print("running", flush=True)
        while dist.get_rank() == 3:
            x = x * 2  # never reaches a collective
        dist.all_reduce(x)
    """))
    env = {} if fork_server else {"PHANTOM_NO_FORK_SERVER": "1"}
    proc = _start(tmp_path, ["run", "--nproc-per-node", "4", "--host-time", "off", str(path)], env)
    try:
        _wait_for_line(proc, "running", RUN_TIMEOUT_S)
        time.sleep(1)  # the others reach their all-reduce
    except BaseException:
        kill_run(proc, tmp_path)
        raise
    proc.kill()
    run = _finish(proc, tmp_path, timeout=30)  # the ranks hold its pipes open until they end
    assert_no_leftovers(tmp_path)
    assert "Traceback" not in run.stderr, run.stderr[-3000:]  # rank 0's: one line at most


# -- a script that never synchronises ---------------------------------------------------------
NEVER_SYNCS = """\
import json, os, time, torch
import torch.distributed as dist
dist.init_process_group("nccl")
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
t0 = time.perf_counter()
for _ in range(20):
    b = a @ a
dist.all_reduce(b, async_op=True)  # never waited on
print(json.dumps({"host_s": time.perf_counter() - t0}), flush=True)
"""


def test_a_script_that_never_synchronises_ends_with_its_gpu_work_counted(tmp_path):
    """The host clock runs ahead of the GPU: without a sync the script reads only its launch
    time, and the run's simulated time still ends when the queued GPU work does (docs/
    simulation.md, 'Time'; report `simulated_seconds`)."""
    path = tmp_path / "nosync.py"
    path.write_text(NEVER_SYNCS)
    report = tmp_path / "report.json"
    run = _finish(_start(tmp_path, ["run", "--nproc-per-node", "2", "--host-time", "off",
                                    "--gpu", "H100", "--report", str(report), str(path)]),
                  tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    host_s = json.loads(run.stdout.splitlines()[0])["host_s"]
    simulated_s = json.loads(report.read_text())["simulated_seconds"]
    # 20 GEMMs of 2 * 8192^3 FLOPs at no more than the H100's dense bf16 peak (989 TFLOP/s)
    gemm_floor_s = 20 * 2 * 8192 ** 3 / 989e12
    assert simulated_s >= gemm_floor_s
    assert host_s < gemm_floor_s / 10  # launches only: the GPU work is not waited for
    assert_no_leftovers(tmp_path)


# -- deadlocks --------------------------------------------------------------------------------
# Every rank waits in a collective whose peer waits in another group's: nothing can complete,
# and the coordinator says so instead of hanging. (ranks, the groups as `new_group` members and
# description, each rank's two calls (group indexes), and for each rank: its group in the
# message and the rank it waits for.)
DEADLOCKS = {
    # ranks 0 and 1 call the collectives of two groups in crossed order
    "two_groups": (2, "[dist.new_group([0, 1], group_desc='A'), dist.new_group([0, 1], group_desc='B')]",
                   {0: (0, 1), 1: (1, 0)}, [(0, "A", 1), (1, "B", 0)]),
    # a cycle: rank 0 waits in A for rank 1, which waits in B for rank 2, which waits in C for 0
    "three_group_cycle": (3, "[dist.new_group([0, 1], group_desc='A'), "
                             "dist.new_group([1, 2], group_desc='B'), "
                             "dist.new_group([0, 2], group_desc='C')]",
                          {0: (0, 2), 1: (1, 0), 2: (2, 1)}, [(0, "A", 1), (1, "B", 2), (2, "C", 0)]),
}


@pytest.mark.parametrize("case", list(DEADLOCKS))
def test_a_deadlock_across_groups_names_each_ranks_collective_and_group(tmp_path, case):
    nproc, groups, order, expected = DEADLOCKS[case]
    run = _run(tmp_path, f"""\
import torch, torch.distributed as dist
dist.init_process_group("nccl"); rank = dist.get_rank()
groups = {groups}
x = torch.ones(8, device="cuda")
first, second = {order}[rank]
dist.all_reduce(x, group=groups[first])
dist.all_reduce(x, group=groups[second])
""", nproc=nproc, name="cycle.py")
    assert run.returncode == 1, run.stderr[-3000:]
    assert "phantom: error: deadlock" in run.stderr, run.stderr[-3000:]
    for rank, group, peer in expected:
        assert (f"rank {rank}: all_reduce on group {group} " in run.stderr
                and f"cycle.py:6 (<module>) (waiting for rank(s) {peer})" in run.stderr), run.stderr[-3000:]
    _no_traceback(run)
    assert_no_leftovers(tmp_path)


# -- Ctrl-C and SIGTERM on Ray ----------------------------------------------------------------
def test_an_interrupted_ray_run_stops_every_rank(tmp_path):
    """The same on Ray: the launcher kills the rank actors it started (and their bootstrap
    processes with them) and says so in one line, not once per actor. Both signals in one
    test, so that the suite starts one Ray cluster for them, whichever worker runs it."""
    pytest.importorskip("ray", reason="Ray is in the test extra")
    with ray_cluster() as (address, env):
        for how in ("SIGINT", "SIGTERM"):
            cwd = tmp_path / how
            cwd.mkdir()
            run = _interrupt(cwd, ["--executor", "ray", "--ray-address", address,
                                   "--nproc-per-node", "2", "--host-time", "off"], how, env=env,
                             start_timeout=120)
            assert run.returncode == 128 + getattr(signal, how), run.stderr[-3000:]
            # one line, not one per actor the launcher killed (Ray may add its own warnings)
            assert run.stderr.count("phantom: interrupted; stopping all ranks") == 1, run.stderr[-3000:]
            assert "actor failed" not in run.stderr and "Traceback" not in run.stderr, run.stderr[-3000:]
            assert_no_leftovers(cwd)
