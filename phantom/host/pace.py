"""How fast this machine runs PyTorch's host path right now: a pace process beside the ranks.

phantom charges the script's host time as measured on this machine, converted to this
machine's best speed (host.speed.HostSpeedNormalizer) and from there to the node's. The
conversion needs this machine's speed *now*, on the kind of code a script's host gaps hold:
PyTorch's Python and C++ host path.

- The pure-Python speed probe does not see a machine's slow state, a slowdown of code with
  a large working set (on a shared VM, its host's other tenants: a 16 MB list walk took 3.4 ms
  in the fast state and 4-14 ms in the slow one). In that state the reference CPU step ran
  1.5-2.0x its best at start-up and the probe 1.3-1.5x; the host part of phantom's ZeRO-3 step
  (over its 193 ms of GPU work) came out 1.6-2.4x its fast-state value.
- The reference step itself, timed inside a rank, is not this machine's speed either: it ran
  1.15x its clean-process time under phantom's patches in a trivial script, and in a DeepSpeed
  ZeRO-3 run (whose Init context wraps `torch.nn.functional.linear`) ~1.4x in the fast state and
  ~1.1x in the slow one.

So with `phantom run --host-pace process` (and by default, `auto`, where the machine has a core
for it beside the ranks: launcher.launch.pace_mode) the reference step (host.machine.training_step: the
step the GPU presets' `host_step_ns` were timed with) is timed in a process of its own, started
by the launcher for the whole run: every PERIOD_S it times ROUNDS blocks of STEPS steps and
keeps the fastest, as the start-up calibration times it (host.machine.reference_step_ns), so a
reading compares like for like with this machine's best; the ranks read the median of its last
WINDOW readings (`read_pace`) whenever they sample their speed. It costs ~2% of one core.

Run as `python -m phantom.host.pace FILE`; it exits when its standard input closes (the
launcher holds the other end, so it cannot outlive the run).
"""
from __future__ import annotations

import json
import os
import select
import statistics
import subprocess
import sys
import time
from pathlib import Path

PACE_FILE_ENV = "PHANTOM_PACE_FILE"  # where a rank reads the pace (set by the launcher)
PERIOD_S = 0.5
ROUNDS = 5
STEPS = 4
WINDOW = 4  # readings the published pace is the median of (one slow block is not the state)
STALE_S = 5.0  # an older reading is not this moment's speed (the process stalled or died)
START_TIMEOUT_S = 20.0  # how long a rank waits for the first reading (importing torch)

# Bound before the simulation patches time (interception/clock.py): a rank waits for readings
# in real time, and its clock and sleep are the simulated host's.
_WALL = time.time
_SLEEP = time.sleep


def time_reference_step(step, clock=time.process_time_ns) -> float:
    """ns per call of `step`: the fastest of ROUNDS blocks of STEPS calls, after one call.

    CPU time, like the ranks' host clock (host.account.HOST_CLOCK_NS): time this process
    spends waiting for a core is not this machine's speed on the code."""
    from phantom.host.machine import time_steps

    step()
    return time_steps(step, repeats=ROUNDS, steps=STEPS, clock=clock)


def write_pace(path: Path, readings: list[float], now: float | None = None) -> None:
    """Publish the median of the last WINDOW `readings`, atomically (ranks read at any time)."""
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    written = now if now is not None else _WALL()
    window = readings[-WINDOW:]
    tmp.write_text(json.dumps({"t": written, "step_ns": statistics.median(window), "window": len(window)}))
    os.replace(tmp, path)


def read_pace(path: str | os.PathLike, now: float | None = None, newer_than: float = 0.0) -> float | None:
    """The published reference-step time in ns, or None where there is none, it cannot be
    read, or it is older than STALE_S (or written before `newer_than`)."""
    try:
        saved = json.loads(Path(path).read_text())
        step_ns, written = float(saved["step_ns"]), float(saved["t"])
    except (OSError, ValueError, TypeError, KeyError):
        return None
    if not (step_ns > 0 and (now if now is not None else _WALL()) - written <= STALE_S
            and written > newer_than):
        return None
    return step_ns


def wait_for_pace(path: str | os.PathLike, timeout_s: float = START_TIMEOUT_S,
                  fresh: bool = False) -> float | None:
    """The first published reading (`fresh`: the first written from now on; the process then
    sleeps for PERIOD_S, so the machine is free of it for a while), waiting up to `timeout_s`
    (the process imports torch while the rank starts); None if none comes or the process
    reported a failure."""
    start = _WALL()
    newer_than = start if fresh else 0.0
    while True:
        reading = read_pace(path, newer_than=newer_than)
        if reading is not None or _WALL() >= start + timeout_s or _failed(path):
            return reading
        _SLEEP(0.01)


def _failed(path: str | os.PathLike) -> bool:
    try:
        return "error" in json.loads(Path(path).read_text())
    except (OSError, ValueError, TypeError):
        return False


def run(path: Path, period_s: float = PERIOD_S, stdin=None) -> None:
    """Time the reference step every `period_s` and publish it, until `stdin` closes."""
    import torch

    from phantom.host.machine import training_step

    torch.set_num_threads(1)  # as on the GPU hosts, and as the start-up calibration times it
    step = training_step("cpu")
    readings: list[float] = []
    stdin = stdin if stdin is not None else sys.stdin
    while True:
        readings.append(time_reference_step(step))
        readings = readings[-WINDOW:]
        write_pace(path, readings)
        ready, _, _ = select.select([stdin], [], [], period_s)
        if ready and not os.read(stdin.fileno(), 1):
            return  # the launcher closed its end: the run is over


class PaceProcess:
    """The launcher's handle on a run's pace process (`start`, then `stop` when the run ends)."""

    def __init__(self, directory: Path) -> None:
        self.path = Path(directory) / "pace.json"
        self._proc: subprocess.Popen | None = None

    def start(self) -> Path | None:
        """Start the process; returns the file ranks read (PACE_FILE_ENV), or None where it
        could not start (ranks then use the speed probe alone)."""
        try:
            self._proc = subprocess.Popen([sys.executable, "-m", "phantom.host.pace", str(self.path)],
                                          stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL)
        except OSError:
            return None
        return self.path

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            proc.stdin.close()
            proc.wait(timeout=5)
        except Exception:  # noqa: BLE001 (it may be stuck: it must not outlive the run)
            proc.kill()
            proc.wait()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m phantom.host.pace FILE", file=sys.stderr)
        return 2
    path = Path(argv[0])
    try:
        run(path)
    except Exception as e:  # noqa: BLE001 (said in the file, so no rank waits for a reading)
        path.write_text(json.dumps({"error": f"{type(e).__name__}: {e}"}))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
