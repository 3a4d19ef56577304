"""Host time of single eager ops on CUDA, op by op: what a GPU host pays and what phantom charges.

    python bench/host_op_costs.py --out op_costs_real.json                        # on a GPU host
    phantom run --gpu H200 bench/host_op_costs.py --out op_costs_sim.json         # simulated
    python bench/host_op_costs.py --compare op_costs_real.json op_costs_sim.json  # the table

phantom charges an op's host time as what the same Python and dispatcher work costs on this
machine (measured, less its own per-entry overhead, scaled to the node) plus a fixed launch
cost per kernel (4 us, +15 us for a GEMM: `context.HOST_KERNEL_LAUNCH_NS`, measured on one
elementwise op). DeepSpeed's ZeRO-2 step is a loop of small reductions and composites (`amax`,
`isfinite`, `logical_and`, ...) that took 13-70 us each on a real host (profiled, Session 39)
where phantom charged ~6 us an op; Megatron's steps come out the other way. This times each
case as host microseconds per call: blocks of calls with no synchronisation inside (tiny tensors:
the GPU never holds the host back), a synchronize between blocks, the median of the blocks.
Under phantom `perf_counter` is the simulated host clock, so the same numbers come out
simulated.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from host_list_ops import _time as time_calls  # noqa: E402


def _time(fn: Callable[[], object], calls: int = 200, blocks: int = 9) -> float:
    """Median host µs per call of `fn` over `blocks` blocks of `calls` calls, after 3 warm-up calls."""
    return time_calls(fn, calls, blocks, warmup=3)


def cases() -> dict[str, Callable[[], object]]:
    dev = "cuda"
    x = torch.randn(256, device=dev)
    y = torch.empty(256, device=dev)
    b = torch.randn(256, device=dev) > 0
    m = torch.randn(16, 16, device=dev)
    h = torch.randn(8, 64, device=dev)
    w = torch.randn(64, 64, device=dev)
    xr = torch.randn(256, device=dev, requires_grad=True)
    g = torch.randn(4, 256, device=dev)
    norm = torch.nn.LayerNorm(64, device=dev)
    mb = m.bfloat16()
    hb, wb, bb = h.bfloat16(), w.bfloat16(), torch.randn(64, device=dev, dtype=torch.bfloat16)
    bat = torch.randn(4, 16, 16, device=dev, dtype=torch.bfloat16)
    w256 = torch.randn(256, 256, device=dev)

    def zero_loop() -> None:
        # one parameter's turn of DeepSpeed ZeRO-1/2's overflow and norm checks (stage_1_and_2
        # `has_overflow_partitioned_grads_serial` / `get_grad_norm_direct`-like: the ops its
        # profile shows per partition)
        hi, lo = x.amax(), x.amin()
        ok = torch.logical_and(torch.isfinite(hi), torch.isfinite(lo))
        y.add_(torch.logical_not(ok))

    return {
        "add_out": lambda: torch.add(x, 1, out=y),
        "add_inplace": lambda: x.add_(0.0),
        "mul_new": lambda: x * 2,
        "neg": lambda: torch.neg(x),
        "abs": lambda: torch.abs(x),
        "to_bf16": lambda: x.to(torch.bfloat16),
        "to_same": lambda: x.to(torch.float32),
        "view": lambda: x.view(16, 16),
        "narrow": lambda: x.narrow(0, 0, 128),
        "zeros": lambda: torch.zeros(256, device=dev),
        "zero_": lambda: y.zero_(),
        "sum": lambda: x.sum(),
        "amax": lambda: x.amax(),
        "norm": lambda: torch.linalg.vector_norm(x),
        "isfinite": lambda: torch.isfinite(x),
        "logical_and": lambda: torch.logical_and(b, b),
        "logical_not": lambda: torch.logical_not(b),
        "where": lambda: torch.where(b, x, y),
        "cat2": lambda: torch.cat((x, y)),
        "softmax": lambda: torch.softmax(g, -1),
        "layer_norm": lambda: norm(h),
        "mm_small": lambda: m @ m,
        "linear": lambda: F.linear(h, w),
        "mm_bf16": lambda: mb @ mb,
        "linear_bias_bf16": lambda: F.linear(hb, wb, bb),
        "bmm_bf16": lambda: torch.bmm(bat, bat),
        # the GEMM of context.GEMM_EXTRA_HOST_NS's first measurement (bench/host_calibration.py:
        # 256 x 256 fp32, blocks of 4,000 calls): its kernel may outlast the host's issue time,
        # and a long block then fills the launch queue and times the GPU
        "mm256_fp32": lambda: w256 @ w256,
        "mul_autograd": lambda: xr * 2,
        "zero_loop_7ops": zero_loop,
    }


def measure() -> dict[str, float]:
    torch.set_num_threads(1)
    out = {}
    with torch.no_grad():
        for name, fn in cases().items():
            if name == "mul_autograd":
                continue
            out[name] = _time(fn)
            print(f"{name:16s} {out[name]:7.2f} us", flush=True)
        out["mm256_fp32_4000_calls"] = _time(cases()["mm256_fp32"], calls=4000, blocks=5)
        print(f"{'mm256_fp32_4000_calls':16s} {out['mm256_fp32_4000_calls']:7.2f} us", flush=True)
    out["mul_autograd"] = _time(cases()["mul_autograd"])
    print(f"{'mul_autograd':16s} {out['mul_autograd']:7.2f} us", flush=True)
    return out


def compare(real_path: str, sim_paths: list[str]) -> None:
    real = json.load(open(real_path))
    sims = [json.load(open(p)) for p in sim_paths]
    head = "| op | real us/call | " + " | ".join(f"phantom {i + 1}" for i in range(len(sims))) + " | phantom / real |"
    print(f"Real: {real.get('device', '?')}, torch {real.get('torch', '?')}, {real.get('date', '?')}.\n")
    print(head)
    print("|" + "---|" * (3 + len(sims)))
    for op, r in real["ops"].items():
        s = [x["ops"].get(op) for x in sims]
        med = statistics.median(v for v in s if v is not None)
        cells = " | ".join(f"{v:.1f}" for v in s)
        print(f"| {op} | {r:.1f} | {cells} | {med / r:.2f} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out")
    p.add_argument("--compare", nargs="+", metavar="JSON", help="REAL SIM [SIM ...]: print the table")
    a = p.parse_args()
    if a.compare:
        compare(a.compare[0], a.compare[1:])
        return
    ops = measure()
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "ops": ops}
    if a.out:
        with open(a.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
