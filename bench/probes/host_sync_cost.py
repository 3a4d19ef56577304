"""What a blocking device-to-host read of a scalar costs the host, on a GPU and under phantom.

Megatron-Core's gradient norm without Apex (`local_multi_tensor_l2_norm`) reads one 0-d norm
per gradient tensor to the host, and logging loops read losses with `.item()`: each read waits
for the stream and copies a few bytes. The same script runs on both sides (`time.perf_counter`
is the simulated host clock under phantom):

    python bench/probes/host_sync_cost.py --out real.json                          # GPU host
    phantom run --gpu H100 bench/probes/host_sync_cost.py --out sim.json           # here
    python bench/probes/host_sync_cost.py --compare real.json sim.json

Cases (µs per read, median of ROUNDS rounds of N reads each):
  item_idle        `x.item()` of a 0-d tensor, the stream already idle
  norm_item        `float(torch.norm(t))` for a small fp32 tensor: launch, kernel, sync, copy
  norm_item_big    the same for a 1M-element tensor (the kernel's time shows)
  tensor_of_list   `torch.tensor([0-d CUDA tensors])`, per element (the unpatched Megatron path)
  norm_no_read     `torch.norm(t)` alone, no read: the launch's host cost, for reference
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

N = 300  # reads a round (Megatron's 1.7B rank has ~290 gradient tensors)
ROUNDS = 7


def _per_call_us(fn, n: int = N) -> float:
    rounds = []
    for _ in range(ROUNDS):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        rounds.append((time.perf_counter() - t0) / n * 1e6)
    return statistics.median(rounds[1:])  # the first round warms the code path


def measure() -> dict[str, float]:
    dev = torch.device("cuda")
    scalar = torch.ones((), device=dev)
    small = [torch.randn(4096, device=dev) for _ in range(N)]
    big = [torch.randn(1 << 20, device=dev) for _ in range(8)]
    norms = [torch.norm(t) for t in small]
    result = {
        "item_idle": _per_call_us(lambda: [scalar.item() for _ in range(N)]),
        "norm_item": _per_call_us(lambda: [float(torch.norm(t)) for t in small]),
        "norm_item_big": _per_call_us(lambda: [float(torch.norm(t)) for t in big], n=len(big)),
        "norm_no_read": _per_call_us(lambda: [torch.norm(t) for t in small]),
    }
    try:
        result["tensor_of_list"] = _per_call_us(lambda: torch.tensor(norms))
    except Exception as e:  # phantom cannot read a list of fake tensors this way (see the Megatron adapter)
        print(f"tensor_of_list: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
    return {k: round(v, 2) for k, v in result.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="host_sync_cost.json")
    p.add_argument("--compare", nargs=2, metavar=("REAL", "SIM"))
    args = p.parse_args()
    if args.compare:
        real, sim = (json.loads(Path(f).read_text())["us_per_call"] for f in args.compare)
        print("| case | real µs | phantom µs | error |\n|---|---|---|---|")
        for k, v in real.items():
            if k in sim:
                print(f"| {k} | {v:.2f} | {sim[k]:.2f} | {(sim[k] / v - 1) * 100:+.1f}% |")
        return
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "us_per_call": measure()}
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
