"""The pace process (host.pace) and the speed factor it sets (host.speed)."""
from __future__ import annotations

import json
import os
import time

import pytest

import phantom.host.speed as host
import phantom.host.pace as pace


def test_a_reading_is_the_fastest_block_of_steps():
    ticks = iter([0, 40, 40, 70, 70, 110, 110, 150, 150, 200])  # blocks of 40, 30, 40, 40, 50 ns
    calls = []
    assert pace.time_reference_step(lambda: calls.append(1), clock=lambda: next(ticks)) == 30 / pace.STEPS
    assert len(calls) == 1 + pace.ROUNDS * pace.STEPS  # one untimed call first


def test_the_published_pace_is_the_median_of_the_last_readings(tmp_path):
    path = tmp_path / "pace.json"
    write_time = 1000.0
    pace.write_pace(path, [900.0, 100.0, 300.0, 200.0, 5000.0], now=write_time)
    assert pace.read_pace(path, now=write_time + 1) == 250.0  # median of the last WINDOW (4)
    assert not list(tmp_path.glob("*.tmp"))  # written through a temporary file, then renamed


@pytest.mark.parametrize("text", [None, "", "{", '{"t": 1000.0}', '{"t": 1000.0, "step_ns": -5}',
                                  '{"t": "x", "step_ns": 5}', "[1, 2]"])
def test_no_usable_pace_reads_as_none(tmp_path, text):
    path = tmp_path / "pace.json"
    if text is not None:
        path.write_text(text)
    assert pace.read_pace(path, now=1000.0) is None


def test_a_stale_pace_reads_as_none(tmp_path):
    path = tmp_path / "pace.json"
    pace.write_pace(path, [500.0], now=1000.0)
    assert pace.read_pace(path, now=1000.0 + pace.STALE_S - 0.1) == 500.0
    assert pace.read_pace(path, now=1000.0 + pace.STALE_S + 0.1) is None  # stalled or dead


def test_the_pace_process_publishes_and_ends_with_its_launcher(tmp_path):
    process = pace.PaceProcess(tmp_path)
    path = process.start()
    try:
        reading = pace.wait_for_pace(path)
        assert reading is not None and 1e3 < reading < 1e9  # the reference step: ~0.2-2 ms
        assert 1 <= json.loads(path.read_text())["window"] <= pace.WINDOW
        pid = process._proc.pid
    finally:
        process.stop()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # gone, not orphaned
    process.stop()  # twice is harmless


def test_the_launcher_names_the_pace_file_to_its_ranks_only_while_running(monkeypatch):
    from phantom.launcher.launch import _pace_process

    monkeypatch.delenv(pace.PACE_FILE_ENV, raising=False)
    started = []
    monkeypatch.setattr(pace.PaceProcess, "start", lambda self: started.append(self) or self.path)
    monkeypatch.setattr(pace.PaceProcess, "stop", lambda self: started.remove(self))
    with _pace_process(True):
        assert os.environ[pace.PACE_FILE_ENV] == str(started[0].path)
    assert pace.PACE_FILE_ENV not in os.environ and not started
    with _pace_process(False):  # --host-pace probe
        assert pace.PACE_FILE_ENV not in os.environ and not started


@pytest.mark.parametrize("cpus, run, expected", [
    (2, dict(), "process"),  # one rank, a core left for the pace process
    (1, dict(), "probe"),
    (2, dict(distributed=True, nproc_per_node=2), "probe"),  # the ranks fill the cores
    (4, dict(distributed=True, nproc_per_node=2), "process"),
    (2, dict(distributed=True, nproc_per_node=8, nnodes=4, ranks="auto"), "process"),  # rank 0 starts
    (2, dict(distributed=True, nproc_per_node=8, ranks="0,7"), "probe"),
    (64, dict(distributed=True, nproc_per_node=2, executor="ray"), "probe"),  # ranks elsewhere
    (1, dict(host_pace="process"), "process"),  # what the user asks for
    (64, dict(host_pace="probe"), "probe"),
])
def test_auto_starts_the_pace_process_where_it_has_a_core_of_its_own(cpus, run, expected):
    from phantom.config import RunConfig
    from phantom.launcher.launch import pace_mode

    assert RunConfig().host_pace == "auto"  # the default
    assert pace_mode(RunConfig(**run), cpus=cpus) == expected


def _speed(monkeypatch, readings, probe=100):
    monkeypatch.setattr(host, "probe_ns", lambda clock=None: probe)
    monkeypatch.setenv("PHANTOM_PROBE_STRENGTH", "1.0")
    it = iter(readings)
    return host.HostSpeedNormalizer(None, pace=lambda: next(it))


