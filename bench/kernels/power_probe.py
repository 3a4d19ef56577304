"""Power and SM clock of sustained kernels on the GPU as found (read-only: no setting is changed).

    python bench/kernels/power_probe.py --out results/power_probe_H100.json

What it measures, for phantom's power-limit model (phantom/hardware/power.py):
  * idle power;
  * each kernel class phantom costs (bf16 GEMM, flash attention forward + backward, a memory-bound
    elementwise kernel, a copy) run back to back for several seconds: power, SM clock, clock-event
    reasons and the kernel's own rate, in the steady window after the clock settles;
  * a persistent Triton GEMM on k of the SMs (grid = k programs, one per SM): power rises with k at
    the full clock until the board reaches its limit, then the clock falls. The slope below the
    limit is the power one busy SM draws at the full clock; the clock reached on more SMs, with
    the power held at the limit, gives the dynamic power's dependence on the clock, which is what
    a lower power limit (another board, or the same board capped) is read through.
  * the same at two data patterns (normal and sparse operands), which move the switching activity
    and so where the limit bites.

Power and clocks come from NVML (nvidia-ml-py), sampled every 50 ms by a thread; the kernel rate
from CUDA events around batches of launches. Nothing is written to the GPU's settings.
"""
from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from pathlib import Path

import torch

try:
    import pynvml
except ImportError:  # nvidia-ml-py is in the lent image; without it there is nothing to measure
    pynvml = None

STEADY_SKIP_S = 2.0  # the first seconds of a workload: the clock is still settling


class Sampler(threading.Thread):
    """NVML readings every `period` seconds: (time, instant W, average W, SM MHz, mem MHz, temp C, reasons)."""

    def __init__(self, period: float = 0.05):
        super().__init__(daemon=True)
        self.period = period
        self.rows: list[tuple] = []
        self._halt = threading.Event()
        pynvml.nvmlInit()
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())

    def _instant_w(self) -> float | None:
        try:
            fv = pynvml.nvmlDeviceGetFieldValues(self.handle, [pynvml.NVML_FI_DEV_POWER_INSTANT])[0]
            if fv.nvmlReturn == 0:
                return fv.value.uiVal / 1000.0
        except Exception:
            pass
        return None

    def run(self) -> None:
        h = self.handle
        while not self._halt.is_set():
            try:
                reasons = pynvml.nvmlDeviceGetCurrentClocksEventReasons(h)
            except Exception:
                reasons = -1
            self.rows.append((time.time(), self._instant_w(), pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0,
                              pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                              pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM),
                              pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU), reasons))
            time.sleep(self.period)

    def stop(self) -> None:
        self._halt.set()
        self.join()

    def window(self, t0: float, t1: float) -> dict:
        rows = [r for r in self.rows if t0 <= r[0] <= t1]
        if not rows:
            return {}
        inst = [r[1] for r in rows if r[1] is not None]
        reasons: dict[str, int] = {}
        for r in rows:
            reasons[hex(r[6])] = reasons.get(hex(r[6]), 0) + 1
        return {"samples": len(rows),
                "power_instant_w": statistics.median(inst) if inst else None,
                "power_avg_w": statistics.median(r[2] for r in rows),
                "sm_mhz": statistics.median(r[3] for r in rows),
                "sm_mhz_p10": sorted(r[3] for r in rows)[len(rows) // 10],
                "sm_mhz_p90": sorted(r[3] for r in rows)[(9 * len(rows)) // 10],
                "mem_mhz": statistics.median(r[4] for r in rows),
                "temp_c": statistics.median(r[5] for r in rows),
                "reasons": reasons}


def sustain(fn, seconds: float, sampler: Sampler, work: float, unit: str) -> dict:
    """Run fn back to back for `seconds`; rate and NVML readings over the steady window."""
    fn()
    torch.cuda.synchronize()
    start = time.time()
    batches = []
    n = 1
    while time.time() - start < seconds:
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(n):
            fn()
        e1.record()
        e1.synchronize()
        ms = e0.elapsed_time(e1)
        batches.append((time.time(), ms, n))
        if ms < 50:
            n *= 2
    end = time.time()
    steady = [(t, ms, k) for t, ms, k in batches if t - start >= STEADY_SKIP_S]
    total_ms = sum(ms for _, ms, _ in steady)
    calls = sum(k for _, _, k in steady)
    per_call_ms = total_ms / calls if calls else float("nan")
    out = {"seconds": round(end - start, 2), "per_call_ms": per_call_ms,
           f"rate_{unit}": work / (per_call_ms / 1e3) if calls else None}
    out.update(sampler.window(start + STEADY_SKIP_S, end))
    time.sleep(1.5)  # let the board cool towards idle between workloads
    return out


def gemm_workload(m: int, n: int, k: int, pattern: str):
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    if pattern == "sparse75":  # three in four operands zero: less switching per multiply
        a = a * (torch.rand_like(a, dtype=torch.float32) < 0.25)
        b = b * (torch.rand_like(b, dtype=torch.float32) < 0.25)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    return (lambda: torch.matmul(a, b, out=c)), 2.0 * m * n * k


def attention_workload():
    import torch.nn.functional as F
    b, h, s, d = 2, 32, 8192, 128
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    g = torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)

    def step():
        with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION):
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out.backward(g)
    flops = 4.0 * b * h * s * s * d / 2 * 3.5  # causal fwd (2 GEMMs) + bwd (5 GEMMs, 2.5x)
    return step, flops


