"""Compiled FlexAttention kernel times over a grid of shapes: the calibration rows of its curve.

phantom costs FlexAttention's Triton kernel as flash attention over the blocks its mask keeps
(cost/roofline.py `_flex_attention`), on a curve of its own: `flex.fwd` / `flex.bwd`, fitted by
`python -m phantom.cost.calibrate_flex` to these rows. The grid holds dense and causal masks
(the masks whose block counts are exact at any size); the benchmark `bench/probes/flex_attention.py`
keeps other shapes and masks (sliding window, prefix LM) out of the fit, to check it.

    python bench/kernels/flex_sweep.py --out $OUT/flex_sweep_H200.json      # on the GPU

Method: the profiler's GPU kernel time per call over five calls after three warm-up calls;
forward is the training forward (inputs require grad: the kernel also writes the log-sum-exp),
backward is a forward + backward step's kernels less the forward's (gradients set to None
first, so no accumulation kernels). bf16.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json

import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

GRID = [  # batch, heads, sequence, head dim
    (8, 16, 1024, 64), (2, 16, 2048, 64), (1, 32, 4096, 64), (2, 8, 8192, 64),
    (16, 16, 512, 128), (4, 32, 1024, 128), (2, 32, 2048, 128), (1, 16, 4096, 128),
    (1, 16, 16384, 128),
]


def _kernel_us(fn, calls: int = 5) -> float:
    """GPU kernel time per call, from the profiler: a compiled call's host work (Dynamo's
    guards, AOTAutograd's wrappers: ~0.2 ms a call on the lent hosts) would otherwise be
    what CUDA events time for the smaller shapes."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return sum(e.device_time for e in kernels) / calls


def measure(b: int, h: int, s: int, d: int, causal: bool) -> list[dict]:
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    grad = torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16)
    mask = create_block_mask((lambda b_, h_, qi, ki: qi >= ki) if causal else (lambda b_, h_, qi, ki: qi >= 0),
                             None, None, s, s, device="cuda")
    # a fresh compile per config: past Dynamo's recompile limit (8 shapes or masks of one
    # function) flex_attention silently runs its unfused eager path
    torch._dynamo.reset()
    flex = torch.compile(flex_attention)
    def step() -> None:
        q.grad = k.grad = v.grad = None  # no accumulation kernels: the backward graph's alone
        flex(q, k, v, block_mask=mask).backward(grad)

    fwd = _kernel_us(lambda: flex(q, k, v, block_mask=mask))
    step_us = _kernel_us(step)
    io = 2.0 * b * h * s * d  # one bf16 [b, h, s, d] tensor
    lse = 4.0 * b * h * s
    rows = []
    for bwd, us, nbytes in ((False, fwd, 4 * io + lse), (True, step_us - fwd, 8 * io + lse)):
        rows.append({"op": "flex_attention_backward" if bwd else "flex_attention", "class": "attention",
                     "dtype": "bf16", "median_us": round(us, 3), "bytes": nbytes,
                     "params": {"B": b, "Hq": h, "Hkv": h, "Sq": s, "Sk": s, "D": d, "causal": causal,
                                "bwd": bwd, "backend": "flex"}})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    rows = []
    for b, h, s, d in GRID:
        for causal in (False, True):
            rows += measure(b, h, s, d, causal)
            print(json.dumps(rows[-2:]), flush=True)
    meta = {"gpu": torch.cuda.get_device_name(0).replace("NVIDIA ", "").split(" ")[0],
            "device_name": torch.cuda.get_device_name(0), "torch": torch.__version__,
            "cuda": torch.version.cuda, "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "method": "profiler kernel time per call, 5 calls after 3 warm-up; bwd = step - fwd; bf16"}
    with open(args.out, "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