def test_the_pace_sets_the_factor_against_the_best_reference_step(monkeypatch):
    speed = _speed(monkeypatch, [800.0, 600.0, None, 1000.0], probe=150)
    assert not speed.paced  # no best step yet: the probe's factor
    speed.record_step(400.0)
    assert speed.sample() == pytest.approx(400 / 800) and speed.paced
    assert speed.sample_now() == pytest.approx(400 / 600)  # this reading, not a window
    # no reading (the pace process stalled): the probe's factor, not a stale pace
    assert speed.sample() == pytest.approx(speed.best_ns / 150) and not speed.paced
    speed.sample()
    v = speed.variation()
    assert v["pace_samples"] == 3
    assert v["pace_mean_slowdown"] == pytest.approx((2.0 + 1.5 + 2.5) / 3) and v["pace_max_slowdown"] == 2.5


def test_without_a_pace_process_the_probe_alone_sets_the_factor(monkeypatch):
    monkeypatch.setattr(host, "probe_ns", lambda clock=None: 100)
    speed = host.HostSpeedNormalizer(None)
    speed.record_step(400.0)
    speed.sample()
    assert not speed.paced and speed.variation()["pace_samples"] == 0


def test_a_pace_process_that_fails_says_so_and_no_rank_waits(tmp_path):
    path = tmp_path / "pace.json"
    path.write_text('{"error": "ImportError: no torch"}')
    t0 = time.monotonic()
    assert pace.wait_for_pace(path, timeout_s=30) is None
    assert time.monotonic() - t0 < 5  # at once, not after the timeout


def test_a_run_without_a_first_reading_converts_by_the_probe_throughout(monkeypatch):
    speed = _speed(monkeypatch, [800.0] * 3, probe=150)
    speed.record_step(400.0)
    speed.drop_pace()
    assert speed.sample() == pytest.approx(speed.best_ns / 150) and not speed.paced


def test_a_fresh_reading_is_one_written_after_the_wait_began(tmp_path):
    path = tmp_path / "pace.json"
    pace.write_pace(path, [500.0])
    assert pace.wait_for_pace(path, timeout_s=0.05, fresh=True) is None  # only an older one
    assert pace.wait_for_pace(path, timeout_s=0.05) == 500.0


def test_a_run_with_the_pace_process_converts_by_its_readings(run_script):
    text = """
        import torch
        model = torch.nn.Linear(256, 256).cuda()
        opt = torch.optim.AdamW(model.parameters())
        for _ in range(4):
            model(torch.randn(32, 256, device="cuda")).sum().backward()
            opt.step()
            opt.zero_grad()
        torch.cuda.synchronize()
        print("trained")
    """
    proc, report = run_script(text, "--host-pace", "process", "--gpu", "H200")
    assert proc.returncode == 0, proc.stderr
    assert "trained" in proc.stdout
    variation = report["simulation"]["host_speed_variation"]
    assert variation["pace_samples"] >= 1 and variation["pace_mean_slowdown"] > 0.5
    assert "speed read by the pace process" in proc.stderr  # the summary's host line says so
    proc, report = run_script(text, "--host-pace", "probe", "--gpu", "H200")  # the probe alone
    assert proc.returncode == 0, proc.stderr
    assert report["simulation"]["host_speed_variation"]["pace_samples"] == 0
    assert "pace process" not in proc.stderr


def test_the_default_is_auto_unless_the_environment_names_one(script, tmp_path):
    from conftest import run_phantom
    from phantom.launcher.launch import usable_cpus

    path = script("""
        import torch
        x = torch.randn(64, 64, device="cuda")
        for _ in range(3):
            y = (x @ x).sum()
        torch.cuda.synchronize()
    """)
    report = tmp_path / "report.json"
    proc = run_phantom(["run", "--report", str(report), str(path)], cwd=tmp_path, env={"PHANTOM_HOST_PACE": ""})
    assert proc.returncode == 0, proc.stderr
    paced = json.loads(report.read_text())["simulation"]["host_speed_variation"]["pace_samples"] > 0
    assert paced == (usable_cpus() > 1)  # auto: the pace process where one rank leaves a core
    proc = run_phantom(["run", str(path)], cwd=tmp_path, env={"PHANTOM_HOST_PACE": "fast"})
    assert proc.returncode != 0
    assert "PHANTOM_HOST_PACE must be one of auto, probe, process, got 'fast'" in proc.stderr
