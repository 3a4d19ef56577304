"""Python's clocks, answered from the simulated host clock.

`time.perf_counter[_ns]` and `time.time[_ns]` return simulated time, offset by an origin:
`time.time` continues from the real wall clock's whole second at the moment the simulation
started (timestamps in logs look normal), `time.perf_counter`, whose reference point Python
leaves undefined, from a fixed one. Both origins are whole seconds so that the same run gives
the same float differences: a float of ~1.8e9 s is 238 ns coarse, and where it rounds a
script's `t1 - t0` depends on the origin's digits below its whole seconds. Whole-second
origins round every run's differences alike (all of them share one binade, 2^30-2^31 s, for
`time.time`; one fixed value for `time.perf_counter`).

The main thread sees simulated time, and so does a thread running a backward pass
(autograd's engine runs a CUDA graph's backward on its own device thread, hooks included, while
the main thread waits in `.backward()`: its host time is the simulated host's, as on a GPU
machine). Other threads (data loaders, progress bars, watchdogs) keep real clocks, since their
waits are real.

Policy decisions (docs/simulation.md, 'Time'):
- `time.monotonic` stays real: libraries use it for timeouts and rate limits, which must
  follow the wall clock of the machine running the simulation.
- `time.sleep(s)` on the main thread advances the simulated host clock by `s` and returns at
  once: a real GPU script that sleeps spends that time idle on the host, and waiting for it
  here would only slow the simulation.
"""
from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

import torch

from phantom.host.account import HOST_CLOCK_NS

if TYPE_CHECKING:
    from phantom.sim import Simulation

REAL_PERF_COUNTER_NS = time.perf_counter_ns
REAL_TIME_NS = time.time_ns
REAL_SLEEP = time.sleep
# A clock read on the node: `time.perf_counter()` in a loop on H200 hosts, 0.06 us
# (bench/probes/host_cuda_api.py, bench/host/data/cuda_api_h200_*.json). Under phantom the patched
# clock's own Python path is phantom's time, not the script's (HostAccount.api_enter).
CLOCK_READ_NS = 60.0

_MAIN_THREAD = threading.main_thread().ident
# -1 outside a backward pass; a C call, made only off the main thread
_graph_task = getattr(torch._C, "_current_graph_task_id", lambda: -1)


def simulated_thread() -> bool:
    """Whether the calling thread runs on the simulated host: the main thread, or one running
    a backward pass (autograd's device thread). Other threads keep real time."""
    return threading.get_ident() == _MAIN_THREAD or _graph_task() != -1


# time.perf_counter's simulated origin: a plausible uptime (one day), the same in every run.
PERF_COUNTER_ORIGIN_NS = 86_400 * 10**9


def install(sim: "Simulation") -> None:
    perf_origin_ns = PERF_COUNTER_ORIGIN_NS
    wall_origin_ns = REAL_TIME_NS() // 10**9 * 10**9  # whole seconds: see the module docstring
    real_perf_counter = time.perf_counter
    real_time = time.time

    def perf_counter_ns() -> int:
        now = HOST_CLOCK_NS()  # first: from here on the time is phantom's
        if not simulated_thread():
            return REAL_PERF_COUNTER_NS()
        return perf_origin_ns + int(sim.host.now_ns(CLOCK_READ_NS, now))

    def perf_counter() -> float:
        now = HOST_CLOCK_NS()  # first: from here on the time is phantom's
        if not simulated_thread():
            return real_perf_counter()
        return (perf_origin_ns + sim.host.now_ns(CLOCK_READ_NS, now)) / 1e9

    def time_ns() -> int:
        now = HOST_CLOCK_NS()  # first: from here on the time is phantom's
        if not simulated_thread():
            return REAL_TIME_NS()
        return wall_origin_ns + int(sim.host.now_ns(CLOCK_READ_NS, now))

    def time_() -> float:
        now = HOST_CLOCK_NS()  # first: from here on the time is phantom's
        if not simulated_thread():
            return real_time()
        return (wall_origin_ns + sim.host.now_ns(CLOCK_READ_NS, now)) / 1e9

    def sleep(seconds: float) -> None:
        if not simulated_thread():
            REAL_SLEEP(seconds)
            return
        if seconds < 0:
            raise ValueError("sleep length must be non-negative")
        sim.host.sleep_ns(seconds * 1e9)

    time.perf_counter = perf_counter
    time.perf_counter_ns = perf_counter_ns
    time.time = time_
    time.time_ns = time_ns
    time.sleep = sleep
