"""Timing step of `phantom profile`: real kernel times of recorded calls, into a kernel database.

Run as a plain process (`python -m phantom.cost.profile.timing`) with a CUDA build of torch and
no phantom interception: the fake CUDA library must not be loaded where real kernels are timed.

Method (same as bench/kernels/measure.py, whose grid `--sweep` runs through this timer):
  * random inputs rebuilt from the recorded metadata (rebuild.py), never zeros;
  * input sets rotated so their total exceeds 3x the L2 cache: repeated calls of a small op do
    not find their inputs warm in L2 (the training step they came from does not either);
  * warm-up calls first (cuBLAS handles, heuristics, lazy module loading);
  * kernel time only: a batch of back-to-back calls is captured in a CUDA graph and replayed,
    timed with CUDA events, divided by the calls. A graph replays the launches without Python
    or dispatcher work in between, so a 3 us kernel is not timed as a 7 us Python launch; the
    profiler's kernel records would drop the gaps too but cost far more per row. Ops that cannot
    be captured (host syncs) run as an eager loop behind a GPU sleep that lets the host enqueue
    all calls before the timed region starts (the row's method says which);
  * the median over repeats of (replay time / calls).

The clock: rows are timed back to back after a second of big GEMMs, so a compute-bound row
carries the SM clock the board's power limit allows a stream of it, and engine/power.py takes
GEMM rows to the burst clock by a measured share: a change of this method must re-measure it
(see Note [Database GEMM clock] in phantom/hardware/power.py).
"""
from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch

from phantom.cost.db import KernelDB, KernelDBError, Row, load_db, new_db, now_iso
from phantom.cost.profile.rebuild import Unrebuildable, rebuild

GB = 1024**3


@dataclass
class Timing:
    ns: float
    repeats: int
    calls: int
    buffers: int
    method: str