def elementwise_workload(nbytes: int):
    n = nbytes // 2
    x, y = (torch.randn(n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    z = torch.empty_like(x)
    return (lambda: torch.add(x, y, out=z)), 3.0 * nbytes


def copy_workload(nbytes: int):
    x = torch.randn(nbytes // 2, device="cuda", dtype=torch.bfloat16)
    y = torch.empty_like(x)
    return (lambda: y.copy_(x)), 2.0 * nbytes


def triton_persistent_gemm(programs: int, pattern: str):
    """bf16 GEMM 8192^3 by `programs` persistent Triton programs (one per SM: 147 KB of shared
    memory each), each walking tiles pid, pid + programs, ..."""
    import triton
    import triton.language as tl

    @triton.jit
    def kernel(a_ptr, b_ptr, c_ptr, M, N, K, NUM_PROGS: tl.constexpr,
               BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        pid = tl.program_id(0)
        tiles_n = tl.cdiv(N, BN)
        tiles = tl.cdiv(M, BM) * tiles_n
        for tile in range(pid, tiles, NUM_PROGS):
            tm = tile // tiles_n
            tn = tile % tiles_n
            rm = tm * BM + tl.arange(0, BM)
            rn = tn * BN + tl.arange(0, BN)
            rk = tl.arange(0, BK)
            acc = tl.zeros((BM, BN), dtype=tl.float32)
            for k0 in range(0, K, BK):
                a = tl.load(a_ptr + rm[:, None] * K + (k0 + rk)[None, :])
                b = tl.load(b_ptr + (k0 + rk)[:, None] * N + rn[None, :])
                acc = tl.dot(a, b, acc)
            tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(tl.bfloat16))

    m = n = k = 8192
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    if pattern == "sparse75":
        a = a * (torch.rand_like(a, dtype=torch.float32) < 0.25)
        b = b * (torch.rand_like(b, dtype=torch.float32) < 0.25)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)

    def run():
        kernel[(programs,)](a, b, c, m, n, k, NUM_PROGS=programs, BM=128, BN=256, BK=64,
                            num_warps=8, num_stages=3)
    run()
    torch.cuda.synchronize()
    ref = (a[:256].float() @ b.float())[:, :512]
    err = ((c[:256, :512].float() - ref).norm() / ref.norm()).item()
    return run, 2.0 * m * n * k, err


def board_info() -> dict:
    h = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
    info = {"name": pynvml.nvmlDeviceGetName(h), "driver": pynvml.nvmlSystemGetDriverVersion(),
            "torch": torch.__version__, "cuda": torch.version.cuda,
            "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    for key, call in (("power_limit_w", lambda: pynvml.nvmlDeviceGetPowerManagementLimit(h) / 1000),
                      ("enforced_power_limit_w", lambda: pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000),
                      ("default_power_limit_w", lambda: pynvml.nvmlDeviceGetPowerManagementDefaultLimit(h) / 1000),
                      ("power_limit_range_w", lambda: [x / 1000 for x in pynvml.nvmlDeviceGetPowerManagementLimitConstraints(h)]),
                      ("max_sm_mhz", lambda: pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM)),
                      ("max_mem_mhz", lambda: pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_MEM)),
                      ("app_sm_mhz", lambda: pynvml.nvmlDeviceGetApplicationsClock(h, pynvml.NVML_CLOCK_SM))):
        try:
            info[key] = call()
        except Exception as exc:  # a query the driver refuses is recorded, not fatal
            info[key] = f"unavailable: {exc}"
    return info


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seconds", type=float, default=6.0)
    args = ap.parse_args()
    if pynvml is None or not torch.cuda.is_available():
        raise SystemExit("power_probe: needs a CUDA GPU and nvidia-ml-py (pynvml)")
    sampler = Sampler()
    sampler.start()
    result = {"board": board_info(), "workloads": []}
    sm_count = torch.cuda.get_device_properties(0).multi_processor_count

    def record(name: str, **fields):
        row = {"name": name, **fields}
        result["workloads"].append(row)
        print(json.dumps(row), flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))

    time.sleep(3.0)
    t = time.time()
    time.sleep(3.0)
    record("idle", **sampler.window(t, time.time()))
    for pattern in ("normal", "sparse75"):
        fn, work = gemm_workload(8192, 8192, 8192, pattern)
        record(f"cublas_gemm_8192_{pattern}", **sustain(fn, args.seconds, sampler, work, "flops"))
    fn, work = gemm_workload(16384, 4096, 14336, "normal")  # a Llama-3-8B MLP GEMM at 16k tokens
    record("cublas_gemm_16384x4096x14336_normal", **sustain(fn, args.seconds, sampler, work, "flops"))
    fn, work = attention_workload()
    record("flash_attention_fwd_bwd_causal_s8192", **sustain(fn, args.seconds, sampler, work, "flops"))
    fn, work = elementwise_workload(1 << 30)
    record("elementwise_add_bf16_1GiB", **sustain(fn, args.seconds, sampler, work, "bytes"))
    fn, work = copy_workload(1 << 30)
    record("copy_bf16_1GiB", **sustain(fn, args.seconds, sampler, work, "bytes"))
    for pattern in ("normal", "sparse75"):
        for programs in (8, 16, 33, 66, 99, 116, sm_count):
            fn, work, err = triton_persistent_gemm(programs, pattern)
            record(f"triton_persistent_gemm_{pattern}_p{programs}", programs=programs, rel_err=err,
                   **sustain(fn, args.seconds, sampler, work, "flops"))
    t = time.time()
    time.sleep(3.0)
    record("idle_after", **sampler.window(t, time.time()))
    sampler.stop()


if __name__ == "__main__":
    main()
