"""The script `phantom calibrate` runs under `phantom run`: measures this machine's speed at the
script's own Python on the fake device (interception.boundary.measure_machine), pinned to one
core, with many probes, and writes host.machine.calibration_path() (or the path in argv[1])."""
from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

from phantom.host.machine import calibration_path, write_calibration
from phantom.interception import current_simulation
from phantom.interception.boundary import measure_machine


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else calibration_path()
    sim = current_simulation()
    if sim is None:
        raise SystemExit("phantom calibrate: run through `phantom calibrate`")
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core: no migrations
    speed = measure_machine(sim, probes=400, rounds=21)
    write_calibration(replace(speed, source=str(path)), path)
    print(f"probe {speed.probe_ns / 1e3:.1f} us, torch-call boundary {speed.boundary_ns:.0f} ns "
          f"({speed.boundary_python_ns:.0f} ns for Python torch functions), "
          f"tensor release {speed.release_ns:.0f} ns ({speed.cpu}, Python {speed.python})")


main()
