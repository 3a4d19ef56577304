"""Host time: the node's host-cost table, the account of the script's own Python, saved
profiles, this machine's calibration, and the end-to-end behaviour of --host-time."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from phantom.hardware import get_gpu

DATA = Path(__file__).resolve().parents[1] / "bench" / "host" / "data"

TABLE = {
    "provenance": {"device": "test"}, "units": "ns",
    "api_call_ns": {"method": 300.0, "function": 500.0, "property": 100.0},
    "ops": {"aten.add.Tensor": {"no_grad": 5_000.0, "grad": 8_000.0},
            "aten.mm.default": {"no_grad": 15_000.0, "grad": 19_000.0},
            "aten.view.default": {"no_grad": 1_000.0, "grad": 1_500.0},
            "aten.mul.Tensor": {"no_grad": 6_000.0, "grad": 9_000.0},
            "aten.sub.Tensor": {"no_grad": 7_000.0, "grad": 10_000.0}},
    "lists": {"aten._foreach_add_.Scalar": {"lengths": [1, 4, 16], "ns": [6_000.0, 7_500.0, 13_500.0]}},
    "backward_node_ns": 2_500.0, "record_function_ns": 6_000.0,
    "backward": {"fixed_ns": 50_000.0, "marginal_per_node_ns": 2_000.0},
}


@pytest.fixture
def costs(tmp_path):
    from phantom.host.costs import HostCosts

    path = tmp_path / "table.json"
    path.write_text(json.dumps(TABLE))
    return HostCosts.load(path)


class FakeClock:
    """A thread clock the test moves by hand."""
    def __init__(self) -> None:
        self.ns = 0

    def __call__(self) -> int:
        return self.ns


def make_account(costs, mode="measured", probe_ratio=2.0, boundary_ns=100.0, replay=None, record=False):
    from phantom.engine import Timeline
    from phantom.host.account import HostAccount
    from phantom.host.machine import MachineSpeed

    gpu = get_gpu("H200")
    node = gpu.host_probe_ns * gpu.host_mean_slowdown
    machine = MachineSpeed(node / probe_ratio, boundary_ns, boundary_ns, 0.0, "test")
    host = HostAccount(gpu, Timeline(sm_count=gpu.sm_count), mode, costs, machine, replay, record,
                       0.0, lambda: None)
    host.steady = None  # each segment as measured
    clock = host.clock = FakeClock()
    host.reset_counts()
    return host, clock


def torch_call(host, clock, spent_inside=50_000, kind="method"):
    host.torch_call_enter("f", kind, clock.ns)
    clock.ns += spent_inside  # torch's and phantom's work: never measured
    host.torch_call_exit()


def test_the_table_prices_rows_list_lines_and_class_medians(costs):
    import torch

    aten = torch.ops.aten
    assert costs.op_ns(aten.add.Tensor, grad=False) == 5_000.0
    assert costs.op_ns(aten.add.Tensor, grad=True) == 8_000.0
    # the engine's own costs: per node and per pass, with the pass's fixed cost taken out
    assert costs.backward_ns(nodes=3, passes=1) == 3 * 2_000.0 + 50_000.0
    # a list op: the line through its measured lengths (500 ns a tensor)
    assert costs.op_ns(aten._foreach_add_.Scalar, grad=False, list_tensors=64) == pytest.approx(5_500.0 + 500.0 * 64)
    # an op with no row: its class's median (pointwise: add, mul, sub)
    assert costs.op_ns(aten.div.Tensor, grad=False) == 6_000.0
    assert costs.op_ns(aten.bmm.default, grad=False) == 15_000.0  # gemm
    report = costs.report()
    assert report["charged_ns"]["class"] == 21_000.0 and report["charged_ns"]["backward"] == 56_000.0
    assert report["row_share"] == pytest.approx(1 - 21_000.0 / (sum(report["charged_ns"].values())))


def test_ops_are_classed_by_their_schema_and_tags():
    import torch

    from phantom.host.costs import op_class

    aten = torch.ops.aten
    assert op_class(aten.view.default) == "view"
    assert op_class(aten.transpose.int) == "view"
    assert op_class(aten.addmm.default) == "gemm"
    assert op_class(aten.gelu.default) == "pointwise"
    assert op_class(aten._foreach_mul_.Scalar) == "list"
    assert op_class(aten.cat.default) == "list"
    assert op_class(aten.empty.memory_format) == "factory"
    assert op_class(aten.sum.dim_IntList) == "reduction"
    assert op_class(aten.copy_.default) == "copy"


@pytest.mark.parametrize("text, field", [("not json", "not JSON"), ("{}", "malformed"),
                                         ('{"ops": {}, "api_call_ns": {}}', "malformed")])
def test_a_broken_table_is_a_clear_error(tmp_path, text, field):
    from phantom.host.costs import HostCosts, HostCostTableError

    path = tmp_path / "t.json"
    path.write_text(text)
    with pytest.raises(HostCostTableError, match=field):
        HostCosts.load(path)


def test_the_shipped_table_was_measured_on_the_node():
    from phantom.host.costs import HostCosts, table_path

    costs = HostCosts.load(table_path("H200"))
    prov = costs.provenance
    assert "H200" in json.dumps(prov) and prov.get("torch") and prov.get("date")
    assert len(costs.rows) >= 100
    for op in ("aten.add.Tensor", "aten.mm.default", "aten.addmm.default", "aten.view.default"):
        assert op in costs.rows, op
    # measured values, in the range a current Xeon host pays per eager call (1-40 us)
    assert 1_000 < costs.rows["aten.add.Tensor"]["no_grad"] < 40_000
    assert costs.rows["aten.add.Tensor"]["grad"] > costs.rows["aten.add.Tensor"]["no_grad"]
    assert costs.backward_node_ns > 0 and costs.lines
    assert table_path("A100") == table_path("H200")  # presets without their own take the H200's


def test_script_segments_are_measured_between_torch_calls(costs):
    host, clock = make_account(costs, probe_ratio=2.0, boundary_ns=100.0)
    clock.ns += 1_100  # the script's Python
    torch_call(host, clock)
    clock.ns += 600
    torch_call(host, clock, kind="property")
    # each call's boundary cost (100) comes half off the segment before it, half off the one
    # after: (1100 - 50) and (600 - 50 - 50) of this machine's ns, at 2 node ns each
    assert host.script_host_ns == pytest.approx(2 * 1_050 + 2 * 500)
    assert host.segments == 2 and host.torch_calls == 2
    assert host.priced_host_ns == 300.0 + 100.0  # a method's and a property's way in


def test_ops_inside_a_torch_call_are_priced_not_measured(costs):
    import torch

    host, clock = make_account(costs)
    host.torch_call_enter("linear", "function", clock.ns)
    for op in (torch.ops.aten.t.default, torch.ops.aten.addmm.default):
        clock.ns += 7_000  # phantom's dispatch: not the script's
        host.begin_op(op, dispatched=True, grad=True)
        clock.ns += 30_000
        host.end_op()
    host.torch_call_exit()
    assert host.script_host_ns == 0
    assert host.dispatched_ops == 2
    assert host.priced_host_ns == pytest.approx(
        500.0 + costs.op_ns(torch.ops.aten.t.default, True) + costs.op_ns(torch.ops.aten.addmm.default, True))


def test_in_a_backward_pass_only_hooks_python_is_measured(costs):
    import torch

    host, clock = make_account(costs, probe_ratio=1.0, boundary_ns=0.0)
    host.torch_call_enter("backward", "method", clock.ns)
    saved = host.backward_enter()
    for _ in range(3):  # the engine's ops, with its own C++ between them
        clock.ns += 5_000
        host.begin_op(torch.ops.aten.mul.Tensor, dispatched=True)
        clock.ns += 20_000
        host.end_op()
    clock.ns += 4_000  # the engine, then a hook's Python up to its first torch call
    torch_call(host, clock)
    clock.ns += 3_000  # the hook's Python between two torch calls: the script's
    torch_call(host, clock)
    clock.ns += 2_000  # the hook returns into the engine
    host.begin_op(torch.ops.aten.mul.Tensor, dispatched=True)
    host.end_op()
    host.backward_exit(saved)
    host.torch_call_exit()
    assert host.script_host_ns == 3_000
    # the call's way in, the pass, the engine's ops at their no-grad rows (no autograd node is
    # running outside a real backward: no node costs), the hook's two calls
    assert host.priced_host_ns == pytest.approx(300.0 + 50_000.0 + 4 * 6_000.0 + 2 * 300.0)


def test_phantoms_own_entries_and_runtime_calls_are_not_the_scripts(costs):
    host, clock = make_account(costs, probe_ratio=1.0, boundary_ns=0.0)
    clock.ns += 1_000
    host.api_enter("cuda.synchronize", clock.ns)
    clock.ns += 50_000  # the simulation answers the call
    host.api_exit(2_500.0)
    clock.ns += 1_000
    host.begin_op("iteration")
    clock.ns += 80_000
    host.end_op()
    clock.ns += 1_000
    host.storage_released(400)  # a freed fake tensor's finalizer inside the script's segment
    clock.ns += 400
    torch_call(host, clock)
    assert host.script_host_ns == 3_000
    assert host.api_host_ns == 2_500.0


def test_off_charges_nothing_and_counted_replays_a_saved_profile(costs, tmp_path):
    from phantom.host.profile import ProfileReader

    host, clock = make_account(costs, mode="off")
    clock.ns += 5_000
    torch_call(host, clock)
    assert host.script_host_ns == host.priced_host_ns == 0 and host.timeline.host_ns == 0
    assert host.at_pace(4_000.0) == 0.0

    saving, clock = make_account(costs, record=True, probe_ratio=1.0, boundary_ns=0.0)
    for spent in (1_000, 2_000, 3_000):
        clock.ns += spent
        torch_call(saving, clock)
    saving.save_profile(tmp_path, rank=0)
    replay = ProfileReader(tmp_path, rank=3)  # a rank the saving run did not simulate: rank 0's
    counted, clock = make_account(costs, mode="counted", replay=replay)
    for spent in (7, 7, 7, 7):  # this machine's time is not read
        clock.ns += spent
        torch_call(counted, clock)
    # the saved sequence, then a segment past its end at the median of its site
    assert counted.script_host_ns == 1_000 + 2_000 + 3_000 + 2_000
    assert replay.report()["matched"] == 3 and replay.report()["departed"] == 1


def test_counted_replay_matches_segments_iteration_by_iteration(tmp_path):
    """Segments are matched within each iteration by call and order; a departing run stays
    aligned at every iteration mark, and a segment with no counterpart costs its call's median
    in the steady iterations, or a typical steady segment."""
    from phantom.host.profile import ProfileReader, ProfileWriter

    saved = ProfileWriter()
    for site, ns in (("a", 10), ("b", 20), ("iteration", 1),             # start-up + iteration 0
                     ("a", 11), ("b", 21), ("c", 50), ("iteration", 2),  # iteration 1
                     ("end", 99)):                                      # the script's end
        saved.add(site, ns)
    saved.save(tmp_path, rank=0)
    replay = ProfileReader(tmp_path, rank=0)
    charged = [replay.next(site) for site in (
        "a", "b", "b", "iteration",  # a second `b` in iteration 0: b's steady median
        "a", "c", "iteration",       # iteration 1 as saved, its `b` skipped
        "end", "a", "iteration",     # the saved end, then a third iteration begins
        "a", "zzz")]                 # past the saved iterations: the last one's; unknown: typical
    assert charged == [10, 20, 21, 1, 11, 50, 2, 99, 11, 2, 11, 16]
    assert replay.report()["matched"] == 8 and replay.report()["departed"] == 4


def test_a_missing_profile_says_how_to_save_one(tmp_path):
    from phantom.host.profile import HostProfileError, ProfileReader

    with pytest.raises(HostProfileError, match="--save-host-profile"):
        ProfileReader(tmp_path, 0)


def test_presets_carry_their_measured_python_speed():
    runs = json.loads((DATA / "host_reference_h200.json").read_text())["runs"]
    assert get_gpu("H200").host_probe_ns == min(r["probe_ns"] for r in runs)
    assert get_gpu("A100").host_probe_ns == get_gpu("H200").host_probe_ns
    assert get_gpu("H100").host_probe_ns > get_gpu("H200").host_probe_ns


def test_a_calibration_is_read_only_for_this_cpu_and_python(tmp_path):
    from phantom.host.machine import MachineSpeed, cpu_model, read_calibration, write_calibration
    import platform

    path = tmp_path / "cal.json"
    write_calibration(MachineSpeed(300_000.0, 1_500.0, 4_000.0, 3_000.0, "", cpu_model(), platform.python_version()), path)
    speed = read_calibration(path)
    assert speed.probe_ns == 300_000.0 and speed.source == str(path)
    data = json.loads(path.read_text())
    data["cpu"] = "another CPU"
    path.write_text(json.dumps(data))
    assert read_calibration(path) is None
    path.write_text("broken")
    assert read_calibration(path) is None


def test_calibrate_writes_the_file_runs_read(tmp_path, run_script):
    from conftest import run_phantom

    out = tmp_path / "cal.json"
    proc = run_phantom(["calibrate", "--force", "--out", str(out)], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert data["probe_ns"] > 0 and data["release_ns"] >= 0
    assert data["boundary_python_ns"] > data["boundary_ns"] > 0


def test_counted_without_a_profile_is_a_usage_error(tmp_path, run_script):
    proc, _ = run_script("print('hi')", "--host-time", "counted")
    assert proc.returncode == 2 and "--host-profile" in proc.stderr


GPT_STEP = """
    import time
    import torch
    import torch.nn as nn
    torch.manual_seed(0)

    class Block(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.ln, self.fc, self.proj = nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            return x + self.proj(torch.nn.functional.gelu(self.fc(self.ln(x))))

    model = nn.Sequential(*[Block(128) for _ in range(4)]).cuda()
    opt = torch.optim.AdamW(model.parameters(), foreach=True)
    x = torch.randn(1, 32, 128, device="cuda")
    for step in range(6):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        model(x).float().pow(2).mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        print(f"step {step} {(time.perf_counter() - t0) * 1e9:.0f}")
"""


def _steps(stdout: str) -> list[str]:
    return [ln.split()[2] for ln in stdout.splitlines() if ln.startswith("step")]


def test_counted_host_time_is_the_same_on_any_machine_state(run_script, tmp_path):
    # What --host-time counted promises: bit-identical iteration times, run alone, beside a
    # busy process, and with an empty cache directory (docs/host-time.md).
    profile = tmp_path / "profile"
    proc, report = run_script(GPT_STEP, "--host-time", "measured", "--save-host-profile", str(profile))
    assert proc.returncode == 0, proc.stderr
    assert (profile / "rank0.npz").exists()
    measured = [int(v) for v in _steps(proc.stdout)]
    runs = []
    counted = ("--host-time", "counted", "--host-profile", str(profile))
    proc, report = run_script(GPT_STEP, *counted)
    assert proc.returncode == 0, proc.stderr
    runs.append(_steps(proc.stdout))
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        proc, _ = run_script(GPT_STEP, *counted)
    finally:
        busy.kill()
        busy.wait()
    runs.append(_steps(proc.stdout))
    env_cache = dict(os.environ, PHANTOM_CACHE_DIR=str(tmp_path / "empty-cache"))
    from conftest import run_phantom

    script = tmp_path / "script.py"
    proc = run_phantom(["run", *counted, str(script)], cwd=tmp_path, env=env_cache)
    assert proc.returncode == 0, proc.stderr
    runs.append(_steps(proc.stdout))
    assert runs[0] == runs[1] == runs[2], runs
    host = report["simulation"]["host_time"]
    assert host["mode"] == "counted" and host["replay"]["departed"] == 0
    # the counted run charges what the measured one saved: the same steps to rounding
    assert [int(v) for v in runs[0]][2:] == pytest.approx(measured[2:], rel=1e-6)


def test_torchs_work_is_priced_at_what_it_costs_on_the_node(run_script):
    # Real H200 host (bench/host/data/host_h200.json, bench/host/host_calibration.py, not the
    # table's script): a loop of `torch.add(x, 1.0, out=y)` on CUDA took 6.95 us an op,
    # `x.view(16, 16)` 2.32 us, the Python loop included. What phantom prices for torch's part
    # of each (the table) must be that, less a loop's sub-us Python. (Its `w @ w`, 21.9 us, is
    # not: the table's mm rows came out 12-17 us on three later calls.)
    text = """
        import torch
        from phantom.interception import current_simulation
        host = current_simulation().host
        x = torch.randn(256, device="cuda")
        y = torch.empty_like(x)
        for name, fn in (("add_out", lambda: torch.add(x, 1.0, out=y)), ("view", lambda: x.view(16, 16))):
            before = host.priced_host_ns
            for _ in range(1_000):
                fn()
            print(name, (host.priced_host_ns - before) / 1_000 / 1e3)
    """
    proc, _ = run_script(text, "--gpu", "H200")
    assert proc.returncode == 0, proc.stderr
    priced = {name: float(us) for name, us in (ln.split() for ln in proc.stdout.splitlines())}
    real = json.loads((DATA / "host_h200.json").read_text())["eager_op_host_us"]
    for name, us in priced.items():
        assert 0.6 * real[name] < us < 1.25 * real[name], (name, us, real[name])


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
    proc, _ = run_script(text)
    assert proc.returncode == 0, proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("collected"))
    real_ms, sim_ms = (float(part.split("=")[1]) for part in line.split()[1:])
    assert real_ms > 30, line  # the collections did cost real time here
    assert sim_ms < 0.05 * real_ms, line


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
    proc, report = run_script(text)
    assert proc.returncode == 0, proc.stderr
    ms = [float(ln.split()[2]) for ln in proc.stdout.splitlines() if ln.startswith("step")]
    # 50 ms here, converted to the node (this machine's ratio), against
    # well under a millisecond for the other steps: charged in full, not averaged away
    assert ms[6] > 15 and max(ms[2:6] + ms[7:]) < 5, ms
    host = report["simulation"]["host_time"]
    assert host["mode"] == "measured" and 0.5 < host["steady_share"] < 1


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
    assert gaps.typical("add", 60_000.0) == 20_000.0  # 3x: noise, one-sided
    gaps.new_iteration()
    assert gaps.typical("add", 0.0) == 20_000.0  # the second fastest of three: not moved by it


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
    assert gaps.typical("mm", 20_000.0) == 10_000.0  # the fastest while fewer than three


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
    assert other.typical("aten.mm.default", big) == 100.0 + big - 140.0
    assert other.typical("aten.add.Tensor", 7.0) == 7.0  # a site the leader has not seen
    other.new_iteration()  # sharing lasts one iteration; the own windows kept counting
    assert other.means()[("aten.mm.default", 0)] == 140.0
    assert other.means()[("aten.mm.default", 1)] == 280.0


def test_steady_gaps_charge_a_low_order_statistic_of_earlier_iterations():
    from phantom.host.steady import SteadyGaps

    gaps = SteadyGaps()
    gaps.new_iteration()  # the first iteration (set-up included) is not remembered
    assert gaps.typical("mm", 100.0) == 100.0  # first sighting: as measured
    assert gaps.typical("mm", 50.0) == 50.0  # the second mm of the iteration: a new site
    gaps.new_iteration()
    assert gaps.typical("mm", 300.0) == 100.0  # a slow sighting: the earlier iterations' 100
    assert gaps.typical("mm", 50.0) == 50.0
    gaps.new_iteration()
    assert gaps.typical("mm", 0.0) == 100.0  # ... and a stall does not move it (one-sided noise)
    for _ in range(10):  # the window keeps the last WINDOW sightings only
        gaps.new_iteration()
        gaps.typical("mm", 10.0)
    gaps.new_iteration()
    assert gaps.typical("mm", 10.0) == 10.0
    assert gaps.share() == pytest.approx(14 / 16)
