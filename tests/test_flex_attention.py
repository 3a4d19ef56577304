"""FlexAttention: the block mask's counts decide the kernel's work (cost/roofline.py
`_flex_attention`, interception/attention.py `create_block_mask`)."""
from __future__ import annotations

import re

import torch

from conftest import run_phantom
from phantom.cost.roofline import FLEX_BLOCK_COUNTS_ATTR, RooflineCostModel, flex_cta_blocks
from phantom.hardware import get_gpu


def _mask(kv_counts: torch.Tensor | None, q_counts: torch.Tensor | None, block: int = 128) -> tuple:
    """A BlockMask.as_tuple() with only what the cost model reads."""
    kv_num = torch.zeros(1, 1, 1 if kv_counts is None else kv_counts.numel(), dtype=torch.int32)
    if kv_counts is not None:
        setattr(kv_num, FLEX_BLOCK_COUNTS_ATTR,
                {"kv_num_blocks": kv_counts.view(1, 1, -1), "q_num_blocks": q_counts.view(1, 1, -1)})
    return (0, 0, kv_num, *([None] * 11), block, block, None)


def _flex_ms(model: RooflineCostModel, s: int, mask: tuple, bwd: bool = False) -> float:
    q = torch.empty(4, 16, s, 64, dtype=torch.bfloat16, device="meta")
    hop = torch._higher_order_ops.flex_attention
    if bwd:
        hop = torch._higher_order_ops.flex_attention_backward
        args = (q, q, q, q, torch.empty(4, 16, s, device="meta"), q, None, None, None, mask, 1.0, {})
        out = (q, q, q, ())
    else:
        args = (q, q, q, None, mask, 1.0, {})
        out = (q, torch.empty(4, 16, s, device="meta"))
    cost = model.estimate(hop, args, {}, out)
    assert cost.op_class == "attention" and model.fallbacks == {}
    return cost.gpu_ns / 1e6


def test_flex_cta_blocks_follow_the_masks_counts():
    n = 32
    causal_kv = torch.arange(1, n + 1)
    causal_q = torch.arange(n, 0, -1)
    assert flex_cta_blocks(_mask(causal_kv, causal_q), bwd=False) == causal_kv.double().tolist()
    assert flex_cta_blocks(_mask(causal_kv, causal_q), bwd=True) == causal_q.double().tolist()
    assert flex_cta_blocks(_mask(None, None), bwd=False) is None  # unknown: charged dense


def test_flex_attention_costs_the_blocks_its_mask_keeps():
    model = RooflineCostModel(get_gpu("H100"))
    n, s = 32, 4096
    dense = _flex_ms(model, s, _mask(torch.full((n,), n), torch.full((n,), n)))
    unknown = _flex_ms(model, s, _mask(None, None))
    causal = _flex_ms(model, s, _mask(torch.arange(1, n + 1), torch.arange(n, 0, -1)))
    window = _flex_ms(model, s, _mask(torch.arange(1, n + 1).clamp(max=9), torch.full((n,), 9)))
    assert unknown == dense  # a mask phantom could not read is the dense kernel
    assert 0.45 < causal / dense < 0.65  # half the blocks, and a causal schedule's tail
    # a 1024-token window keeps ~8.9 blocks a row against causal's 16.5 (real H100: 0.56x)
    assert 0.45 < window / causal < 0.65
    assert _flex_ms(model, s, _mask(torch.full((n,), n), torch.full((n,), n)), bwd=True) > 2 * dense


FLEX_SCRIPT = """
import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention
# batch 16: GPU-bound, so the events time the kernels and not this machine's host noise
q, k, v = (torch.randn(16, 16, 4096, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
           for _ in range(3))
unknown = torch.zeros(4096, dtype=torch.int64, device="cuda")  # made on the device: values unknown
docs = (torch.arange(4096) // 512).cuda()  # 8 documents, from the CPU: values known
masks = {
    "dense": create_block_mask(lambda b, h, q, k: q >= 0, None, None, 4096, 4096),
    "causal": create_block_mask(lambda b, h, q, k: q >= k, None, None, 4096, 4096),
    "unknown": create_block_mask(lambda b, h, q, k: unknown[q] == unknown[k], None, None, 4096, 4096),
    "documents": create_block_mask(lambda b, h, q, k: (docs[q] == docs[k]) & (q >= k), None, None,
                                   4096, 4096),
}
flex = torch.compile(flex_attention)
for name, mask in masks.items():
    for _ in range(2):
        flex(q, k, v, block_mask=mask).sum().backward()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        flex(q, k, v, block_mask=mask).sum().backward()
    end.record()
    torch.cuda.synchronize()
    print(f"{name} {start.elapsed_time(end) / 5:.4f} ms")
"""


def test_compiled_flex_attention_end_to_end(script):
    out = run_phantom(["run", "--quiet", "--gpu", "H100", str(script(FLEX_SCRIPT))])
    assert out.returncode == 0, out.stderr[-3000:]
    ms = {name: float(v) for name, v in re.findall(r"^(\w+) ([0-9.]+) ms$", out.stdout, re.M)}
    assert set(ms) == {"dense", "causal", "unknown", "documents"}, out.stdout
    assert ms["causal"] < 0.8 * ms["dense"]
    # a mask over device values phantom does not have: documented as dense
    assert abs(ms["unknown"] / ms["dense"] - 1) < 0.05
    # document ids copied from the CPU are known: 512-token documents keep ~2.5 of a causal
    # row's 16.5 blocks
    assert ms["documents"] < 0.7 * ms["causal"]
