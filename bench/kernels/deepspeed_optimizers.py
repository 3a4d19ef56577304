"""DeepSpeed's fused optimizers, one step at a time: FusedAdam, FusedLion and FusedLamb (their CUDA
kernels), GPU time per step and host time per call, on a GPU or under phantom.

The same script runs on both sides; under `phantom run` CUDA events and `time.perf_counter` read
the simulation, so its numbers are what phantom charges (phantom/adapters/deepspeed.py):

    python bench/kernels/deepspeed_optimizers.py --out real.json                # on a GPU (builds the ops)
    phantom run --gpu H200 bench/kernels/deepspeed_optimizers.py --out sim.json
    phantom run --gpu H200 --host-speed 0.0001 bench/kernels/deepspeed_optimizers.py --only gpu --out gpu.json
    python bench/kernels/deepspeed_optimizers.py compare real.json sim.json --out table.md
    python bench/kernels/deepspeed_optimizers.py profile lion 2000x16K --out prof.json   # on a GPU

GPU cases: one `step()` over the listed fp32 (or bf16) parameters, timed with CUDA events over 10
steps after 3. Host cases: a step (or one direct call of the extension) on tiny tensors, where
the GPU waits on the host: `time.perf_counter` over 200 calls with no synchronisation inside,
the median of 5 blocks, per call. A GPU case whose step is host-bound on the real host (many
small tensors) says so in `profile` (host_ms against gpu_busy_ms); `--host-speed 0.0001` under
phantom leaves the GPU time alone.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

M = 1_000_000


def gpu_ms(step, iters: int = 10) -> float:
    for _ in range(3):
        step()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(iters):
        step()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def host_us(call, calls: int = 200, blocks: int = 5) -> float:
    call()
    torch.cuda.synchronize()
    per_call = []
    for _ in range(blocks):
        t0 = time.perf_counter()
        for _ in range(calls):
            call()
        per_call.append((time.perf_counter() - t0) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(per_call)


def params(sizes: list[int], dtype=torch.float32) -> list[torch.nn.Parameter]:
    out = [torch.nn.Parameter(torch.randn(n, device="cuda", dtype=dtype)) for n in sizes]
    for p in out:
        p.grad = torch.randn_like(p) * 1e-3
    return out


def optimizer(kind: str, ps: list):
    if kind == "adam":
        from deepspeed.ops.adam import FusedAdam
        return FusedAdam(ps, lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, adam_w_mode=True)
    if kind == "lion":
        from deepspeed.ops.lion import FusedLion
        return FusedLion(ps, lr=1e-4, betas=(0.9, 0.99), weight_decay=0.1)
    from deepspeed.ops.lamb import FusedLamb
    return FusedLamb(ps, lr=1e-3, weight_decay=0.01)


GPU_CASES = [  # (optimizer, case name, sizes, dtype)
    ("adam", "flat-100M", [100 * M], torch.float32),
    ("adam", "flat-750M", [750 * M], torch.float32),
    ("adam", "200x4M", [4 * M] * 200, torch.float32),
    ("lion", "flat-100M", [100 * M], torch.float32),
    ("lion", "flat-750M", [750 * M], torch.float32),
    ("lion", "200x4M", [4 * M] * 200, torch.float32),
    ("lion", "2000x16K", [16_384] * 2000, torch.float32),
    ("lion", "bf16-flat-100M", [100 * M], torch.bfloat16),
    ("lamb", "1x100M", [100 * M], torch.float32),
    ("lamb", "1x16M", [16 * M], torch.float32),
    ("lamb", "64x1M", [M] * 64, torch.float32),
    ("lamb", "256x4K", [4096] * 256, torch.float32),
]


def gpu_case(kind: str, name: str, sizes: list[int], dtype) -> dict:
    ps = params(sizes, dtype)
    ms = gpu_ms(optimizer(kind, ps).step)
    del ps
    return {"kind": "gpu", "optimizer": kind, "case": name, "tensors": len(sizes), "elements": sum(sizes),
            "dtype": str(dtype).replace("torch.", ""), "ms": round(ms, 4)}


def lamb_legacy_case(name: str, sizes: list[int]) -> dict:
    """FusedLamb as DeepSpeed's fp16 path calls it (FP16_UnfusedOptimizer.step_fused_lamb):
    fp32 master parameters, fp16 gradients passed in, an fp16 copy written out."""
    ps = params(sizes)
    grads = [torch.randn(n, device="cuda", dtype=torch.float16) for n in sizes]
    copies = [torch.empty(n, device="cuda", dtype=torch.float16) for n in sizes]
    opt = optimizer("lamb", ps)
    ms = gpu_ms(lambda: opt.step(grads=[grads], output_params=[copies], scale=1024.0))
    return {"kind": "gpu", "optimizer": "lamb", "case": name, "tensors": len(sizes), "elements": sum(sizes),
            "dtype": "float32+fp16 grads/copy", "ms": round(ms, 4)}


def host_cases() -> list[dict]:
    rows = []
    for kind, n in [("lion", 1), ("lion", 64), ("lion", 512), ("lamb", 1), ("lamb", 64), ("adam", 64)]:
        opt = optimizer(kind, params([1024] * n))
        rows.append({"kind": "host", "optimizer": kind, "case": f"step, {n} x 1K", "tensors": n,
                     "us": round(host_us(opt.step), 2)})
    from deepspeed.ops.op_builder import FusedLambBuilder, FusedLionBuilder
    lion, lamb = FusedLionBuilder().load(), FusedLambBuilder().load()
    flag = torch.zeros(1, dtype=torch.int, device="cuda")
    for n in (1, 64, 512):
        lists = [[torch.randn(1024, device="cuda") for _ in range(n)] for _ in range(3)]
        us = host_us(lambda: lion.multi_tensor_lion(2048 * 32, flag, lists, 1e-4, 0.9, 0.99, 1, 0.1))
        rows.append({"kind": "host", "optimizer": "lion", "case": f"multi_tensor_lion call, {n} x 1K",
                     "tensors": n, "us": round(us, 2)})
    p, m, v, g = (torch.randn(1024, device="cuda") for _ in range(4))
    empty = torch.tensor([], dtype=torch.float)
    us = host_us(lambda: lamb.lamb(p, empty, m, v, g, 1e-3, 0.9, 0.999, 10.0, 0.01, 1e-8, 1.0, 1, 1, 1, 0.01))
    rows.append({"kind": "host", "optimizer": "lamb", "case": "lamb call, 1K", "tensors": 1, "us": round(us, 2)})
    return rows


def measure(out: str, only: str | None = None) -> None:
    rows = []
    if only != "host":
        for kind, name, sizes, dtype in GPU_CASES:
            rows.append(gpu_case(kind, name, sizes, dtype))
            print("opt: " + json.dumps(rows[-1]), flush=True)
            torch.cuda.empty_cache()
        for name, sizes in [("fp16-legacy 1x100M", [100 * M]), ("fp16-legacy 64x1M", [M] * 64)]:
            rows.append(lamb_legacy_case(name, sizes))
            print("opt: " + json.dumps(rows[-1]), flush=True)
    if only != "gpu":
        for row in host_cases():
            rows.append(row)
            print("opt: " + json.dumps(row), flush=True)
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    Path(out).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))


def compare(real_path: str, sim_path: str, out: str | None) -> None:
    real, sim = (json.loads(Path(p).read_text()) for p in (real_path, sim_path))
    key = lambda r: (r["kind"], r["optimizer"], r["case"])  # noqa: E731
    simulated = {key(r): r for r in sim["rows"]}
    lines = [f"Real: {real['meta']['device']}, torch {real['meta']['torch']}, {real['meta']['date']}. "
             f"phantom: `phantom run --gpu H200`, {sim['meta']['date']}.", "",
             "| optimizer | case | tensors | dtype | real | phantom | error |", "|---|---|---|---|---|---|---|"]
    for r in real["rows"]:
        s = simulated.get(key(r))
        unit = "ms" if r["kind"] == "gpu" else "us"
        value = r["ms"] if unit == "ms" else r["us"]
        if s is None:
            lines.append(f"| {r['optimizer']} | {r['case']} | {r['tensors']} | {r.get('dtype', '')} | "
                         f"{value} {unit} | not run | |")
            continue
        mine = s["ms"] if unit == "ms" else s["us"]
        lines.append(f"| {r['optimizer']} | {r['case']} | {r['tensors']} | {r.get('dtype', '')} | {value} {unit} | "
                     f"{mine} {unit} | {(mine - value) / value * 100:+.1f}% |")
    text = "\n".join(lines) + "\n"
    print(text)
    if out:
        Path(out).write_text(text)


def profile_case(kind: str, name: str, out: str) -> None:
    """Two steps of one GPU case under torch.profiler (CUDA and CPU activity): each kernel's
    launches and durations, the steps' GPU busy time and span, and the CPU ops' time, to tell a
    slow kernel from a host-bound step. GPU machines only."""
    from torch.profiler import ProfilerActivity, profile

    sizes, dtype = next((s, d) for k, n, s, d in GPU_CASES if (k, n) == (kind, name))
    opt = optimizer(kind, params(sizes, dtype))
    for _ in range(3):
        opt.step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        for _ in range(2):
            opt.step()
        host_s = time.perf_counter() - t0
        torch.cuda.synchronize()
        wall_s = time.perf_counter() - t0
    kernels: dict[str, list[float]] = {}
    spans = []
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            kernels.setdefault(e.name[:90], []).append(e.time_range.elapsed_us())
            spans.append((e.time_range.start, e.time_range.end))
    busy = sum(sum(v) for v in kernels.values())
    span = (max(b for _, b in spans) - min(a for a, _ in spans)) if spans else 0.0
    cpu = sorted(((e.key, e.count, e.self_cpu_time_total) for e in prof.key_averages()), key=lambda r: -r[2])[:12]
    result = {"optimizer": kind, "case": name, "steps": 2, "host_ms": host_s * 1e3, "wall_ms": wall_s * 1e3,
              "gpu_busy_ms": busy / 1e3, "gpu_span_ms": span / 1e3,
              "kernels": {k: {"count": len(v), "median_us": statistics.median(v), "total_ms": sum(v) / 1e3}
                          for k, v in kernels.items()},
              "cpu_self_ms": [{"op": k, "count": c, "ms": t / 1e3} for k, c, t in cpu]}
    print(json.dumps(result, indent=1))
    Path(out).write_text(json.dumps(result, indent=1))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "profile":
        p = argparse.ArgumentParser(prog="deepspeed_optimizers.py profile")
        p.add_argument("optimizer")
        p.add_argument("case")
        p.add_argument("--out", required=True)
        a = p.parse_args(sys.argv[2:])
        profile_case(a.optimizer, a.case, a.out)
        return
    if len(sys.argv) > 1 and sys.argv[1] == "compare":
        p = argparse.ArgumentParser(prog="deepspeed_optimizers.py compare")
        p.add_argument("real")
        p.add_argument("sim")
        p.add_argument("--out")
        a = p.parse_args(sys.argv[2:])
        compare(a.real, a.sim, a.out)
        return
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--only", choices=["gpu", "host"], help="one kind of case (default: both)")
    a = p.parse_args()
    measure(a.out, a.only)


if __name__ == "__main__":
    main()
