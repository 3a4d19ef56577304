"""Compiled FlexAttention kernel times over a grid of shapes: the calibration rows of its curve.

phantom costs FlexAttention's Triton kernel as flash attention over the blocks its mask keeps
(cost/roofline.py `_flex_attention`), on a curve of its own: `flex.fwd` / `flex.bwd`, fitted by
`python -m phantom.cost.calibrate_flex` to these rows. The grid holds dense and causal masks
(the masks whose block counts are exact at any size); the benchmark `bench/flex_attention.py`
keeps other shapes and masks (sliding window, prefix LM) out of the fit, to check it.

    python bench/kernels/flex_sweep.py --out $OUT/flex_sweep_H200.json      # on the GPU

Method: ten calls back to back between CUDA events after three warm-up calls, the median of
three such blocks; forward is the training forward (inputs require grad: the kernel also
writes the log-sum-exp), backward is a forward + backward step less the forward. bf16.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import statistics

import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

GRID = [  # batch, heads, sequence, head dim
    (8, 16, 1024, 64), (2, 16, 2048, 64), (1, 32, 4096, 64), (2, 8, 8192, 64),
    (16, 16, 512, 128), (4, 32, 1024, 128), (2, 32, 2048, 128), (1, 16, 4096, 128),
    (1, 16, 16384, 128),
]
REPS = 10


def _block_time_ms(fn) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(REPS):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / REPS


def _timed_us(fn) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    return statistics.median(_block_time_ms(fn) for _ in range(3)) * 1e3


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
    fwd = _timed_us(lambda: flex(q, k, v, block_mask=mask))
    step = _timed_us(lambda: flex(q, k, v, block_mask=mask).backward(grad))
    io = 2.0 * b * h * s * d  # one bf16 [b, h, s, d] tensor
    lse = 4.0 * b * h * s
    rows = []
    for bwd, us, nbytes in ((False, fwd, 4 * io + lse), (True, step - fwd, 8 * io + lse)):
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
            "method": "10 calls between CUDA events, 3 warm-up calls, median of 3 blocks; bwd = step - fwd; bf16"}
    with open(args.out, "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
