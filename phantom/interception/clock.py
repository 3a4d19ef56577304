"""Python's clocks, answered from the simulated host clock.

`time.perf_counter[_ns]` and `time.time[_ns]` return simulated time, offset so that they
continue from the real clock at the moment the simulation started (timestamps in logs look
normal). The main thread sees simulated time, and so does a thread running a backward pass
(autograd's engine runs a CUDA graph's backward on its own device thread, hooks included, while
the main thread waits in `.backward()`: its host time is the simulated host's, as on a GPU
machine). Other threads (data loaders, progress bars, watchdogs) keep real clocks, since their
waits are real.

Policy decisions (documented in the README):
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

if TYPE_CHECKING:
    from phantom.context import Simulation

REAL_PERF_COUNTER_NS = time.perf_counter_ns
REAL_TIME_NS = time.time_ns
REAL_SLEEP = time.sleep


def install(sim: "Simulation") -> None:
    main_thread = threading.main_thread().ident
    perf_origin_ns = REAL_PERF_COUNTER_NS()
    wall_origin_ns = REAL_TIME_NS()
    real_perf_counter = time.perf_counter
    real_time = time.time

    # -1 outside a backward pass; a C call, made only off the main thread
    graph_task = getattr(torch._C, "_current_graph_task_id", lambda: -1)

    def on_main() -> bool:
        return threading.get_ident() == main_thread or graph_task() != -1

    def perf_counter_ns() -> int:
        if not on_main():
            return REAL_PERF_COUNTER_NS()
        return perf_origin_ns + int(sim.host_now_ns())

    def perf_counter() -> float:
        if not on_main():
            return real_perf_counter()
        return (perf_origin_ns + sim.host_now_ns()) / 1e9

    def time_ns() -> int:
        if not on_main():
            return REAL_TIME_NS()
        return wall_origin_ns + int(sim.host_now_ns())

    def time_() -> float:
        if not on_main():
            return real_time()
        return (wall_origin_ns + sim.host_now_ns()) / 1e9

    def sleep(seconds: float) -> None:
        if not on_main():
            REAL_SLEEP(seconds)
            return
        if seconds < 0:
            raise ValueError("sleep length must be non-negative")
        sim.advance_host_ns(seconds * 1e9)

    time.perf_counter = perf_counter
    time.perf_counter_ns = perf_counter_ns
    time.time = time_
    time.time_ns = time_ns
    time.sleep = sleep
