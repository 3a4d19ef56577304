"""This machine's speed at the script's own Python, against the simulated node's host.

The script's Python (its own code, the framework's hooks) is measured here in this thread's
CPU time and converted to the node by one ratio: the node's time for a fixed pure-Python
workload (`probe_ns`; GPUSpec.host_probe_ns, measured on the node) over this machine's.
`phantom calibrate` measures this machine once, pinned to one core, refusing while other
processes keep the CPUs busy, and writes `calibration_path()`; runs only read that file and the
report names it. Without one a run measures the same at its start, and says so.
"""
from __future__ import annotations

import json
import os
import platform
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

CLOCK_NS = time.thread_time_ns  # bound before the simulation patches time
PROBE_N = 2_000
CALIBRATION_FILE = "host_calibration.json"
# The low percentile a machine's speed is read at: stalls (another process, the hypervisor)
# only ever add time, so the fast end of many probes is the machine itself.
LOW_PERCENTILE = 0.1


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


def low_percentile(samples: list[float], q: float = LOW_PERCENTILE) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass
class MachineSpeed:
    """This machine, as the script's measured host time is converted with it."""
    probe_ns: float
    """`probe_ns()` here, at the low percentile of many runs."""
    boundary_ns: float
    """What marking one torch call adds to the script's measured time here (the way into and out
    of interception.boundary's mode before and after its clock reads, torch's argument parsing
    before it offers the call to the mode): taken off the segments around each call, measured by
    interception.boundary.measure_boundary_ns."""
    boundary_python_ns: float
    """The same for a torch function written in Python (torch.nn.functional.layer_norm,
    Tensor.split), which reaches the mode through torch.overrides.handle_torch_function's
    Python."""
    release_ns: float
    """What freeing a fake tensor adds to the script's measured time here beyond what phantom's
    finalizer brackets: taken off per freed storage (interception.boundary._measure_release_ns).
    A real run's free is a few hundred ns in the caching allocator, not charged."""
    source: str
    """The calibration file it was read from, or "measured at start"."""
    cpu: str = ""
    python: str = ""
    date: str = ""

    def ratio(self, node_probe_ns: float) -> float:
        """Node ns per ns of this machine's thread time."""
        return node_probe_ns / self.probe_ns


def measure_probe(probes: int = 200) -> float:
    probe_ns()
    return low_percentile([probe_ns() for _ in range(probes)])


def calibration_path() -> Path:
    root = os.environ.get("PHANTOM_CACHE_DIR") or Path.home() / ".cache" / "phantom"
    return Path(root) / CALIBRATION_FILE


def read_calibration(path: Path | None = None) -> MachineSpeed | None:
    """The calibration `phantom calibrate` wrote for this CPU and Python, or None."""
    path = path or calibration_path()
    try:
        data = json.loads(path.read_text())
        speed = MachineSpeed(float(data["probe_ns"]), float(data["boundary_ns"]),
                             float(data["boundary_python_ns"]), float(data["release_ns"]), str(path),
                             data.get("cpu", ""), data.get("python", ""), data.get("date", ""))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if speed.cpu != cpu_model() or speed.python != platform.python_version():
        return None  # another machine's (a shared home directory) or another interpreter's
    return speed


def write_calibration(speed: MachineSpeed, path: Path | None = None) -> Path:
    path = path or calibration_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    data = asdict(speed)
    del data["source"]
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)
    return path


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


if __name__ == "__main__":  # python -m phantom.host.machine: the numbers a GPU preset takes
    print(json.dumps({"probe_ns": measure_probe(), "cpu": cpu_model(),
                      "python": platform.python_version(), "node": platform.node()}, indent=1))
