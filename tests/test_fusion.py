"""engine/fusion.py: the bytes a torch.compile'd run of pointwise ops moves as one kernel."""
from __future__ import annotations

import torch

from phantom.cost import KernelCost
from phantom.engine.fusion import FusedKernel

COST = KernelCost(gpu_ns=1.0, op_class="elementwise", source="model", flops=10.0, bytes=0.0)


def _run(fused: FusedKernel, name: str, fn, *args):
    out = fn(*args)
    fused.add(name, args, {}, out, COST)
    return out


def test_a_chain_reads_its_inputs_once_and_writes_what_it_returns():
    y = torch.randn(4, 16, dtype=torch.bfloat16)
    y1, y2 = torch.chunk(y, 2, -1)  # views: no kernel, no op seen
    fused = FusedKernel(stream_id=0)
    a = _run(fused, "silu", torch.nn.functional.silu, y1)
    out = _run(fused, "mul", torch.mul, a, y2)
    # y1 and y2 read (64 + 64 bytes), out written (64); the intermediate stays in registers
    assert fused.nbytes(out) == 3 * 4 * 8 * 2
    assert fused.flops == 20.0 and fused.single_cost is None


def test_each_part_of_a_cat_reads_its_own_inputs():
    g = torch.randn(4, 8)
    y = torch.randn(4, 8)
    fused = FusedKernel(stream_id=0)
    a = _run(fused, "mul", torch.mul, g, y)
    b = _run(fused, "sigmoid", torch.sigmoid, y)
    out = _run(fused, "cat", lambda parts: torch.cat(parts, -1), [a, b])  # aten.cat's list
    part = 4 * 8 * 4
    # part a reads g and y, part b reads y again; the cat's output is written
    assert fused.nbytes(out) == 3 * part + 2 * part


def test_an_in_place_update_of_an_earlier_tensor_is_written_back():
    x = torch.randn(16)
    y = torch.randn(16)
    fused = FusedKernel(stream_id=0)
    z = _run(fused, "mul", torch.mul, y, 2.0)
    _run(fused, "add_", torch.Tensor.add_, x, z)
    # the function returns nothing: x and y read, x written back
    assert fused.nbytes(()) == 3 * 16 * 4
    # ended midway (None): everything made is written too, with what it needs (y)
    assert fused.nbytes(None) == 3 * 16 * 4 + 2 * 16 * 4
    assert FusedKernel(0).nbytes(None) == 0


def test_one_op_keeps_its_own_cost():
    fused = FusedKernel(stream_id=0)
    _run(fused, "neg", torch.neg, torch.ones(3))
    assert fused.single_cost is COST
