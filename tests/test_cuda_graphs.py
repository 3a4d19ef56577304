"""CUDA graphs: capture, replay and their memory pool (engine/graphs.py, cuda_api.CUDAGraph), and
torch.compile(mode="reduce-overhead") replaying its graphs (interception/compiled.py)."""
from __future__ import annotations

import re

import pytest

from phantom.cost.base import KernelCost
from phantom.engine import Event, Timeline
from phantom.engine.graphs import (REPLAY_HOST_US, GraphCapture, replay, replay_host_ns)
from phantom.engine.timeline import LAUNCH_LATENCY_NS


def _cost(us: float) -> KernelCost:
    return KernelCost(us * 1e3, "elementwise", "model", 0.0, 0.0)


def _launcher(tl: Timeline, ends: list):
    def launch(kernel, stream_id):
        ends.append((kernel.name, stream_id, *tl.launch(stream_id, kernel.cost.gpu_ns, 0.0,
                                                        in_graph=True, uses_sms=kernel.uses_sms)))
    return launch


def test_replay_runs_the_captured_kernels_back_to_back_after_one_launch():
    capture = GraphCapture(stream_id=5, pool=-1)
    for name in ("a", "b", "c"):
        capture.kernel(name, _cost(10), 5)
    tl, ends = Timeline(), []
    tl.host_ns = 1_000.0
    replay(capture.graph, tl, 0, [], _launcher(tl, ends))
    start = 1_000.0 + LAUNCH_LATENCY_NS
    assert [e[1] for e in ends] == [0, 0, 0]  # the capture stream runs as the replay stream
    assert [e[3] for e in ends] == [start + 10e3, start + 20e3, start + 30e3]
    assert tl.host_ns == 1_000.0  # no host time per node
    # a second replay queues behind the first, as a second graph launch on the stream does
    replay(capture.graph, tl, 0, [], _launcher(tl, ends))
    assert ends[-1][3] == start + 60e3
    assert len(tl.stream(0).pending_ends) == 2  # one queue entry per graph launch


def test_replay_keeps_the_captures_fork_and_join():
    """A side stream joined by an event recorded in the capture runs as a lane of the graph's
    own; the replay stream waits for it, and work after the join waits for the side work."""
    capture = GraphCapture(stream_id=5, pool=-1)
    capture.kernel("main", _cost(10), 5)
    fork = Event()
    capture.record_event(fork, 5)
    assert capture.wait_event(7, fork) and capture.captures(7)
    capture.kernel("side", _cost(50), 7, uses_sms=False)  # a copy: overlaps compute
    join = Event()
    capture.record_event(join, 7)
    capture.kernel("main2", _cost(10), 5)
    assert capture.wait_event(5, join)
    capture.kernel("after_join", _cost(1), 5)
    tl, ends = Timeline(), []
    replay(capture.graph, tl, 0, [99], _launcher(tl, ends))
    by_name = {name: (sid, start, end) for name, sid, start, end in ends}
    t0 = LAUNCH_LATENCY_NS
    assert by_name["side"][0] == 99 and by_name["side"][1] == t0 + 10e3
    assert by_name["main2"][1] == t0 + 10e3  # ran beside the side lane
    assert by_name["after_join"][1] == t0 + 60e3  # waited for the side lane
    assert tl.stream(0).ready_ns == t0 + 61e3


def test_an_event_from_outside_the_capture_does_not_join_it():
    capture = GraphCapture(stream_id=5, pool=-1)
    outside = Event(time_ns=0.0)
    assert not capture.wait_event(7, outside) and not capture.captures(7)
    assert not capture.wait_stream(5, 7)  # waiting on a stream that is not capturing


def test_replay_host_time_follows_the_measured_points():
    for nodes, us in REPLAY_HOST_US:
        assert replay_host_ns(nodes) == pytest.approx(us * 1e3)
    assert replay_host_ns(300) == pytest.approx((16.62 + (38.85 - 16.62) * (300 - 128) / 896) * 1e3)
    assert replay_host_ns(4096) > replay_host_ns(1024)  # past the last point, at the last slope


