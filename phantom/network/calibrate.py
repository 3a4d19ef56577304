"""Measure collective GPU times on a real node, for phantom's measured-collective tables.

    torchrun --nproc-per-node N -m phantom.network.calibrate --out FILE.json     # on the GPU machine

The calibration grid is deliberately off the accuracy benchmark's grid (bench/suites/collectives.py
uses float32 at powers of two): bfloat16 at 3 x 2^k bytes. Times are GPU-only: the stream
is first held by `torch.cuda._sleep` while the host enqueues every repetition, so host
launch cost (which phantom simulates separately) is not in the numbers. The median of
several rounds is kept. Rank 0 writes the JSON (header: GPU, driver-visible name, torch,
NCCL, ranks, date).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics

KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv",
         "send_recv_both_ways")


def _sizes() -> list[int]:
    return [3 * 2**k for k in range(12, 29, 2)]  # 12 KiB .. 768 MiB


def _op(kind: str, nbytes: int, world: int, rank: int):
    import torch
    import torch.distributed as dist

    elems = nbytes // 2
    elems -= elems % world
    t = torch.randn(elems, device="cuda", dtype=torch.bfloat16)
    if kind == "all_reduce":
        return lambda: dist.all_reduce(t)
    if kind == "all_gather":  # nccl-tests size: the gathered output
        inp, out = t[: elems // world], torch.empty_like(t)
        return lambda: dist.all_gather_into_tensor(out, inp)
    if kind == "reduce_scatter":  # nccl-tests size: the input
        out = torch.empty(elems // world, device="cuda", dtype=torch.bfloat16)
        return lambda: dist.reduce_scatter_tensor(out, t)
    if kind == "all_to_all":
        out = torch.empty_like(t)
        return lambda: dist.all_to_all_single(out, t)
    if kind == "broadcast":
        return lambda: dist.broadcast(t, src=0)
    peer = (rank + 1) % world if rank % 2 == 0 else (rank - 1) % world
    if kind == "send_recv":  # one direction: even ranks send, odd ranks receive
        buf = t if rank % 2 == 0 else torch.empty_like(t)
        op = dist.isend if rank % 2 == 0 else dist.irecv

        def oneway():
            for r in dist.batch_isend_irecv([dist.P2POp(op, buf, peer)]):
                r.wait()
        return oneway

    def sendrecv():  # one transfer each way between rank pairs, as a batch
        reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, t, peer),
                                       dist.P2POp(dist.irecv, torch.empty_like(t), peer)])
        for r in reqs:
            r.wait()
    return sendrecv


def _gpu_time_us(fn, reps: int) -> float:
    import torch

    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(50_000_000)  # ~25-50 ms: the host enqueues everything meanwhile
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / reps


def _issue_cost_us(fn, reps: int) -> float:
    """Wall time per call of back-to-back small collectives: the GPU work is a few
    microseconds (see the size tables), so the host's issue path sets the pace."""
    import time

    import torch

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / reps * 1e6


def issue_costs(rank: int, world: int, rounds: int) -> dict[str, float]:
    """Host cost of one call of each torch.distributed API (12 KiB bf16 payloads)."""
    costs = {}
    for kind in KINDS:
        fn = _op(kind, 12 * 1024, world, rank)
        for _ in range(20):
            fn()
        costs[kind] = statistics.median(_issue_cost_us(fn, 200) for _ in range(rounds))
    return costs


def main() -> None:
    import torch
    import torch.distributed as dist

    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--issue-cost", action="store_true",
                   help="measure the host cost of issuing each collective (small, back to back)")
    args = p.parse_args()
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    if args.issue_cost:
        costs = issue_costs(rank, world, args.rounds)
        if rank == 0:
            print(json.dumps(costs, indent=1))
            header = {"gpu": torch.cuda.get_device_name(), "ranks": world, "torch": torch.__version__,
                      "nccl": ".".join(map(str, torch.cuda.nccl.version())),
                      "date": datetime.date.today().isoformat(),
                      "method": "wall time per call of 200 back-to-back 12 KiB bf16 calls "
                                "(GPU time per call < 10 us, see the size tables); median of rounds"}
            with open(args.out, "w") as f:
                json.dump({"header": header, "issue_us": costs}, f, indent=1)
        dist.destroy_process_group()
        return
    table: dict[str, list] = {}
    for kind in KINDS:
        rows = []
        for nbytes in _sizes():
            fn = _op(kind, nbytes, world, rank)
            fn()
            reps = 20 if nbytes <= 48 * 2**20 else 5
            times = [_gpu_time_us(fn, reps) for _ in range(args.rounds)]
            rows.append([nbytes, statistics.median(times)])
            if rank == 0:
                print(f"{kind:15s} {nbytes:>11,} B {rows[-1][1]:10.1f} us", flush=True)
        table[kind] = rows
    if rank == 0:
        header = {"gpu": torch.cuda.get_device_name(), "ranks": world, "torch": torch.__version__,
                  "nccl": ".".join(map(str, torch.cuda.nccl.version())), "dtype": "bfloat16",
                  "date": datetime.date.today().isoformat(),
                  "method": "GPU-only: stream held by torch.cuda._sleep while all reps are "
                            "enqueued; median of rounds; nccl-tests size convention",
                  "env": {k: os.environ.get(k) for k in ("NCCL_NVLS_ENABLE", "NCCL_ALGO", "NCCL_PROTO")}}
        with open(args.out, "w") as f:
            json.dump({"header": header, "times_us": table}, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
