"""One optimizer step of DeepSpeed's FusedAdam (its multi_tensor_adam CUDA kernel) against torch's
fused AdamW on the same fp32 tensors: the evidence for how phantom prices FusedAdam
(phantom/adapters/deepspeed.py). Run on a GPU machine with DeepSpeed's fused_adam op buildable;
prints one `adam: {json}` line per case (bench/suites/deepspeed.py real records them).
"""
import json

import torch
from deepspeed.ops.adam import FusedAdam


def time_step(opt, iters: int = 10) -> float:
    for _ in range(3):
        opt.step()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(iters):
        opt.step()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def case(name: str, shapes: list[int]) -> None:
    params = [torch.nn.Parameter(torch.randn(n, device="cuda")) for n in shapes]
    for p in params:
        p.grad = torch.randn_like(p)
    kw = dict(lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    ds_ms = time_step(FusedAdam(params, adam_w_mode=True, **kw))
    torch_ms = time_step(torch.optim.AdamW(params, fused=True, **kw))
    print("adam: " + json.dumps({"case": name, "elements": sum(shapes), "tensors": len(shapes),
                                 "deepspeed_fused_adam_ms": round(ds_ms, 4),
                                 "torch_fused_adamw_ms": round(torch_ms, 4)}), flush=True)


if __name__ == "__main__":
    case("flat-100M", [100_000_000])
    case("flat-750M", [750_000_000])
    case("200x4M", [4_000_000] * 200)
