"""Host-side calibration: how fast this machine runs Python, and what an eager CUDA op costs.

Run on a GPU machine (`python bench/host/host_calibration.py --out host_<gpu>.json`) and on the
simulating machine (`--no-cuda`); under `phantom run --gpu H200` it gives the simulated host
cost of the same eager ops (perf_counter is the simulated host clock there). The per-op eager launch cost calibrates
HOST_KERNEL_LAUNCH_NS and GEMM_EXTRA_HOST_NS in phantom/host/account.py. The pure-Python score
compares machines; it turned out a poor predictor of framework overhead (the lent H100 host
scored 1.8x slower than the H200 host but launched eager ops only 1.4x slower), so phantom
does not scale by it (README, "Host time").
"""
from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import subprocess
import time


def python_score(repeats: int = 7) -> float:
    """Median seconds for a fixed pure-Python workload (attribute access, calls, dicts)."""
    class Box:
        def __init__(self, v: int) -> None:
            self.v = v

        def step(self, d: dict) -> int:
            d[self.v & 63] = self.v
            return self.v + len(d)

    def work() -> int:
        d: dict = {}
        total = 0
        for i in range(200_000):
            total += Box(i).step(d)
        return total

    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        work()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def eager_op_host_us(n: int = 20_000) -> dict[str, float]:
    """Host microseconds per eager CUDA op (no sync inside the loop, queue kept short)."""
    import torch

    x = torch.randn(256, device="cuda")
    y = torch.empty_like(x)
    w = torch.randn(256, 256, device="cuda")
    results = {}
    for name, fn in {
        "add_out": lambda: torch.add(x, 1.0, out=y),
        "mul_new_tensor": lambda: x * 2.0,
        "matmul_small": lambda: w @ w,
        "view": lambda: x.view(16, 16),
    }.items():
        for _ in range(200):
            fn()
        torch.cuda.synchronize()
        samples = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(n // 5):
                fn()
            samples.append((time.perf_counter() - t0) / (n // 5) * 1e6)
            torch.cuda.synchronize()
        results[name] = statistics.median(samples)
    return results


def cpu_op_host_us(n: int = 20_000) -> float:
    """Host microseconds per eager op on a small CPU tensor: the dispatcher and Python cost
    without any CUDA launch. GPU op cost minus this is the CUDA launch share."""
    import torch

    x = torch.zeros(256)
    for _ in range(200):
        x.add_(1.0)
    samples = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(n // 5):
            x.add_(1.0)
        samples.append((time.perf_counter() - t0) / (n // 5) * 1e6)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True)
    parser.add_argument("--no-cuda", action="store_true")
    args = parser.parse_args()
    record = {
        "date": datetime.date.today().isoformat(),
        "host": platform.node(),
        "cpu": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "python_score_s": python_score(),
        "cpu_add_inplace_us": cpu_op_host_us(),
    }
    if not args.no_cuda:
        import torch

        record["torch"] = torch.__version__
        record["device"] = torch.cuda.get_device_name()
        try:
            record["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True, text=True).stdout.strip()
        except FileNotFoundError:  # under `phantom run`, where the GPU is simulated
            record["driver"] = None
        record["eager_op_host_us"] = eager_op_host_us()
    with open(args.out, "w") as f:
        json.dump(record, f, indent=2)
    print(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
