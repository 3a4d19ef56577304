"""Host cost of PyTorch's Python-heavy paths (DTensor, FSDP2) against the reference step,
under whichever torch this interpreter has.

phantom converts measured host time with one factor: how much faster this machine runs
`phantom.engine.host.training_step` (a tiny plain-PyTorch step) than the simulated node's host.
That assumes every kind of host work scales alike between the two. The GPU hosts run torch
2.11 and the simulating machine 2.13, so if DTensor's or FSDP2's Python got faster (or slower)
between those releases relative to the reference step, the factor misses it. Run this script
under each torch on the same machine and compare the `per_reference` column: the workload's
time in units of the reference step's.

    python bench/host_torch_versions.py --out bench/data/host_torch_versions_2.13.json

Workloads run in one process on CPU tensors, on a fake process group of 2 ranks (collectives
are no-ops), so only host work is timed: the fastest of several timed rounds, one intra-op thread.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

HOST_PY = Path(__file__).resolve().parent.parent / "phantom" / "engine" / "host.py"


def _load_host_module():
    # Import phantom/engine/host.py alone: it needs only torch, and phantom itself may not
    # install under the other torch.
    spec = importlib.util.spec_from_file_location("phantom_host", HOST_PY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class MLPBlock(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.up = nn.Linear(dim, 4 * dim, bias=False)
        self.down = nn.Linear(4 * dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(F.gelu(self.up(self.norm(x))))


def _model(layers: int = 4, dim: int = 64) -> nn.Module:
    return nn.Sequential(*[MLPBlock(dim) for _ in range(layers)])


def _train_step(model: nn.Module, make_input):
    # One optimizer per tensor kind: foreach kernels refuse a list mixing DTensors (TP's
    # sharded weights) with plain tensors (its unsharded norms), as torchtitan's TP also avoids.
    from torch.distributed.tensor import DTensor

    kinds: dict[bool, list] = {}
    for p in model.parameters():
        kinds.setdefault(isinstance(p, DTensor), []).append(p)
    opts = [torch.optim.AdamW(ps, foreach=True) for ps in kinds.values()]

    def step() -> None:
        loss = model(make_input()).float().pow(2).mean()
        loss.backward()
        for opt in opts:
            opt.step()
            opt.zero_grad(set_to_none=True)

    return step


def plain_step():
    return _train_step(_model(), lambda: torch.randn(16, 64))


def tp_step():
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)

    mesh = init_device_mesh("cpu", (2,))
    model = _model()
    for block in model:
        parallelize_module(block, mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})
    return _train_step(model, lambda: torch.randn(16, 64))


def fsdp_step():
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (2,))
    model = _model()
    for block in model:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return _train_step(model, lambda: torch.randn(16, 64))


def _fastest(step, host, rounds: int) -> float:
    step()
    step()
    return min(host.time_steps(step) for _ in range(rounds))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    from torch.testing._internal.distributed.fake_pg import FakeStore

    torch.set_num_threads(1)
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    host = _load_host_module()
    reference = min(host.reference_step_ns(rounds=3) for _ in range(max(1, args.rounds // 3)))
    rows = {}
    for name, build in (("plain_mlp", plain_step), ("tp_dtensor", tp_step), ("fsdp2", fsdp_step)):
        ns = _fastest(build(), host, args.rounds)
        rows[name] = {"step_ns": round(ns), "per_reference": round(ns / reference, 3)}
        print(f"{name:12s} {ns / 1e3:9.1f} us  = {ns / reference:6.2f} reference steps", flush=True)
    result = {"torch": torch.__version__, "python": platform.python_version(),
              "node": platform.node(), "date": time.strftime("%Y-%m-%d"),
              "reference_step_ns": round(reference), "workloads": rows}
    print(f"reference    {reference / 1e3:9.1f} us")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
