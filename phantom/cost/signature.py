"""Normalised op signatures: the key of a kernel-database row, and a spec to re-create the call.

A key names what decides which CUDA kernel runs and how long it takes:
  * the OpOverload ("aten.mm.default");
  * per tensor: dtype, shape and a layout class ("" contiguous, "p<order>" a dense permutation
    such as a transpose, "s<strides>" anything else, e.g. a slice of a fused qkv or a broadcast);
    CPU tensors (0-dim scalars handed to CUDA ops) are tagged "@cpu";
  * ints, bools, strings and None as they are (reduction dims, keepdim, is_causal, ...), floats
    only as zero / non-zero (a dropout probability of 0 skips the mask kernel; a learning rate or
    an eps changes values, not the kernel), dtypes and memory formats by name;
  * tensor lists (foreach, cat) by length and every tensor of the first list; later lists run in
    lockstep with the first, so only their length and dtype are added;
  * tf32 on or off for fp32 matrix ops.
Left out on purpose: the device index, storage offsets, requires_grad, generators, float values.

`op_key` runs once per distinct fast signature (DatabaseCostModel memoises on the roofline's
tuple signature), so its own speed matters less than the memo's; see tests/test_db.py.
`call_spec` records the first call of a key in JSON so that the timing process can rebuild
real inputs with the same metadata (float values kept exactly: they must stay valid arguments).
"""
from __future__ import annotations

from typing import Any

import torch

_DTYPE_SHORT = {
    torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.float64: "f64",
    torch.int64: "i64", torch.int32: "i32", torch.int16: "i16", torch.int8: "i8", torch.uint8: "u8",
    torch.bool: "b1", torch.complex64: "c64",
}
for _n, _s in (("float8_e4m3fn", "f8e4m3"), ("float8_e5m2", "f8e5m2")):
    if hasattr(torch, _n):
        _DTYPE_SHORT[getattr(torch, _n)] = _s

GEMM_LIKE = frozenset({"mm", "addmm", "bmm", "baddbmm", "addbmm", "linear", "mv", "addmv", "_addmm_activation",
                       "convolution", "convolution_backward", "_convolution"})


def dtype_short(dtype: torch.dtype) -> str:
    return _DTYPE_SHORT.get(dtype) or str(dtype).replace("torch.", "")


def _int(v: Any) -> int:
    try:
        return int(v)
    except Exception:  # an unbacked SymInt: its hint, else 1 (as the roofline does)
        hint = getattr(getattr(v, "node", None), "hint", None)
        return int(hint) if hint is not None else 1


def layout_class(shape: tuple[int, ...], strides: tuple[int, ...]) -> str:
    """"" for row-major contiguous (size-1 dims ignored), "p<order>" for a dense permutation
    (dims listed outermost first), else "s<strides>"."""
    expected = 1
    contiguous = True
    for size, stride in zip(reversed(shape), reversed(strides)):
        if size != 1 and stride != expected:
            contiguous = False
            break
        expected *= size
    if contiguous:
        return ""
    order = sorted(range(len(shape)), key=lambda i: (-strides[i], -i))
    expected = 1
    dense = True
    for i in reversed(order):
        if shape[i] != 1 and strides[i] != expected:
            dense = False
            break
        expected *= shape[i]
    if dense:
        return "p" + ".".join(map(str, order))
    return "s" + ".".join(map(str, strides))


def tensor_key(t: torch.Tensor) -> str:
    shape = tuple(_int(s) for s in t.shape)
    strides = tuple(_int(s) for s in t.stride())
    lay = layout_class(shape, strides)
    dev = "@cpu" if t.device.type == "cpu" else ""
    return f"{dtype_short(t.dtype)}[{','.join(map(str, shape))}]{':' + lay if lay else ''}{dev}"


def _value_key(x: Any, lockstep: list[bool]) -> str:
    if isinstance(x, torch.Tensor):
        return tensor_key(x)
    tx = type(x)
    if tx is float:
        return "0." if x == 0.0 else "f"
    if tx is bool or tx is int or tx is str or x is None:
        return repr(x)
    if tx is list or tx is tuple:
        if x and isinstance(x[0], torch.Tensor):
            if lockstep[0]:
                return f"L{len(x)}<{dtype_short(x[0].dtype)}>"
            lockstep[0] = True
        return "[" + ",".join(_value_key(v, lockstep) for v in x) + "]"
    if isinstance(x, torch.dtype):
        return dtype_short(x)
    if isinstance(x, torch.device):
        return x.type
    if isinstance(x, (torch.memory_format, torch.layout)):
        return str(x).replace("torch.", "")
    if isinstance(x, torch.SymInt):
        return str(_int(x))
    if isinstance(x, (torch.SymFloat, torch.SymBool)):
        return str(x)
    return tx.__name__  # generators and other objects do not change the kernel


def _has_fp32(args: tuple) -> bool:
    return any(isinstance(a, torch.Tensor) and a.dtype == torch.float32 for a in args)


def op_key(func: Any, args: tuple, kwargs: dict | None) -> str:
    """The database key of one call (see the module docstring)."""
    lockstep = [False]
    parts = [_value_key(a, lockstep) for a in args]
    if kwargs:
        # Layouts, pin_memory and generators do not change the kernel; the device type does
        # (a cast to "cpu" is a D2H copy, to "cuda" a kernel).
        parts += [f"{k}={_value_key(v, lockstep)}" for k, v in sorted(kwargs.items())
                  if k not in ("layout", "pin_memory", "generator")]
    key = f"{func}({','.join(parts)})"
    name = getattr(func, "__name__", "").split(".")[0]
    if name in GEMM_LIKE and _has_fp32(args):
        key += "+tf32" if torch.backends.cuda.matmul.allow_tf32 else "-tf32"
    return key


# --------------------------------------------------------------------------------------
# Call specs (JSON) for re-creating a call with real tensors
# --------------------------------------------------------------------------------------
def _spec(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return {"T": str(x.dtype).replace("torch.", ""), "shape": [_int(s) for s in x.shape],
                "stride": [_int(s) for s in x.stride()], "device": x.device.type}
    tx = type(x)
    if x is None or tx in (bool, int, float, str):
        return x
    if tx is list or tx is tuple:
        return {"L": [_spec(v) for v in x], "tuple": tx is tuple}
    if isinstance(x, torch.dtype):
        return {"dtype": str(x).replace("torch.", "")}
    if isinstance(x, torch.device):
        return {"device": x.type}
    if isinstance(x, torch.memory_format):
        return {"memory_format": str(x).replace("torch.", "")}
    if isinstance(x, torch.layout):
        return {"layout": str(x).replace("torch.", "")}
    if isinstance(x, torch.SymInt):
        return _int(x)
    return {"unsupported": type(x).__name__}


def call_spec(func: Any, args: tuple, kwargs: dict | None) -> dict:
    """JSON-able description of one call: op, args, kwargs (metadata only, never values)."""
    return {"op": str(func), "args": [_spec(a) for a in args],
            "kwargs": {k: _spec(v) for k, v in (kwargs or {}).items()}}
