"""Host time: the speed normaliser, the reference training step, and the host-speed ratio."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from phantom.host.machine import measure_reference, time_steps, training_step
from phantom.host.speed import HostSpeedNormalizer
from phantom.hardware import get_gpu


def test_normaliser_remembers_the_fastest_probe_and_step(tmp_path):
    first = HostSpeedNormalizer(tmp_path)
    assert first.best_ns is not None and first.factor <= 1.0
    assert first.record_step(500_000.0) == 500_000.0
    assert first.record_step(700_000.0) == 500_000.0  # a slower timing never replaces the best
    again = HostSpeedNormalizer(tmp_path)  # a later run reads both back
    assert again.best_step_ns == 500_000.0
    assert again.best_ns <= first.best_ns


@pytest.mark.parametrize("saved", ["not json", "[]", "null",
                                   json.dumps({"best_probe_ns": 123, "best_step_1thread_ns": 0}),
                                   json.dumps({"best_probe_ns": -5, "best_step_1thread_ns": "x"}),
                                   json.dumps({"best_probe_ns": 123, "best_step_ns": 5})])
def test_a_broken_or_old_cache_is_only_forgotten(tmp_path, saved):
    HostSpeedNormalizer(tmp_path)
    (cache,) = tmp_path.glob("host-probe-*.json")
    cache.write_text(saved)
    speed = HostSpeedNormalizer(tmp_path)
    assert speed.best_step_ns is None  # old (unnormalised) or invalid steps are not reused
    assert speed.best_ns > 0


def test_time_steps_takes_the_fastest_run():
    ticks = iter([0, 10, 10, 14, 14, 30])  # runs of 2 steps: 10, 4, 16 ns
    calls = []
    assert time_steps(lambda: calls.append(1), repeats=3, steps=2, clock=lambda: next(ticks)) == 2.0
    assert len(calls) == 6


def test_reference_step_trains_on_cpu():
    import torch

    threads = torch.get_num_threads()
    step = training_step("cpu")
    step()  # runs forward, backward and AdamW on real CPU tensors
    ref = measure_reference(rounds=2)
    assert ref["host_step_ns"] > 0 and ref["host_step_ns"] <= ref["host_step_ns_median"]
    assert ref["torch"] == torch.__version__
    assert torch.get_num_threads() == threads  # timed on one thread, the setting restored


def test_presets_carry_their_measured_host():
    # Measured on the GPU hosts (bench/host/data/host_reference_*.json): the H100 machine's host
    # runs the step slower than the H200 machine's; unmeasured presets take the H200 host.
    assert get_gpu("H100").host_step_ns > get_gpu("H200").host_step_ns
    assert get_gpu("A100").host_step_ns == get_gpu("H200").host_step_ns
    for name, tag in (("H100", "h100"), ("H200", "h200")):
        data = json.loads((Path(__file__).resolve().parents[1] / "bench" / "host" / "data" /
                           f"host_reference_{tag}.json").read_text())
        assert get_gpu(name).host_step_ns == pytest.approx(data["host_step_ns"])


def test_every_preset_takes_the_pooled_typical_slowdown():
    import statistics

    from phantom.hardware.gpus import HOST_FLICKER_MEAN_SLOWDOWNS, HOST_MEAN_SLOWDOWN

    assert HOST_MEAN_SLOWDOWN == statistics.median(HOST_FLICKER_MEAN_SLOWDOWNS)
    assert {get_gpu(n).host_mean_slowdown for n in ("H100", "H200", "A100")} == {HOST_MEAN_SLOWDOWN}


def test_the_pooled_slowdown_is_the_committed_flicker_runs():
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "bench" / "host" / "host_pairs.py"
    spec = importlib.util.spec_from_file_location("host_pairs", path)
    host_pairs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(host_pairs)
    from phantom.hardware.gpus import HOST_FLICKER_MEAN_SLOWDOWNS

    measured = sorted(s for _, _, s in host_pairs.flicker_slowdowns())
    assert measured == sorted(HOST_FLICKER_MEAN_SLOWDOWNS)


def test_calibrations_are_settled_per_kind_and_remembered(tmp_path):
    from phantom.host.speed import DISPATCH_OVERHEAD, WAKE_PENALTY

    speed = HostSpeedNormalizer(tmp_path)
    for v in (10.0, 30.0, 20.0):
        speed.settle(DISPATCH_OVERHEAD, "code", v)
    assert speed.settle(WAKE_PENALTY, "code", 5.0) == 5.0  # its own history
    again = HostSpeedNormalizer(tmp_path)
    assert again.settle(DISPATCH_OVERHEAD, "code", 100.0) == 25.0  # median of 10, 30, 20, 100
    assert again.settle(DISPATCH_OVERHEAD, "new code", 7.0) == 7.0  # another version's not mixed in
    assert again.settle(DISPATCH_OVERHEAD, "code", 25.0) == 25.0  # ... nor lost: 10, 30, 20, 100, 25
    assert again.settle(WAKE_PENALTY, "code", 9.0) == 7.0
    for v in range(5):  # only the most recent versions are kept
        again.settle(DISPATCH_OVERHEAD, f"v{v}", 1.0)
    assert again.settle(DISPATCH_OVERHEAD, "code", 3.0) == 3.0


def test_a_process_that_did_not_measure_keeps_the_others_calibrations(tmp_path):
    # Every rank of a run saves the cache at each speed sample; the ranks that did not
    # measure used to write back the histories they read at start-up, dropping the measuring
    # rank's new value: a multi-rank run's calibration was never kept.
    from phantom.host.speed import DISPATCH_OVERHEAD

    measuring, waiting = HostSpeedNormalizer(tmp_path), HostSpeedNormalizer(tmp_path)
    measuring.settle(DISPATCH_OVERHEAD, "code", 12.0)
    waiting.sample()  # saves, with a view read before the measurement
    assert HostSpeedNormalizer(tmp_path).recent is not None
    assert HostSpeedNormalizer(tmp_path)._kept(DISPATCH_OVERHEAD, "code") == [12.0]
    # ... and a second measurement lands beside the first, whoever settles it
    assert waiting.settle(DISPATCH_OVERHEAD, "code", 14.0) == 13.0
    measuring.sample()
    assert HostSpeedNormalizer(tmp_path)._kept(DISPATCH_OVERHEAD, "code") == [12.0, 14.0]


def test_wake_penalty_is_measured_against_a_partner_on_the_same_core(monkeypatch):
    import os
    import subprocess
    import time

    import phantom.host.machine as host

    if not hasattr(os, "sched_getaffinity"):
        assert host.wake_penalty_ns(time.process_time_ns, samples=5) is None  # cannot pin
        return
    affinity = os.sched_getaffinity(0)
    seen = []
    popen = subprocess.Popen

    def spy(args, **kw):
        seen.append(args[-1])  # the core the partner pins itself to
        return popen(args, **kw)

    monkeypatch.setattr(subprocess, "Popen", spy)
    penalty = host.wake_penalty_ns(time.process_time_ns, samples=20)
    assert penalty is not None and penalty < 1e6  # ns: microseconds, not milliseconds
    assert seen == [str(min(affinity))]  # the partner shares this process's core
    assert os.sched_getaffinity(0) == affinity  # the pinning is undone


@pytest.mark.parametrize("partner", ["import time; time.sleep(30)",  # alive, never answers
                                     "raise SystemExit(3)",          # dies at once
                                     "import sys; sys.stdout.buffer.write(b'n'); sys.stdout.flush()"])
def test_a_partner_that_does_not_answer_gives_no_correction(monkeypatch, partner):
    import os
    import time

    import phantom.host.machine as host

    if not hasattr(os, "sched_getaffinity"):
        pytest.skip("no CPU affinity control here")
    affinity = os.sched_getaffinity(0)
    monkeypatch.setattr(host, "_WAKE_PARTNER", partner)
    t0 = time.monotonic()
    assert host.wake_penalty_ns(time.process_time_ns, samples=3, reply_timeout_s=0.5) is None
    assert time.monotonic() - t0 < 10  # neither hangs nor waits out the sleeping partner
    assert os.sched_getaffinity(0) == affinity


def test_a_wake_up_takes_its_penalty_off_the_following_gaps():
    from phantom.config import RunConfig
    from phantom.sim import SimOptions, Simulation

    sim = Simulation(SimOptions.for_run(RunConfig(host_speed=1.0, host_gaps="measured"), get_gpu("H100")))
    sim.host.gap_scale = 1.0
    ticks = iter([0, 6_000, 6_000, 20_000, 20_000, 25_000])
    sim.host.clock = lambda: next(ticks)
    sim.host._real_mark = sim.host.clock()
    sim.host.wake_penalty_ns = 10_000.0
    sim.host.woke_up()
    host0 = sim.timeline.host_ns
    sim.host.begin_op("a")  # 6 us measured: all of it the wake-up's
    sim.host._real_mark = sim.host.clock()
    assert sim.timeline.host_ns == host0
    sim.host.begin_op("b")  # 14 us measured: the 4 us left of the penalty come off
    sim.host._real_mark = sim.host.clock()
    assert sim.timeline.host_ns - host0 == pytest.approx(10_000.0)
    sim.host.begin_op("c")  # nothing left to take
    assert sim.timeline.host_ns - host0 == pytest.approx(15_000.0)
    assert sim.host.wake_ups == 1


def test_a_wake_up_penalty_comes_off_before_the_steady_mean():
    from phantom.config import RunConfig
    from phantom.sim import SimOptions, Simulation

    sim = Simulation(SimOptions.for_run(RunConfig(host_speed=1.0), get_gpu("H100")))  # steady gaps
    sim.host.gap_scale = 1.0
    sim.host.dispatch_overhead_ns = 0.0
    sim.host.wake_penalty_ns = 4_000.0
    clock = iter(range(0, 10**9, 10_000))  # every gap measures 10 us
    sim.host.clock = lambda: next(clock)
    charged = []
    for it in range(4):  # the same site after a wake-up in every iteration
        sim.host._real_mark = sim.host.clock()
        sim.host.woke_up()
        before = sim.timeline.host_ns
        sim.host.begin_op("after collective")
        charged.append(sim.timeline.host_ns - before)
        sim.host.steady.new_iteration()
    assert charged == pytest.approx([6_000.0] * 4)  # measured 10, 4 of it the wake-up's


def test_a_blocking_exchange_wakes_the_rank_and_a_local_one_does_not():
    from phantom.config import RunConfig
    from phantom.sim import SimOptions, Simulation
    from phantom.distributed.comm import RankComm
    from phantom.distributed.wire import Request, Result

    class Client:
        def exchange(self, requests):
            return [Result(r.ready_ns, r.ready_ns + 1.0) for r in requests]

    def request(members):
        return Request(key=("g", 1), rank=0, kind="all_reduce", members=members, nbytes=4,
                       signature=(), ready_ns=0.0, host_ns=0.0, site="")

    sim = Simulation(SimOptions.for_run(RunConfig(host_speed=1.0), get_gpu("H100")))
    sim.host.wake_penalty_ns = 5_000.0
    comm = RankComm(sim, rank=0, world_size=2, client=Client())
    comm._exchange([request((0,))])  # a group of one: resolved here, no round trip
    assert sim.host.wake_ups == 0 and sim.host._wake_credit == 0.0
    comm._exchange([request((0, 1))])
    assert sim.host.wake_ups == 1 and sim.host._wake_credit == 5_000.0


def test_a_wake_up_warms_the_handler_path_unless_turned_off(monkeypatch):
    from phantom.config import RunConfig
    from phantom.sim import SimOptions, Simulation

    sim = Simulation(SimOptions.for_run(RunConfig(host_speed=1.0), get_gpu("H100")))
    calls = []
    sim.host.warm_dispatch_paths = lambda: calls.append(1)
    sim.host.woke_up()
    assert calls == [1]
    monkeypatch.setenv("PHANTOM_NO_REWARM", "1")
    off = Simulation(SimOptions.for_run(RunConfig(host_speed=1.0), get_gpu("H100")))
    off.host.warm_dispatch_paths = lambda: calls.append(2)
    off.host.woke_up()
    assert calls == [1] and off.host.gaps_report()["rewarm_after_wake"] is False


def test_a_failing_warm_up_is_reported_once_and_turned_off(capsys):
    from phantom.config import RunConfig
    from phantom.sim import SimOptions, Simulation

    sim = Simulation(SimOptions.for_run(RunConfig(host_speed=1.0), get_gpu("H100")))
    calls = []

    def broken():
        calls.append(1)
        raise RuntimeError("no fake device here")

    sim.host.warm_dispatch_paths = broken
    sim.host.woke_up()
    sim.host.woke_up()
    assert calls == [1] and sim.host.wake_ups == 2
    assert sim.host.gaps_report()["rewarm_after_wake"] is False
    assert capsys.readouterr().err.count("warming the dispatch path after a collective failed") == 1


def test_warming_the_handler_path_leaves_no_trace_in_the_simulation(run_script):
    # PhantomMode.warm_dispatch_paths runs fake ops in phantom's own time after each round
    # trip: none may count as the script's op, kernel, memory, freed storage or host time.
    text = """
        import torch
        w = torch.randn(64, 64, device="cuda", requires_grad=True)
        loss = (torch.randn(8, 64, device="cuda") @ w).sum()
        loss.backward()
        mode = w.fake_mode
        sim = mode.sim
        def state():
            tl = sim.timeline
            return (sim.ops_intercepted, sim.host.dispatch_entries, sim.host.releases, sim.host._release_credit,
                    sim.allocator.allocated_bytes, sim.host.user_host_ns,
                    tl.host_ns, {s: tl.stream(s).ready_ns for s in (0,)}, dict(sim.class_gpu_ns))
        sim.host.begin_op("test")  # phantom's own time, as inside a collective
        before = state()
        for _ in range(3):
            sim.host.warm_dispatch_paths()
        after = state()
        sim.host.end_op()
        assert mode._warm_inputs is not None and mode._depth == 0
        print("UNCHANGED" if after == before else f"CHANGED {before} -> {after}")
    """
    proc, report = run_script(text)
    assert proc.returncode == 0, proc.stderr
    assert "UNCHANGED" in proc.stdout, proc.stdout
    assert report["simulation"]["host_gaps"]["rewarm_after_wake"] is True


def test_report_says_how_fast_this_host_was_taken_to_be(run_script):
    text = """
        import torch
        x = torch.randn(256, 256, device="cuda")
        for _ in range(3):
            x = x @ x
        torch.cuda.synchronize()
    """
    proc, measured = run_script(text)
    assert proc.returncode == 0, proc.stderr
    sim = measured["simulation"]
    assert sim["host_speed_source"] == "measured"
    assert sim["host_speed"] == pytest.approx(
        sim["host_step_ns_simulated"] * sim["host_mean_slowdown_simulated"] / sim["host_step_ns_here"])
    assert "as fast as the simulated node's host at its typical speed (measured)" in proc.stderr
    proc, given = run_script(text, "--host-speed", "2.5")
    assert proc.returncode == 0, proc.stderr
    assert given["simulation"]["host_speed"] == 2.5
    assert given["simulation"]["host_speed_source"] == "given"


def test_speed_factor_is_the_best_over_the_mean_of_recent_probes(tmp_path, monkeypatch):
    import phantom.host.speed as host

    times = iter([100, 100, 100, 100,  # warm-up, then the first sample (min of 3)
                  200, 200, 200,       # a slow spell
                  100, 100, 100])      # fast again
    monkeypatch.setattr(host, "probe_ns", lambda clock=None: next(times))
    monkeypatch.setenv("PHANTOM_PROBE_STRENGTH", "1.0")  # the probe's correction in full
    speed = host.HostSpeedNormalizer(None)
    assert speed.factor == 1.0
    assert speed.sample() == pytest.approx(100 / 150)  # mean of (100, 200), not one sample
    assert speed.sample() == pytest.approx(100 / (400 / 3))


def test_the_probe_swing_is_damped_towards_the_machines_usual_speed(tmp_path, monkeypatch):
    import phantom.host.speed as host

    monkeypatch.setattr(host, "PROBE_STRENGTH", 0.5)
    monkeypatch.delenv("PHANTOM_PROBE_STRENGTH", raising=False)
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    monkeypatch.setattr(host, "probe_ns", lambda clock=None: 150)
    usual = host.HostSpeedNormalizer(tmp_path)  # a first run: its own median is the usual
    assert usual.usual_ns() == 150 and usual.factor == pytest.approx(usual.best_ns / 150)

    times = iter([100] * 4 + [300] * 3)  # a run that starts fast, then a slow spell
    monkeypatch.setattr(host, "probe_ns", lambda clock=None: next(times))
    speed = host.HostSpeedNormalizer(tmp_path)
    assert speed.best_ns == 100 and speed.usual_ns() == pytest.approx(125)  # runs' median
    slow = speed.sample_now()
    # 3x slower than the best, but only half the swing from the usual speed is taken out
    assert slow == pytest.approx(100 / (300 ** 0.5 * speed.usual_ns() ** 0.5))
    assert 100 / 300 < slow < 100 / speed.usual_ns()


def test_the_usual_speed_is_that_of_lone_runs_kept_across_runs(tmp_path, monkeypatch):
    import phantom.host.speed as host

    monkeypatch.delenv("PHANTOM_PROBE_STRENGTH", raising=False)
    monkeypatch.setattr(host, "probe_ns", lambda clock=None: 200)
    host.HostSpeedNormalizer(tmp_path)
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "phantom-123")  # a rank of a multi-process run
    monkeypatch.setattr(host, "probe_ns", lambda clock=None: 900)
    rank = host.HostSpeedNormalizer(tmp_path)
    assert rank.strength == 1.0 and rank.factor == pytest.approx(rank.best_ns / 900)  # in full
    monkeypatch.delenv("TORCHELASTIC_RUN_ID")
    monkeypatch.setattr(host, "probe_ns", lambda clock=None: 100)
    later = host.HostSpeedNormalizer(tmp_path)
    assert later.strength == host.PROBE_STRENGTH
    (cache,) = tmp_path.glob("host-probe-*.json")
    runs = json.loads(cache.read_text())["run_probe_ns"]
    assert list(runs.values()) == [200, 100]  # lone runs only, the newest last
    assert later.usual_ns() == 150
    for _ in range(host.HISTORY + 3):
        host.HostSpeedNormalizer(tmp_path)
    assert len(json.loads(cache.read_text())["run_probe_ns"]) == host.HISTORY


def test_a_host_bound_run_on_a_changing_machine_is_flagged():
    from phantom.report.summary import _host_caution

    steady = {"samples": 20, "mean_slowdown": 1.02, "max_slowdown": 1.1, "slow_share": 0.0}
    changing = {"samples": 20, "mean_slowdown": 1.4, "max_slowdown": 1.9, "slow_share": 0.45}

    def report(busy, variation):
        return {"gpu_busy_fraction": busy, "simulation": {"host_speed_variation": variation}}

    caution = _host_caution(report(0.4, changing))
    assert caution and "1.9x slower" in caution and "45%" in caution
    assert _host_caution(report(0.97, changing)) is None  # GPU-bound: host time barely matters
    assert _host_caution(report(0.4, steady)) is None
    assert _host_caution({"gpu_busy_fraction": 0.4, "simulation": {}}) is None  # older reports
    # converted by the pace process's readings, not the probe's: what the caution warns of
    assert _host_caution(report(0.4, {**changing, "pace_samples": 40})) is None
    nothing_ran = report(0.0, changing)
    nothing_ran["simulation"]["ops_intercepted"] = 0  # the script ended before any CUDA op
    assert _host_caution(nothing_ran) is None


def test_a_host_bound_run_while_torch_ran_slow_here_is_flagged():
    # The pure-Python probe can see the machine steady while PyTorch's own code runs far below
    # its best: the reference step timed at start-up tells.
    from phantom.report.summary import _host_caution

    steady = {"samples": 20, "mean_slowdown": 1.02, "max_slowdown": 1.1, "slow_share": 0.0}

    def report(busy, at_start, best=432_000.0):
        return {"gpu_busy_fraction": busy, "simulation": {
            "host_speed_variation": steady, "host_step_ns_at_start": at_start, "host_step_ns_here": best}}

    caution = _host_caution(report(0.5, 700_000.0))
    assert caution and "reference CPU step took 1.6x its best" in caution
    assert _host_caution(report(0.5, 500_000.0)) is None  # start-up noise, not a slow state
    assert _host_caution(report(0.95, 700_000.0)) is None  # GPU-bound
    assert _host_caution(report(0.5, None)) is None


def test_a_host_bound_run_calibrated_beside_busy_processes_is_flagged():
    from phantom.report.summary import _host_caution

    steady = {"samples": 20, "mean_slowdown": 1.02, "max_slowdown": 1.1, "slow_share": 0.0}

    def report(busy, contended):
        return {"gpu_busy_fraction": busy, "simulation": {
            "host_speed_variation": steady, "host_gaps": {"calibration_contended": contended}}}

    caution = _host_caution(report(0.5, True))
    assert caution and "other processes" in caution and "alone" in caution
    changing = report(0.5, True)  # a busy machine's probe also sees it slow: the cause comes first
    changing["simulation"]["host_speed_variation"] = {**steady, "max_slowdown": 1.9, "slow_share": 0.4}
    assert "other processes" in _host_caution(changing)
    assert _host_caution(report(0.5, False)) is None
    assert _host_caution(report(0.95, True)) is None  # GPU-bound


def test_variation_summarises_the_probe_samples(monkeypatch):
    import phantom.host.speed as host

    times = iter([100, 100, 100, 100, 250, 250, 250, 110, 110, 110])
    monkeypatch.setattr(host, "probe_ns", lambda clock=None: next(times))
    speed = host.HostSpeedNormalizer(None)
    speed.sample()
    speed.sample()
    v = speed.variation()
    assert v["samples"] == 3 and v["max_slowdown"] == 2.5
    assert v["slow_share"] == pytest.approx(1 / 3) and v["mean_slowdown"] == pytest.approx(4.6 / 3)


def test_garbage_collection_is_not_charged_as_host_time(run_script):
    # A full collection over a large heap takes real time here (time.monotonic stays real);
    # under phantom most of such a heap is the simulation's own objects, so the simulated
    # clock (time.perf_counter) must not move with it (HostAccount.on_gc).
    text = """
        import gc, time
        import torch
        junk = [[i] for i in range(1_500_000)]  # GC-tracked objects for the collector to walk
        x = torch.randn(64, 64, device="cuda")
        torch.cuda.synchronize()
        real0, sim0 = time.monotonic(), time.perf_counter()
        for _ in range(3):
            gc.collect()
        real_s, sim_s = time.monotonic() - real0, time.perf_counter() - sim0
        print(f"collected real_ms={1e3 * real_s:.1f} sim_ms={1e3 * sim_s:.3f}")
    """
    proc, _ = run_script(text, "--host-speed", "1.0")
    assert proc.returncode == 0, proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("collected"))
    real_ms, sim_ms = (float(part.split("=")[1]) for part in line.split()[1:])
    assert real_ms > 30, line  # the collections did cost real time here
    assert sim_ms < 0.05 * real_ms, line


def test_steady_gaps_charge_the_mean_of_the_same_point_of_earlier_iterations():
    from phantom.host.steady import SteadyGaps

    gaps = SteadyGaps()
    gaps.new_iteration()  # the first iteration (set-up included) is not remembered
    assert gaps.typical("mm", 100.0) == 100.0  # first sighting: as measured
    assert gaps.typical("mm", 50.0) == 50.0  # the second mm of the iteration: a new site
    gaps.new_iteration()
    assert gaps.typical("mm", 300.0) == 100.0  # a slow sighting: the earlier iterations' mean
    assert gaps.typical("mm", 50.0) == 50.0
    gaps.new_iteration()
    assert gaps.typical("mm", 0.0) == 200.0  # ... and it counts from the next iteration on
    for _ in range(10):  # the window keeps the last WINDOW sightings only
        gaps.new_iteration()
        gaps.typical("mm", 10.0)
    gaps.new_iteration()
    assert gaps.typical("mm", 10.0) == 10.0
    assert gaps.share() == pytest.approx(14 / 16)


def test_steady_gaps_do_not_remember_the_first_iteration():
    # The first iteration runs from the script's start: its n-th mm may follow set-up work
    # (a model moved to the device, a framework's first calls) where later ones follow the
    # loop's own work, only a few times shorter.
    from phantom.host.steady import SteadyGaps

    gaps = SteadyGaps()
    gaps.typical("mm", 400_000.0)  # after set-up
    gaps.new_iteration()
    assert gaps.typical("mm", 150_000.0) == 150_000.0  # measured, not the set-up's 400 us
    gaps.new_iteration()
    assert gaps.typical("mm", 130_000.0) == 150_000.0  # steady from the second iteration on


def test_steady_gaps_charge_new_work_at_a_site_as_measured():
    from phantom.host.steady import SteadyGaps

    gaps = SteadyGaps()
    gaps.new_iteration()  # the first iteration (set-up included) is not remembered
    gaps.typical("add", 20_000.0)
    gaps.new_iteration()
    big = 20_000.0 + 2 * SteadyGaps.GUARD_NS  # a checkpoint before this op, say
    assert gaps.typical("add", big) == big  # charged in full, not averaged away
    gaps.new_iteration()
    assert gaps.typical("add", 20_000.0) == 20_000.0  # and not remembered
    gaps.new_iteration()
    assert gaps.typical("add", 60_000.0) == 20_000.0  # 3x: noise, averaged from here on
    gaps.new_iteration()
    assert gaps.typical("add", 0.0) == pytest.approx(100_000 / 3)


def test_steady_gaps_forget_one_off_work_of_earlier_iterations():
    from phantom.host.steady import SteadyGaps

    gaps = SteadyGaps()
    gaps.new_iteration()  # the first iteration (set-up included) is not remembered
    gaps.typical("mm", 500_000.0)  # lazy initialisation before the first mm
    gaps.new_iteration()
    assert gaps.typical("mm", 10_000.0) == 10_000.0  # not averaged with it
    gaps.new_iteration()
    assert gaps.typical("mm", 20_000.0) == 10_000.0
    gaps.new_iteration()
    assert gaps.typical("mm", 20_000.0) == 15_000.0


def test_steady_gaps_restart_a_site_far_above_twice_running():
    # The calls counted before the first iteration mark include set-up: a site can start
    # with a sighting that is not its usual work. Two sightings far above in a row restart it.
    from phantom.host.steady import SteadyGaps

    gaps = SteadyGaps()
    gaps.new_iteration()  # the first iteration (set-up included) is not remembered
    gaps.typical("collective", 10_000.0)
    big = 10_000.0 + 2 * SteadyGaps.GUARD_NS
    for _ in range(2):
        gaps.new_iteration()
        assert gaps.typical("collective", big) == big
    assert gaps.new_work == 1
    gaps.new_iteration()
    assert gaps.typical("collective", 0.9 * big) == big  # steady at the new level


def test_steady_gaps_charge_another_ranks_means_when_shared():
    # Ranks doing the same work charge what one of them measured: each site of the coming
    # iteration, by name, from the other's means(); this rank's own sightings still tell new
    # work apart, and count for its own means once it stops sharing.
    from phantom.host.steady import SteadyGaps

    leader, other = SteadyGaps(), SteadyGaps()
    leader.new_iteration(), other.new_iteration()  # first iterations: not remembered
    for gaps, measured in ((leader, 100.0), (other, 140.0)):
        gaps.typical("aten.mm.default", measured)
        gaps.typical("aten.mm.default", 2 * measured)
        gaps.new_iteration()
    assert leader.means() == {("aten.mm.default", 0): 100.0, ("aten.mm.default", 1): 200.0}
    other.use_shared(leader.means())
    assert other.typical("aten.mm.default", 150.0) == 100.0
    # a few hundred us above its own: a crowded core's noise, not work (SHARED_GUARD_NS)
    assert other.typical("aten.mm.default", 280.0 + SteadyGaps.GUARD_NS) == 200.0
    big = 2 * SteadyGaps.SHARED_GUARD_NS  # new work on this rank alone: the excess is charged
    other.new_iteration()
    other.use_shared(leader.means())
    assert other.typical("aten.mm.default", big) == 100.0 + big - 145.0
    assert other.typical("aten.add.Tensor", 7.0) == 7.0  # a site the leader has not seen
    other.new_iteration()  # sharing lasts one iteration; the own windows kept counting
    assert other.means()[("aten.mm.default", 0)] == pytest.approx(145.0)
    assert other.means()[("aten.mm.default", 1)] == pytest.approx((2 * 280.0 + SteadyGaps.GUARD_NS) / 2)


def test_steady_gaps_keep_host_work_of_one_iteration(run_script):
    # Host work added in one iteration only (a slow log line, a checkpoint) still costs that
    # iteration its time: SteadyGaps averages noise, not new work.
    text = """
        import time
        import torch
        w = torch.randn(512, 512, device="cuda", requires_grad=True)
        opt = torch.optim.SGD([w], lr=0.1)
        for step in range(8):
            t0 = time.perf_counter()
            if step == 6:
                # 50 ms of real host work here, in CPU time (what phantom measures: a wall
                # deadline gives less CPU time on a loaded machine)
                deadline = time.process_time() + 0.05
                while time.process_time() < deadline:
                    pass
            (w @ w).sum().backward()
            opt.step()
            opt.zero_grad()
            torch.cuda.synchronize()
            print(f"step {step} {1e3 * (time.perf_counter() - t0):.3f}")
    """
    proc, report = run_script(text, "--host-speed", "1.0")
    assert proc.returncode == 0, proc.stderr
    ms = [float(ln.split()[2]) for ln in proc.stdout.splitlines() if ln.startswith("step")]
    # 50 ms here, scaled by the speed probe (slow states of up to ~2.5x seen), against
    # well under a millisecond for the other steps: charged in full, not averaged away
    assert ms[6] > 15 and max(ms[2:6] + ms[7:]) < 5, ms
    gaps = report["simulation"]["host_gaps"]
    assert gaps["mode"] == "steady" and 0.5 < gaps["steady_share"] < 1


def test_straggler_pace_is_the_slowest_of_the_world():
    import math

    from phantom.host.steady import expected_max_normal, straggler_pace

    assert expected_max_normal(1) == 0.0
    assert expected_max_normal(2) == pytest.approx(1 / math.sqrt(math.pi), rel=1e-4)
    assert expected_max_normal(8) == pytest.approx(1.4236, abs=1e-3)  # tabulated order statistic
    assert straggler_pace(1, 0.1) == 1.0
    assert straggler_pace(4, 0.0) == 1.0
    assert straggler_pace(2, 0.1) == pytest.approx(math.exp(0.1 / math.sqrt(math.pi)), rel=1e-4)
    paces = [straggler_pace(w, 0.1) for w in (2, 8, 64, 512)]
    assert paces == sorted(paces) and paces[-1] < 1.5  # grows slowly with the world


def test_the_rank_spread_is_the_committed_real_runs():
    import importlib.util
    import statistics

    path = Path(__file__).resolve().parents[1] / "bench" / "host" / "rank_host_spread.py"
    spec = importlib.util.spec_from_file_location("rank_host_spread", path)
    spread = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(spread)
    from phantom.hardware.gpus import HOST_RANK_SPREAD, HOST_RANK_SPREADS

    measured = [round(spread.run_spread(spread.host_ms_per_step(spread.DATA / rel))[1], 3)
                for rel, _ in spread.RUNS]
    assert measured == list(HOST_RANK_SPREADS)
    assert HOST_RANK_SPREAD == statistics.median(HOST_RANK_SPREADS)
    assert {get_gpu(n).host_rank_spread for n in ("H100", "H200", "A100")} == {HOST_RANK_SPREAD}


def test_a_code_versions_first_runs_are_known_as_such(tmp_path):
    from phantom.host.calibration import FIRST_RUNS
    from phantom.host.speed import DISPATCH_OVERHEAD, WAKE_PENALTY

    speed = HostSpeedNormalizer(tmp_path)
    assert speed.known(DISPATCH_OVERHEAD, "code") == 0
    for v in range(FIRST_RUNS):
        speed.settle(DISPATCH_OVERHEAD, "code", 10.0 + v)
    assert HostSpeedNormalizer(tmp_path).known(DISPATCH_OVERHEAD, "code") == FIRST_RUNS  # remembered
    assert speed.known(DISPATCH_OVERHEAD, "other code") == 0 and speed.known(WAKE_PENALTY, "code") == 0


def test_list_tensors_are_charged_at_the_nodes_cost_not_as_measured():
    """A foreach op's list tensors each cross into Python here: that share of the gap is taken
    off (the calibration's per-tensor cost) and the node's per-tensor cost charged instead, for
    the op's list arguments and for the list it returns (in the next gap)."""
    from phantom.config import RunConfig
    from phantom.sim import SimOptions, Simulation

    sim = Simulation(SimOptions.for_run(RunConfig(host_speed=1.0, host_gaps="measured"), get_gpu("H100")))
    sim.host.gap_scale = 1.0
    sim.host.dispatch_overhead_ns = 0.0
    sim.host.list_overhead_ns, sim.host.list_real_ns = (1_000.0, 3_000.0), (190.0, 1_800.0)
    ticks = iter([0, 15_000, 15_000, 35_000, 35_000, 40_000])
    sim.host.clock = lambda: next(ticks)
    sim.host._real_mark = sim.host.clock()
    host0 = sim.timeline.host_ns
    sim.host.begin_op("foreach", dispatched=True, list_inputs=10)  # 15 us measured
    sim.host._real_mark = sim.host.clock()
    assert sim.timeline.host_ns - host0 == pytest.approx(15_000 - 10 * 1_000 + 10 * 190)
    sim.host.returned_list(5)
    host1 = sim.timeline.host_ns
    sim.host.begin_op("next", dispatched=True)  # 20 us measured, 5 returned tensors in it
    sim.host._real_mark = sim.host.clock()
    assert sim.timeline.host_ns - host1 == pytest.approx(20_000 - 5 * 3_000 + 5 * 1_800)
    host2 = sim.timeline.host_ns
    sim.host.begin_op("plain", dispatched=True)  # the returned list was charged once
    assert sim.timeline.host_ns - host2 == pytest.approx(5_000)
    assert sim.host.list_tensors == 15


def test_the_calibrations_fake_block_starts_its_own_gap():
    """What runs between two pairs of the dispatch-overhead calibration (the real block, the
    caller's speed probe) is not the fake block's first gap: it put ~2.3 us on every entry."""
    from phantom.host import calibration
    from phantom.config import RunConfig
    from phantom.sim import SimOptions, Simulation

    sim = Simulation(SimOptions.for_run(RunConfig(host_speed=1.0), get_gpu("H100")))
    now = [0]
    sim.host.clock = lambda: now[0]
    sim.host.measure_raw_gaps()

    def fake_step():  # one handler entry after 2 us of the script's time
        now[0] += 2_000
        sim.host.begin_op("op", dispatched=True)
        sim.host.end_op()

    def real_step():
        now[0] += 1_000

    pairs = calibration.paired_blocks(sim.host, fake_step, real_step, pairs=3, steps=4)
    for fake_ns, real_ns, entries in pairs:
        assert (fake_ns, real_ns, entries) == (8_000, 4_000, 4)
        now[0] += 1_000_000  # a speed probe between pairs


def test_a_run_reports_its_list_tensor_costs(run_script):
    text = """
        import torch
        xs = [torch.zeros(8, device="cuda") for _ in range(200)]
        for _ in range(3):
            torch._foreach_mul_(xs, 0.5)
        torch.cuda.synchronize()
    """
    proc, report = run_script(text)
    assert proc.returncode == 0, proc.stderr
    gaps = report["simulation"]["host_gaps"]
    assert gaps["list_tensors"] == 600
    assert gaps["list_tensor_host_ns"] == [190.0, 500.0]
    assert all(v >= 0.0 for v in gaps["list_tensor_overhead_ns"])
    assert gaps["list_tensor_overhead_ns"][0] > 0.0  # measured at start-up


def test_a_freed_storage_costs_the_nodes_allocator_not_the_finalizer():
    """A fake storage's finalizer reaching Python costs the gap it dies in time a GPU host does
    not spend: that (measured at start-up) comes off, and the node's malloc-and-free is charged
    instead, once per storage, in the gap the storage died in only."""
    from phantom.config import RunConfig
    from phantom.sim import SimOptions, Simulation

    sim = Simulation(SimOptions.for_run(RunConfig(host_speed=1.0, host_gaps="measured"), get_gpu("H100")))
    sim.host.gap_scale = 1.0
    sim.host.dispatch_overhead_ns = 0.0
    sim.host.release_overhead_ns, sim.host.release_host_ns = 3_000.0, 1_300.0
    now = [0]
    sim.host.clock = lambda: now[0]
    sim.host._real_mark = 0
    now[0] = 20_000
    for key in (-1, -2):  # two storages die in this gap (keys no live storage has)
        sim.storage._release(key)
    before = sim.timeline.host_ns
    sim.host.begin_op("after")
    assert sim.timeline.host_ns - before == pytest.approx(20_000 - 2 * (3_000 - 1_300))
    assert sim.host.releases == 2
    sim.host._real_mark = now[0]
    now[0] += 5_000
    before = sim.timeline.host_ns
    sim.host.begin_op("next")  # nothing freed here
    assert sim.timeline.host_ns - before == pytest.approx(5_000)


def test_a_runtime_call_charges_the_nodes_cost_not_the_simulations():
    """A simulated CUDA runtime call (a current-stream query, an event record) ends the
    script's gap where it is entered; what the simulation does to answer it, calls nested in
    it included, is not the script's time, and the node's cost of the outermost call is
    charged instead, once, with the calibrated way in and out taken off the gap."""
    from phantom.config import RunConfig
    from phantom.sim import SimOptions, Simulation

    sim = Simulation(SimOptions.for_run(RunConfig(host_speed=1.0, host_gaps="measured"), get_gpu("H100")))
    sim.host.gap_scale = 1.0
    sim.host.dispatch_overhead_ns = 0.0
    sim.host.api_overhead_ns = 500.0
    now = [0]
    sim.host.clock = lambda: now[0]
    sim.host._real_mark = 0
    before = sim.timeline.host_ns
    sim.host.api_enter("record", now=3_000)  # the script ran 3 us; the wrapper read the clock
    now[0] = 9_000  # the simulation's own work: not charged
    sim.host.api_enter("current_stream", now=9_000)  # nested (the record's stream lookup)
    sim.host.begin_op("sync")  # a sync inside the call: no gap of its own
    sim.host.end_op()
    sim.host.api_exit(4_280.0)
    sim.host.api_exit(5_770.0)
    assert sim.timeline.host_ns - before == pytest.approx(3_000 - 500 + 5_770)
    assert (sim.host.api_calls, sim.host.api_host_ns) == (1, 5_770.0)
    now[0] = 12_000
    before = sim.timeline.host_ns
    sim.host.begin_op("op")  # the next gap starts where the call returned
    assert sim.timeline.host_ns - before == pytest.approx(12_000 - 9_000)


def test_the_calibration_measures_this_machine_not_the_ranks_pace():
    """A multi-GPU run's pace (its slowest rank's) multiplies the charged gaps; the calibration
    measures this machine's raw gaps, so it must not see it (it did: every overhead taken off
    came out `pace` times too large, and the gaps it was taken from were multiplied again)."""
    from phantom.host import calibration
    from phantom.config import RunConfig
    from phantom.sim import SimOptions, Simulation

    sim = Simulation(SimOptions.for_run(RunConfig(host_speed=1.0), get_gpu("H100")))
    sim.host.set_world(8)
    assert sim.host.rank_pace > 1.05
    now = [0]
    sim.host.clock = lambda: now[0]
    sim.host.measure_raw_gaps()

    def fake_step():
        now[0] += 2_000
        sim.host.begin_op("op", dispatched=True)
        sim.host.end_op()

    for fake_ns, _, entries in calibration.paired_blocks(sim.host, fake_step, lambda: None, pairs=2, steps=4):
        assert fake_ns / entries == pytest.approx(2_000)


def test_runtime_calls_cost_what_they_cost_the_node(run_script):
    """`torch.cuda.current_stream()` and a stream context in a loop: each is charged the node's
    measured cost (bench/probes/host_cuda_api.py) plus at most a little of the loop, not phantom's
    Python; the report counts them."""
    from phantom.interception.cuda_api import NODE_HOST_NS

    text = """
        import time, torch
        side = torch.cuda.Stream()
        torch.cuda.synchronize()
        for name, call in (("current_stream", torch.cuda.current_stream),
                           ("stream_context", lambda: torch.cuda.stream(side).__enter__() or None)):
            t0 = time.perf_counter()
            for _ in range(500):
                call()
            print(name, "=", (time.perf_counter() - t0) / 500 * 1e9)
    """
    proc, report = run_script(text, "--gpu", "H200")
    assert proc.returncode == 0, proc.stderr
    per_call = {k.strip(): float(v) for k, v in
                (line.split("=") for line in proc.stdout.splitlines() if "=" in line)}
    node = NODE_HOST_NS["current_stream"]
    assert node <= per_call["current_stream"] < node + 3_000
    # entered and never left: the whole context's cost is charged on entry
    assert per_call["stream_context"] >= NODE_HOST_NS["stream_context"]
    assert report["simulation"]["host_gaps"]["api_calls"] >= 1_000


def test_a_full_history_is_charged_without_measuring_in_most_runs(tmp_path, monkeypatch):
    """Once a code version has HISTORY calibrations here, most runs charge their median instead
    of measuring again (host.calibration._recent_calibration); one in REMEASURE_EVERY measures."""
    import types

    from phantom.host import calibration
    from phantom.host.speed import API_CALL, DISPATCH_OVERHEAD, HISTORY, LIST_INPUT, LIST_OUTPUT, RELEASE

    speed = HostSpeedNormalizer(tmp_path)
    for kind in (DISPATCH_OVERHEAD, LIST_INPUT, LIST_OUTPUT, RELEASE, API_CALL):
        for v in range(HISTORY - 1):
            speed.settle(kind, "code", 1000.0 + v)
        assert speed.recent(kind, "code") is None  # not full yet: measure
        speed.settle(kind, "code", 5000.0)
    assert speed.recent(DISPATCH_OVERHEAD, "code") == 1007.0  # the median of the last HISTORY
    account = types.SimpleNamespace(speed=HostSpeedNormalizer(tmp_path), host_speed=2.0,
                                    host_step_ns_here=400_000.0, sample_speed=lambda: None)
    recent = calibration._recent_calibration

    monkeypatch.setattr(calibration, "_remeasure_draw", lambda: 0.99)
    charged = recent(account, "code", blocking=False)
    assert charged["dispatch_overhead_ns"] == 2014.0  # at the node: x host speed
    assert charged["list_overhead_ns"] == (2014.0, 2014.0) and charged["wake_penalty_ns"] == 0.0
    assert recent(account, "code", blocking=True) is None  # no wake-up history yet: measure
    assert recent(account, "other code", blocking=False) is None
    monkeypatch.setattr(calibration, "_remeasure_draw", lambda: 0.0)  # this run's turn to measure
    assert recent(account, "code", blocking=False) is None


def test_contention_is_other_runnable_tasks_on_half_the_cpus(monkeypatch):
    import os

    from phantom.host import machine as host

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert not host.cpu_contended(others=0)
    assert host.cpu_contended(others=1)  # one busy process beside it on two CPUs
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    assert not host.cpu_contended(others=7)
    assert host.cpu_contended(others=8)


def test_runnable_tasks_are_read_from_proc_loadavg(monkeypatch):
    import builtins
    from pathlib import Path

    from phantom.host import machine as host

    if Path("/proc/loadavg").exists():
        assert host.other_runnable_tasks(samples=3, interval_s=0.0) >= 0
    real_open = builtins.open

    def no_proc(path, *a, **k):
        if str(path) == "/proc/loadavg":
            raise OSError("no /proc")
        return real_open(path, *a, **k)

    monkeypatch.setattr(builtins, "open", no_proc)
    assert host.other_runnable_tasks(samples=3, interval_s=0.0) is None
    assert not host.cpu_contended()  # unknown: treated as alone


def test_a_calibration_beside_busy_processes_keeps_its_own_history(run_script, tmp_path, monkeypatch):
    """One busy process beside the calibration on a 2-CPU machine lowered it by ~30%: measured
    so, it goes to the version's contended history, never into the one lone runs charge."""
    import os
    import shutil
    import subprocess
    import sys

    from phantom.host.calibration import CONTENDED_SUFFIX, PACED_SUFFIX
    from phantom.host.speed import DISPATCH_OVERHEAD, code_fingerprint
    from phantom.native.build import library_path

    cache = tmp_path / "cache"
    cache.mkdir()
    if library_path().exists():  # the built fake CUDA library, not rebuilt for this test
        shutil.copy(library_path(), cache / library_path().name)
    monkeypatch.setenv("PHANTOM_CACHE_DIR", str(cache))
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if cpus > 8:
        pytest.skip("keeping half of many CPUs busy is not a unit test")
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(max(1, cpus // 2))]
    try:
        proc, report = run_script("import torch\nx = torch.ones(4, device='cuda') + 1\n", "--gpu", "H200")
    finally:
        for hog in hogs:
            hog.kill()
    assert proc.returncode == 0, proc.stderr
    assert report["simulation"]["host_gaps"]["calibration_contended"] is True
    histories = json.loads(next(cache.glob("host-probe-*.json")).read_text())[DISPATCH_OVERHEAD]
    # converted by the pace process's reading, or by the probe where it had none yet
    assert list(histories) in ([code_fingerprint() + PACED_SUFFIX + CONTENDED_SUFFIX],
                               [code_fingerprint() + CONTENDED_SUFFIX])