GRAPH_SCRIPT = """
import time, torch, torch.nn as nn, torch.nn.functional as F

torch.manual_seed(0)
model = nn.Sequential(*[nn.Sequential(nn.Linear(256, 256), nn.GELU()) for _ in range(8)]).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-3, capturable=True, foreach=True)
x = torch.randn(4, 256, device="cuda")

def step():
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
    return loss

def per_step_ms(fn, n=10):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3 / n

s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    for _ in range(3):
        opt.zero_grad(set_to_none=True)
        step()
torch.cuda.current_stream().wait_stream(s)
eager_ms = per_step_ms(lambda: (opt.zero_grad(set_to_none=False), step()))

try:
    torch.cuda.CUDAGraph().capture_begin()
except RuntimeError as e:
    print("default stream:", e)

g = torch.cuda.CUDAGraph()
opt.zero_grad(set_to_none=True)
with torch.cuda.graph(g):
    assert torch.cuda.is_current_stream_capturing()
    static_loss = step()
assert not torch.cuda.is_current_stream_capturing()
before = torch.cuda.memory_allocated()
graph_ms = per_step_ms(g.replay)
print(f"eager_ms={eager_ms:.4f} graph_ms={graph_ms:.4f}")
print("replays allocate:", torch.cuda.memory_allocated() - before)

# the graph's pool is its own: eager work does not reuse the blocks its capture freed
reserved = torch.cuda.memory_reserved()
tmp = torch.empty(4 * 2**20, device="cuda")
print("eager after capture reserved more:", torch.cuda.memory_reserved() > reserved)

g2 = torch.cuda.CUDAGraph()
try:
    with torch.cuda.graph(g2):
        y = model(x).sum()
        y.item()
except RuntimeError as e:
    print("item in capture:", str(e).splitlines()[0])

graphed = torch.cuda.make_graphed_callables(model, (x,))
def graphed_step():
    loss = graphed(x).pow(2).mean()
    loss.backward()
graphed_ms = per_step_ms(graphed_step)
print(f"graphed_ms={graphed_ms:.4f}")
"""


def test_cuda_graph_capture_and_replay_end_to_end(run_script):
    proc, report = run_script(GRAPH_SCRIPT, "--gpu", "H100")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "CUDA graphs must be captured on a non-default stream" in out
    eager = float(re.search(r"eager_ms=([\d.]+)", out).group(1))
    graph = float(re.search(r"graph_ms=([\d.]+)", out).group(1))
    graphed = float(re.search(r"graphed_ms=([\d.]+)", out).group(1))
    # 8 tiny layers: eager is host-bound (tens of launches), one replay is a few microseconds
    # of host and the same kernels back to back
    assert graph < eager / 2, (eager, graph)
    assert graphed < eager, (eager, graphed)
    assert "replays allocate: 0" in out
    assert "eager after capture reserved more: True" in out
    assert "item in capture: CUDA error: operation not permitted when stream is capturing" in out


COMPILE_SCRIPT = """
import time, torch, torch.nn as nn

# 24 layers: the replay saves a host launch per kernel (48 of them), a margin this machine's
# host-time noise does not cover (with 6 layers a loaded CI machine once turned it round)
model = nn.Sequential(*[nn.Sequential(nn.Linear(512, 512), nn.GELU()) for _ in range(24)]).cuda()
x = torch.randn(4, 512, device="cuda")
for mode in ("default", "reduce-overhead"):
    compiled = torch.compile(model, mode=None if mode == "default" else mode)
    steady = []
    with torch.no_grad():
        for i in range(10):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            compiled(x)
            torch.cuda.synchronize()
            if i >= 4:  # the best steady call: one call's host time moves with this machine
                steady.append((time.perf_counter() - t0) * 1e3)
    print(f"{mode}_ms={min(steady):.4f}")
"""


def test_reduce_overhead_replays_a_cuda_graph(run_script):
    proc, report = run_script(COMPILE_SCRIPT, "--gpu", "H100")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "does not simulate" not in proc.stderr
    default = float(re.search(r"default_ms=([\d.]+)", proc.stdout).group(1))
    graphed = float(re.search(r"reduce-overhead_ms=([\d.]+)", proc.stdout).group(1))
    # the same kernels; the replay saves a host launch per kernel (24 GEMMs, 24 generated)
    assert graphed < default, (default, graphed)