class Timer:
    """Times fn(inputs) over rotated input sets (see the module docstring)."""

    def __init__(self, l2_bytes: int, reps: int = 15, target_ms: float = 2.0, mem_cap: float = 8 * GB) -> None:
        self.reps = reps
        self.target_ms = target_ms
        self.rotate_bytes = 3 * l2_bytes
        self.max_buf = 32
        self.mem_cap = mem_cap
        self.cpm = self._cycles_per_ms()

    @staticmethod
    def _events(n: int) -> list[tuple[torch.cuda.Event, torch.cuda.Event]]:
        return [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]

    def _cycles_per_ms(self) -> float:
        (s, e), = self._events(1)
        s.record()
        torch.cuda._sleep(2_000_000)
        e.record()
        torch.cuda.synchronize()
        return 2_000_000 / max(s.elapsed_time(e), 1e-3)

    def n_buffers(self, in_bytes: float) -> int:
        per = max(in_bytes, 1.0)
        n = min(self.max_buf, math.ceil(self.rotate_bytes / per))
        return max(1, min(n, int(self.mem_cap // per)))

    def time(self, fn: Callable[[Any], Any], make: Callable[[], Any], in_bytes: float,
             graph: bool = True, hide_cpu: bool = True) -> Timing:
        nbuf = self.n_buffers(in_bytes)
        bufs = [make() for _ in range(nbuf)]
        for b in bufs[:2]:
            fn(b)
        torch.cuda.synchronize()
        est = min(self._once_ms(fn, bufs[0]), self._once_ms(fn, bufs[-1]))
        calls = int(min(200, max(1, round(self.target_ms / est))))
        if calls > 1:
            calls = max(calls, min(nbuf, 200))
        times: list[float] = []
        method = "graph"
        if graph:
            try:
                times = self._graph(fn, bufs, calls)
            except Exception as exc:  # not capturable (a host sync, a CPU scalar): eager loop
                method = f"eager (graph failed: {type(exc).__name__})"
                torch.cuda.synchronize()
        else:
            method = "eager"
        if not times:
            times = self._eager(fn, bufs, calls, hide_cpu)
        del bufs
        return Timing(ns=statistics.median(times) * 1e3, repeats=len(times), calls=calls, buffers=nbuf,
                      method=method)

    def _once_ms(self, fn: Callable, b: Any) -> float:
        (s, e), = self._events(1)
        s.record()
        fn(b)
        e.record()
        torch.cuda.synchronize()
        return max(s.elapsed_time(e), 1e-3)

    def _graph(self, fn: Callable, bufs: list, calls: int) -> list[float]:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up on a side stream, as torch.cuda.graph requires
            for i in range(3):
                fn(bufs[i % len(bufs)])
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for i in range(calls):
                fn(bufs[i % len(bufs)])
        g.replay()
        torch.cuda.synchronize()
        evs = self._events(self.reps)
        for s, e in evs:
            s.record()
            g.replay()
            e.record()
        torch.cuda.synchronize()
        del g
        return [s.elapsed_time(e) * 1e3 / calls for s, e in evs]  # us per call

    def _eager(self, fn: Callable, bufs: list, calls: int, hide_cpu: bool) -> list[float]:
        sleep_cycles = 0
        if hide_cpu:
            t0 = time.perf_counter()
            for i in range(calls):
                fn(bufs[i % len(bufs)])
            torch.cuda.synchronize()
            enqueue_ms = (time.perf_counter() - t0) * 1e3
            sleep_cycles = int(min(enqueue_ms * 2.0 + 0.2, 200.0) * self.cpm)
        evs = self._events(self.reps)
        for s, e in evs:
            if sleep_cycles:
                torch.cuda._sleep(sleep_cycles)
            s.record()
            for i in range(calls):
                fn(bufs[i % len(bufs)])
            e.record()
        torch.cuda.synchronize()
        return [s.elapsed_time(e) * 1e3 / calls for s, e in evs]


# --------------------------------------------------------------------------------------
# Device description
# --------------------------------------------------------------------------------------
def driver_version() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip().splitlines()[0] if out.stdout.strip() else "unknown"
    except Exception as exc:  # nvidia-smi missing
        return f"unknown ({type(exc).__name__})"


def gpu_preset_for(device_name: str) -> str:
    """The phantom GPU preset whose device_name matches this real GPU."""
    from phantom.hardware.gpus import list_gpus

    for g in sorted(list_gpus(), key=lambda g: -len(g.device_name)):
        if g.device_name == device_name:
            return g.name
    for g in sorted(list_gpus(), key=lambda g: -len(g.name)):
        if g.name in device_name:
            return g.name
    raise KernelDBError(f"GPU {device_name!r} matches no phantom preset (see `phantom gpus`); "
                        f"add one in phantom/hardware/gpus.py")


def device_header() -> dict[str, Any]:
    name = torch.cuda.get_device_name(0)
    return {"gpu": gpu_preset_for(name), "device_name": name, "driver": driver_version(),
            "cuda": torch.version.cuda, "torch": torch.__version__, "date": now_iso(),
            "host": platform.node(),
            "method": "CUDA-graph replay of rotated random inputs, CUDA events, median (phantom profile)"}


def open_db(path: str, header: dict[str, Any]) -> KernelDB:
    if os.path.exists(path):
        db = load_db(path)
        if db.gpu != header["gpu"]:
            raise KernelDBError(f"{path}: header.gpu is {db.gpu!r}, expected {header['gpu']!r} (this GPU); "
                                f"write to another --db")
        db.header.update({k: v for k, v in header.items() if k != "gpu"})
        return db
    return new_db(**header)


# --------------------------------------------------------------------------------------
# Timing recorded calls
# --------------------------------------------------------------------------------------
def time_records(records: list[dict], db: KernelDB, db_path: str, timer: Timer, budget_s: float,
                 log: Callable[[str], None] = print, skip_existing: bool = True,
                 save_every_s: float = 15.0) -> dict[str, Any]:
    """Time each record (most simulated GPU time first) into `db`, saving every few seconds."""
    t0 = last_save = time.time()
    done, skipped, failed, out_of_time = 0, [], [], 0
    for r in records:
        key = r["key"]
        if skip_existing and key in db.rows:
            continue
        if time.time() - t0 > budget_s:
            out_of_time += 1
            continue
        try:
            func, make, in_bytes = rebuild(r)
            tm = timer.time(lambda b: func(*b[0], **b[1]), make, in_bytes)
        except Unrebuildable as e:
            skipped.append({"key": key, "reason": str(e)})
            log(f"  skip {key[:110]}: {e}")
            continue
        except Exception as e:  # a call the GPU refuses (bad rebuilt arguments, OOM): log, go on
            failed.append({"key": key, "reason": f"{type(e).__name__}: {str(e)[:200]}"})
            log(f"  FAIL {key[:110]}: {type(e).__name__}: {str(e)[:160]}")
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            continue
        db.add(key, Row(op=r["op"], ns=tm.ns, repeats=tm.repeats, date=now_iso(), origin="profile"))
        done += 1
        if time.time() - last_save > save_every_s:
            db.save(db_path)
            last_save = time.time()
    db.save(db_path)
    return {"timed": done, "skipped": skipped, "failed": failed, "out_of_time": out_of_time,
            "seconds": round(time.time() - t0, 1)}


def warm_up_clocks(seconds: float) -> None:
    """Big GEMMs so the SM clock has ramped before the first timed call."""
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    t0 = time.time()
    while time.time() - t0 < seconds:
        for _ in range(10):
            torch.mm(a, a)
        torch.cuda.synchronize()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m phantom.cost.profile.timing",
                                 description="Time recorded op signatures on this machine's GPU.")
    ap.add_argument("--records", action="append", default=[], help="record file(s) from the record step")
    ap.add_argument("--db", required=True, help="kernel database to add rows to (created if missing)")
    ap.add_argument("--sweep", action="store_true", help="also time the standard grid (bench/kernels/measure.py)")
    ap.add_argument("--sweep-groups", default="", help="comma-separated measure.py groups (default: all)")
    ap.add_argument("--sweep-out", help="write the sweep's calibration rows (measure.py format) here")
    ap.add_argument("--budget-s", type=float, default=300.0, help="stop starting new timings after this")
    ap.add_argument("--retime", action="store_true", help="time keys already in the database again")
    ap.add_argument("--report", help="write skipped/failed keys as JSON here")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("phantom profile: no CUDA device here (needs a real NVIDIA GPU and a CUDA build of torch)",
              file=sys.stderr)
        return 2
    from phantom.cost.profile.record import merge_records

    torch.manual_seed(0)
    header = device_header()
    db = open_db(args.db, header)
    props = torch.cuda.get_device_properties(0)
    timer = Timer(int(getattr(props, "L2_cache_size", 50 * 2**20)))
    t_start = time.time()
    print(f"device {header['device_name']} ({header['gpu']}), driver {header['driver']}, torch {header['torch']}, "
          f"CUDA {header['cuda']}; {len(db.rows)} rows in {args.db}", flush=True)
    warm_up_clocks(1.0)
    result: dict[str, Any] = {}
    if args.records:
        records = merge_records(args.records)
        print(f"{len(records)} recorded signatures", flush=True)
        result["records"] = time_records(records, db, args.db, timer, args.budget_s,
                                         log=lambda s: print(s, flush=True), skip_existing=not args.retime)
        r = result["records"]
        print(f"[{time.time() - t_start:6.1f}s] timed {r['timed']}, skipped {len(r['skipped'])}, "
              f"failed {len(r['failed'])}, out of time {r['out_of_time']}", flush=True)
    if args.sweep:
        from phantom.cost.profile.sweep import run_sweep

        left = max(0.0, args.budget_s - (time.time() - t_start))
        groups = {g.strip() for g in args.sweep_groups.split(",") if g.strip()} or None
        result["sweep"] = run_sweep(db, args.db, timer, left, args.sweep_out, header, groups)
    if args.report:
        import json

        with open(args.report, "w") as f:
            json.dump(result, f, indent=1)
    print(f"{len(db.rows)} rows in {args.db} after {time.time() - t_start:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
