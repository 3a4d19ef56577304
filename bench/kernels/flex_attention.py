"""Compiled FlexAttention vs SDPA's flash kernel on the real GPU, causal, GQA (issue 6).

phantom times torchtitan's compiled FlexAttention (block-causal mask over one document =
causal) as the fused flash kernel. This measures how far apart the two are on the GPU, at
Llama-3-8B's head layout, so that choice rests on a measurement:

    python bench/kernels/flex_attention.py --out $OUT/flex_attention_H200.json

Forward alone and forward+backward, CUDA events around 20 calls after 5 warm-up calls,
median; inputs bf16 [batch, heads, seq, 128].
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

SHAPES = [  # (batch, q heads, kv heads, seq)
    (1, 32, 8, 2048), (1, 32, 8, 4096), (1, 32, 8, 8192), (2, 32, 8, 8192), (1, 16, 4, 8192),
]


def _time(fn, iters: int = 20, warmup: int = 5) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    return statistics.median(times)


def causal(b, h, q_idx, kv_idx):  # noqa: ANN001
    return q_idx >= kv_idx


def measure(b: int, hq: int, hkv: int, s: int, d: int = 128) -> dict:
    q = torch.randn(b, hq, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(b, hkv, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(b, hkv, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    g = torch.randn(b, hq, s, d, device="cuda", dtype=torch.bfloat16)
    mask = create_block_mask(causal, None, None, s, s, device="cuda")
    flex = torch.compile(flex_attention)

    def flex_fwd():
        with torch.no_grad():
            flex(q, k, v, block_mask=mask, enable_gqa=True)

    def flex_fb():
        flex(q, k, v, block_mask=mask, enable_gqa=True).backward(g)

    def sdpa_fwd():
        with torch.no_grad():
            F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    def sdpa_fb():
        F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True).backward(g)

    row = {"batch": b, "hq": hq, "hkv": hkv, "seq": s, "d": d}
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION):
        row["sdpa_flash_fwd_us"] = _time(sdpa_fwd)
        row["sdpa_flash_fwd_bwd_us"] = _time(sdpa_fb)
    row["flex_fwd_us"] = _time(flex_fwd)
    row["flex_fwd_bwd_us"] = _time(flex_fb)
    row["flex_over_flash_fwd"] = row["flex_fwd_us"] / row["sdpa_flash_fwd_us"]
    row["flex_over_flash_bwd"] = ((row["flex_fwd_bwd_us"] - row["flex_fwd_us"])
                                  / (row["sdpa_flash_fwd_bwd_us"] - row["sdpa_flash_fwd_us"]))
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    rows = []
    for shape in SHAPES:
        rows.append(measure(*shape))
        print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in rows[-1].items()}), flush=True)
    meta = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda": torch.version.cuda,
            "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "method": "CUDA events around one call, 5 warm-up + 20 timed, median; bf16, causal"}
    with open(args.out, "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
