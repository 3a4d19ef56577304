"""How far apart the ranks' hosts run within a tensor-parallel step, mark by mark.

    torchrun --nproc-per-node 2 bench/host/tp_rank_desync.py --preset 1b --out desync.json     # on the GPUs
    phantom run --nproc-per-node 2 --gpu H200 bench/host/tp_rank_desync.py --preset 1b --out desync_sim.json

The TP GPT step of `examples/dist_train.py --parallel tp` (DTensor colwise/rowwise blocks, bf16
autocast, AdamW), with every rank recording `time.perf_counter()` as each transformer block's
forward begins, after the backward, after the optimizer step and after the step's
`torch.cuda.synchronize()`. On one host the rank processes share the clock, so the marks
compare directly; under phantom each rank's clock is its simulated host clock. Rank 0 writes
every rank's marks and, per step, how the gap between the two ranks' hosts grows from mark to
mark: the spread of the per-segment differences, and the largest offset within the step.

Why: a host-bound TP step's collectives each wait for the later rank's launch, so what the
step costs depends on how independently the ranks' hosts run; phantom's ranks charge one
leader's gaps and run in lockstep.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))


def summarize(every: list[list[list[float]]]) -> dict:
    """every[rank][step] = that rank's marks in the step: offsets of rank r against rank 0."""
    steps = []
    for s in range(len(every[0])):
        a, b = every[0][s], every[-1][s]
        offsets = [(y - x) * 1e3 for x, y in zip(a, b)]  # ms, rank N-1 ahead when negative
        seg = [(b[k] - b[k - 1] - (a[k] - a[k - 1])) * 1e3 for k in range(1, len(a))]
        steps.append({"host_ms": [(r[s][-2] - r[s][0]) * 1e3 for r in every],
                      "step_ms": (max(r[s][-1] for r in every) - min(r[s][0] for r in every)) * 1e3,
                      "offset_range_ms": max(offsets) - min(offsets),
                      "segment_diff_sd_us": statistics.pstdev(seg) * 1e3 if len(seg) > 1 else 0.0,
                      "segments": len(seg)})
    return {"steps": steps}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="1b")
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    from dist_train import PRESETS, GPTConfig, get_batch, setup_tp

    rank, local_rank, world = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    torch.backends.cuda.matmul.allow_tf32 = True
    cfg = GPTConfig(**PRESETS[args.preset], vocab_size=50304, block_size=args.seq_len)
    setup_args = argparse.Namespace(seed=1337, batch_size=args.batch_size, seq_len=args.seq_len)
    marks: list[float] = []
    import dist_train

    original_build = dist_train.build_gpt

    def build_with_hooks(*a, **k):
        model = original_build(*a, **k)
        for block in model.blocks:
            block.register_forward_pre_hook(lambda *_: marks.append(time.perf_counter()))
        return model

    dist_train.build_gpt = build_with_hooks
    train_step = setup_tp(cfg, setup_args, rank, world)
    torch.manual_seed(1338)
    steps: list[list[float]] = []
    torch.cuda.synchronize()
    dist.barrier()
    torch.cuda.synchronize()
    for it in range(args.steps):
        marks.clear()
        marks.append(time.perf_counter())
        x, y = get_batch(args.batch_size, args.seq_len, cfg.vocab_size)
        train_step(x, y)  # forward (block marks), backward, optimizer step
        marks.append(time.perf_counter())
        torch.cuda.synchronize()
        marks.append(time.perf_counter())
        if it >= args.warmup:
            steps.append(list(marks))
    every: list = [None] * world
    dist.all_gather_object(every, steps)
    if rank == 0:
        out = {"world": world, "preset": args.preset, "seq_len": args.seq_len, "batch_size": args.batch_size,
               "device": torch.cuda.get_device_name(), "marks": every, **summarize(every)}
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
        s = out["steps"]
        med = lambda key: statistics.median(x[key] for x in s)  # noqa: E731
        print(f"tp_rank_desync: step {med('step_ms'):.1f} ms, offset range {med('offset_range_ms'):.2f} ms, "
              f"segment diff sd {med('segment_diff_sd_us'):.0f} us (medians over {len(s)} steps)", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
