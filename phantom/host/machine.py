"""Measurements of the machine that runs the simulation: the reference CPU step, the
wake-up cost of a blocking wait, whether other processes compete for its CPUs.

Run as `python -m phantom.host.machine` on a GPU node's host to print the reference
numbers a GPU preset's `host_step_ns` comes from (hardware/gpus.py)."""
from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

CLOCK_NS = time.perf_counter_ns  # bound before the simulation patches time
PROBE_N = 2_000


class _Box:
    def __init__(self, v: int) -> None:
        self.v = v

    def step(self, d: dict) -> int:
        d[self.v & 63] = self.v
        return self.v + len(d)


def probe_ns(clock=CLOCK_NS, n: int = PROBE_N) -> int:
    """Nanoseconds for a fixed pure-Python workload (object creation, calls, dicts)."""
    t0 = clock()
    d: dict = {}
    total = 0
    for i in range(n):
        total += _Box(i).step(d)
    return clock() - t0


def training_step(device: str, batch: int = 16, width: int = 64) -> Callable[[], None]:
    """A tiny training step on `device` (linear, layer norm, GELU, loss, backward, foreach
    AdamW on `batch` x `width` tensors): framework overhead with little arithmetic. On CPU
    tensors at the default 16x64 it is the reference step (`reference_step_ns`), which measures
    how fast a machine runs PyTorch's Python and C++ host path (the GPU presets' `host_step_ns`
    were timed at that shape: keep it); phantom also runs it on fake CUDA tensors, against the
    CPU one, to measure its own dispatch overhead (calibration._measure, at
    CALIBRATION_SHAPE)."""
    import torch
    import torch.nn.functional as F

    lin1 = torch.nn.Linear(width, width, device=device)
    lin2 = torch.nn.Linear(width, width, device=device)
    norm = torch.nn.LayerNorm(width, device=device)
    params = [*lin1.parameters(), *lin2.parameters(), *norm.parameters()]
    opt = torch.optim.AdamW(params, foreach=True)

    def step() -> None:
        x = torch.randn(batch, width, device=device)
        loss = lin2(F.gelu(norm(lin1(x)))).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def time_steps(step: Callable[[], None], repeats: int = 5, steps: int = 4, clock=CLOCK_NS) -> float:
    """Nanoseconds per call of `step`: the fastest of `repeats` runs of `steps` calls
    (interruptions only make a run slower)."""
    best = float("inf")
    for _ in range(repeats):
        t0 = clock()
        for _ in range(steps):
            step()
        best = min(best, (clock() - t0) / steps)
    return best


# The other process of `wake_penalty_ns`: on the same core, each time it is woken it walks
# ~2 MB of Python objects (12,000 lists of 8), about a server core's private L2, as another
# rank or the coordinator does while a rank waits on its collective. What it evicts sets the
# penalty: walking ~0.6 MB gave 1.7 us on a 2-core VM, ~2 MB 5 us, ~7 MB 26 us and ~25 MB
# 68 us. A rank of a real 2-rank run under phantom measured 6-21 us on such VMs, where this
# gave 4-6 us: this size takes off most of the cost, not more than all of it (bench/probes/collective_wake_cost.py).
_WAKE_PARTNER = r"""
import os, sys
core = int(sys.argv[1])
if core >= 0 and hasattr(os, "sched_setaffinity"):
    os.sched_setaffinity(0, {core})
rows = [[i] * 8 for i in range(60_000)]
read, write = sys.stdin.buffer.read, sys.stdout.buffer
while read(1) == b"x":
    total = 0
    for row in rows[::5]:
        total += row[0]
    write.write(b"y")
    write.flush()
"""


def _collective_call_path() -> Callable[[], None]:
    """The host code a script runs around a collective (torch.distributed's argument checks
    and options on a tensor): what a rank runs right after its coordinator round trip."""
    import torch
    import torch.distributed.distributed_c10d as c10d

    t = torch.ones(1024)

    def path() -> None:
        c10d._check_single_tensor(t, "tensor")
        c10d._rank_not_in_group(None)
        t.is_complex(), t.is_contiguous(), t.numel(), t.dtype, t.device
        opts = c10d.AllreduceOptions()
        opts.reduceOp = c10d.ReduceOp.SUM
        opts.timeout = c10d.default_pg_timeout

    return path


