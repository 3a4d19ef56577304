"""How much slower a rank's Python runs right after a simulated collective, under phantom.

    phantom run --nproc-per-node 2 --gpu H200 bench/probes/collective_wake_cost.py

Under phantom, every collective blocks the rank process on its coordinator round trip while the
other ranks and the coordinator run; on a real GPU host the NCCL enqueue returns at once and
the host thread never sleeps. This times two small workloads on the thread's CPU clock, each
k times in a row, in a steady loop and right after a collective (`pg.allreduce([t]).wait()`),
median of 300:

- `torch_paths`: the Python `torch.distributed.all_reduce` runs around its process-group call
  (argument checks, options, the default group; on a fake CUDA tensor);
- `arithmetic`: a pure-Python loop of the same order of time.

The difference is the cost of the first run of each code path after the wake-up, which a real
run does not pay.
"""
from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d


def main() -> None:
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    pg = dist.group.WORLD
    t = torch.ones(1024, device="cuda")

    def torch_paths(k: int) -> None:
        for _ in range(k):
            c10d._check_single_tensor(t, "tensor")
            c10d._rank_not_in_group(None)
            t.is_complex()
            opts = c10d.AllreduceOptions()
            opts.reduceOp = c10d.ReduceOp.SUM
            c10d._get_default_group() in c10d._world.pg_coalesce_state

    def arithmetic(k: int) -> None:
        s = 0
        for i in range(k * 40):
            s += i

    for work in (torch_paths, arithmetic):
        for k in (1, 3, 10, 30, 100):
            median = {}
            for after_collective in (False, True):
                times = []
                for _ in range(300):
                    if after_collective:
                        pg.allreduce([t]).wait()
                    t0 = time.thread_time_ns()
                    work(k)
                    times.append(time.thread_time_ns() - t0)
                median[after_collective] = sorted(times)[len(times) // 2] / 1e3
            if dist.get_rank() == 0:
                print(f"{work.__name__:12s} k={k:3d}  steady {median[False]:7.1f} us  after a "
                      f"collective {median[True]:7.1f} us  extra {median[True] - median[False]:5.1f} us",
                      flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
