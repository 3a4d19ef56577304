"""Same inputs, same answer: a command run twice prints the same thing and writes the same
report, byte for byte, except the fields that say how long the simulation itself took.

Host time is the one input that comes from the simulating machine (docs/host-time.md): these
runs take it out (--host-time off) or replay a recorded profile (--host-time counted), which
is what promises repetition. Measured host time is not expected to repeat exactly.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import REPO, run_phantom

GPT = [str(REPO / "examples/gpt_train.py"), "--n-layer", "2", "--n-embd", "256", "--n-head", "4",
       "--seq-len", "256", "--batch-size", "4", "--steps", "4", "--warmup", "1"]
FSDP = [str(REPO / "examples/dist_train.py"), "--parallel", "fsdp", "--seq-len", "256",
        "--batch-size", "2", "--steps", "3", "--warmup", "1"]


def _without_wall_clock(report: dict) -> dict:
    """The report less what this run's own wall clock measured (simulator speed)."""
    simulation = {key: value for key, value in report["simulation"].items() if "wall" not in key}
    return {**report, "simulation": simulation}


def _run(tmp_path: Path, name: str, options: list[str], script: list[str]) -> tuple[str, dict]:
    report = tmp_path / f"{name}.json"
    proc = run_phantom(["run", "--gpu", "H100", "--report", str(report), *options, *script], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "iter " in proc.stdout  # the script's own log, compared below
    return proc.stdout, _without_wall_clock(json.loads(report.read_text()))


@pytest.mark.parametrize("options, script", [
    (["--host-time", "off"], GPT),
    (["--host-time", "off", "--nproc-per-node", "2"], FSDP),
], ids=["one-rank", "fsdp-two-ranks"])
def test_the_same_command_twice_gives_the_same_output(tmp_path, options, script):
    first = _run(tmp_path, "first", options, script)
    second = _run(tmp_path, "second", options, script)
    assert first[0] == second[0]
    assert first[1] == second[1]


def test_counted_host_time_repeats_a_recorded_profile_exactly(tmp_path):
    profile = tmp_path / "profile"
    record = run_phantom(["run", "--gpu", "H100", "--save-host-profile", str(profile), *GPT], cwd=tmp_path)
    assert record.returncode == 0, record.stderr[-3000:]
    counted = ["--host-time", "counted", "--host-profile", str(profile)]
    first = _run(tmp_path, "first", counted, GPT)
    second = _run(tmp_path, "second", counted, GPT)
    assert first[0] == second[0]
    assert first[1] == second[1]
    # host time is in these steps, not taken out: the counted runs differ from a run without it
    off = _run(tmp_path, "off", ["--host-time", "off"], GPT)
    assert off[1]["iterations"] != first[1]["iterations"]


CLOCKS = """
import time, torch
a = torch.randn(1000, 999, device="cuda")
marks = []
for _ in range(5):
    p0, w0 = time.perf_counter(), time.time()
    b = (a @ a.T).relu().sum()
    torch.cuda.synchronize()
    marks.append((time.perf_counter() - p0, time.time() - w0))
print(repr(marks))
"""


def test_the_scripts_own_clock_differences_repeat_to_the_last_bit(tmp_path):
    """A float of ~1.8e9 s (time.time) is 238 ns coarse: the script's differences repeat only
    if every run's clock origin rounds alike (interception/clock.py)."""
    path = tmp_path / "clocks.py"
    path.write_text(CLOCKS)
    printed = []
    for _ in range(2):
        proc = run_phantom(["run", "--gpu", "H100", "--host-time", "off", str(path)], cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr[-3000:]
        printed.append(proc.stdout.strip().splitlines()[-1])
    assert printed[0] == printed[1]
    marks = eval(printed[0])  # a list of float pairs
    # the two clocks measure the same simulated interval, time.time at its coarser grain
    assert all(abs(perf - wall) < 1e-6 for perf, wall in marks)