def wake_penalty_ns(clock=CLOCK_NS, samples: int = 120, reply_timeout_s: float = 2.0) -> float | None:
    """How much longer, in this machine's ns, a rank's host code runs right after the rank
    slept in a blocking wait while another process ran on its core, than the same code in
    a steady loop: the median over `samples` of each, on one core with a partner process
    that walks memory while this one waits. None where it cannot be measured (no CPU
    affinity control, as on macOS; a partner that fails, or does not answer within
    `reply_timeout_s`).

    Under phantom every collective blocks the rank process in its coordinator round trip;
    a real GPU host never sleeps there (the NCCL enqueue returns at once), so the first run
    of each code path after the wait, slow on cold caches, is phantom's cost, not the
    script's. Measured on a 2-core VM (`bench/probes/collective_wake_cost.py`): 9-21 us
    for torch's code around a collective call, against 1-3 us for plain arithmetic; paid
    once per wake-up, not per repetition of the code."""
    import select
    import subprocess

    if not hasattr(os, "sched_getaffinity"):
        return None  # without pinning, the partner may run elsewhere: another quantity
    try:
        path = _collective_call_path()
        path()
        affinity = os.sched_getaffinity(0)
        core = min(affinity)
        # -I -S: no user site or sitecustomize in the partner; its errors are not the run's
        partner = subprocess.Popen([sys.executable, "-I", "-S", "-c", _WAKE_PARTNER, str(core)],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL)
    except Exception:  # noqa: BLE001 (no correction rather than a failed run)
        return None
    try:
        os.sched_setaffinity(0, {core})
        steady, woken = [], []
        for _ in range(samples):
            path()
            t0 = clock()
            path()
            steady.append(clock() - t0)
            partner.stdin.write(b"x")
            partner.stdin.flush()
            ready, _, _ = select.select([partner.stdout], [], [], reply_timeout_s)
            if not ready or os.read(partner.stdout.fileno(), 1) != b"y":
                return None
            t0 = clock()
            path()
            woken.append(clock() - t0)
        return max(0.0, statistics.median(woken) - statistics.median(steady))
    except Exception:  # noqa: BLE001
        return None
    finally:
        _stop(partner)
        try:
            os.sched_setaffinity(0, affinity)
        except OSError:
            pass


def _stop(partner) -> None:
    """End `wake_penalty_ns`'s partner process and close its pipes, whatever state it is in."""
    try:
        partner.stdin.write(b"q")
        partner.stdin.flush()
    except Exception:  # noqa: BLE001 (it may have died)
        pass
    for pipe in (partner.stdin, partner.stdout):
        try:
            pipe.close()
        except Exception:  # noqa: BLE001
            pass
    try:
        partner.wait(timeout=5)
    except Exception:  # noqa: BLE001
        partner.kill()
        partner.wait()


def other_runnable_tasks(samples: int = 7, interval_s: float = 0.002) -> int | None:
    """How many tasks besides this one are runnable on the machine: the median over `samples`
    reads of /proc/loadavg's running count (which counts the reader); None where there is no
    /proc/loadavg."""
    counts = []
    for i in range(samples):
        try:
            with open("/proc/loadavg") as f:
                counts.append(int(f.read().split()[3].split("/")[0]) - 1)
        except (OSError, ValueError, IndexError):
            return None
        if i + 1 < samples:
            time.sleep(interval_s)
    return int(statistics.median(counts))


def cpu_contended(others: int | None = None) -> bool:
    """Whether other runnable tasks hold at least half of the CPUs this process may run on (at
    least one): a host-path calibration measured now would not be this machine's alone."""
    if others is None:
        others = other_runnable_tasks()
    if others is None:
        return False
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return others >= max(1, cpus // 2)


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), or what the platform says elsewhere."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    # Arm: no model name line; the implementer and part numbers identify the core
    arm = [line.split(":", 1)[1].strip() for line in lines
           if line.startswith(("CPU implementer", "CPU part"))][:2]
    if arm:
        return "arm " + " ".join(arm)
    return platform.processor() or "unknown"


def cpu_tag() -> str:
    import hashlib

    return hashlib.sha1(cpu_model().encode()).hexdigest()[:8]


def reference_step_ns(rounds: int = 15, clock=CLOCK_NS) -> float:
    """This machine's time for the CPU `training_step`: the fastest of `rounds` timings, on
    one intra-op thread as on the GPU hosts (the caller's setting is restored)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        step = training_step("cpu")
        step()
        return min(time_steps(step, clock=clock) for _ in range(rounds))
    finally:
        torch.set_num_threads(threads)


def measure_reference(rounds: int = 15) -> dict:
    """The numbers a GPU preset's `host_step_ns` comes from: the CPU training step's time and
    the pure-Python probe, fastest of `rounds` (run on the GPU machine's host, idle)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as reference_step_ns times it
    try:
        step = training_step("cpu")
        step()
        steps = [time_steps(step) for _ in range(rounds)]
    finally:
        torch.set_num_threads(threads)
    probes = [probe_ns() for _ in range(rounds)]
    return {"host_step_ns": round(min(steps)), "host_step_ns_median": round(sorted(steps)[len(steps) // 2]),
            "probe_ns": min(probes), "cpu": cpu_model(), "python": platform.python_version(),
            "torch": torch.__version__, "node": platform.node()}


if __name__ == "__main__":  # python -m phantom.host.machine: this machine's reference numbers
    print(json.dumps(measure_reference(), indent=1))
