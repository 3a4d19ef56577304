"""Rebuild a recorded call (phantom/cost/signature.py `call_spec`) with real, random CUDA tensors.

Runs in the plain timing process (a CUDA build of torch, no phantom interception). Floating-point
inputs are random normal values (never zeros: zeros flatter tensor cores). Integer inputs that
index something get valid indices for that op (embedding rows, class targets, gather/scatter
positions), spread over the whole range so the memory access pattern is realistic; other integer
and bool inputs are random 0/1. Calls that cannot be rebuilt raise `Unrebuildable` with a reason.
"""
from __future__ import annotations

import importlib
from typing import Any, Callable

import torch


class Unrebuildable(Exception):
    """A recorded call the timing process cannot re-create; the message says why."""


def resolve_op(name: str) -> torch._ops.OpOverload:
    """"aten.mm.default" -> torch.ops.aten.mm.default."""
    parts = name.split(".")
    if len(parts) != 3:
        raise Unrebuildable(f"op name {name!r} is not namespace.op.overload")
    if parts[0] == "fsdp":  # FSDP2's custom ops exist once its collectives module is imported
        importlib.import_module("torch.distributed.fsdp._fully_shard._fsdp_collectives")
    try:
        return getattr(getattr(getattr(torch.ops, parts[0]), parts[1]), parts[2])
    except AttributeError:
        raise Unrebuildable(f"op {name} does not exist in torch {torch.__version__}") from None


def _dtype(name: str) -> torch.dtype:
    d = getattr(torch, name, None)
    if not isinstance(d, torch.dtype):
        raise Unrebuildable(f"unknown dtype {name!r}")
    return d


def _tensor(spec: dict, device: str) -> torch.Tensor:
    dtype = _dtype(spec["T"])
    host = spec["device"] == "cpu"
    dev = "cpu" if host else device
    shape, stride = spec["shape"], spec["stride"]
    if host and len(shape) > 0:
        raise Unrebuildable("a host tensor argument with elements (a transfer, not a kernel)")
    t = torch.empty_strided(shape, stride, dtype=dtype, device=dev)
    if t.numel() == 0:
        return t
    # Fill the whole storage (covers overlapping and broadcast strides).
    base = torch.as_strided(t, (t.untyped_storage().nbytes() // t.element_size(),), (1,), 0)
    if dtype.is_floating_point or dtype.is_complex:
        if dtype.itemsize == 1:  # fp8: fill through bf16
            base.copy_(torch.randn(base.shape, device=dev, dtype=torch.bfloat16))
        else:
            base.normal_()
    elif dtype == torch.bool:
        base.copy_(torch.rand(base.shape, device=dev) < 0.5)
    else:
        base.random_(0, 2)
    return t


def _value(spec: Any, device: str) -> Any:
    if isinstance(spec, dict):
        if "T" in spec:
            return _tensor(spec, device)
        if "L" in spec:
            vals = [_value(v, device) for v in spec["L"]]
            return tuple(vals) if spec.get("tuple") else vals
        if "dtype" in spec:
            return _dtype(spec["dtype"])
        if "device" in spec:
            return torch.device(device if spec["device"] == "cuda" else spec["device"])
        if "memory_format" in spec:
            return getattr(torch, spec["memory_format"])
        if "layout" in spec:
            return getattr(torch, spec["layout"])
        raise Unrebuildable(f"argument of type {spec.get('unsupported', '?')} cannot be rebuilt")
    return spec


def _fill_index(t: Any, high: int) -> None:
    if isinstance(t, torch.Tensor) and not t.dtype.is_floating_point and t.dtype != torch.bool and t.numel():
        if high <= 0:
            raise Unrebuildable("index range is empty")
        base = torch.as_strided(t, (t.untyped_storage().nbytes() // t.element_size(),), (1,), 0)
        base.random_(0, high)


def _dim(x: torch.Tensor, d: int) -> int:
    return x.shape[d % max(x.dim(), 1)] if x.dim() else 1


# op name (without overload) -> fixes integer arguments to valid ranges in place.
def _embedding(a: list) -> None:
    _fill_index(a[1], a[0].shape[0])


def _embedding_bwd(a: list) -> None:
    _fill_index(a[1], int(a[2]))


def _nll(a: list) -> None:
    # nll_loss_forward(self, target, ...); nll_loss_backward(grad, self, target, ..., total_weight)
    bwd = isinstance(a[2], torch.Tensor)
    x, target = (a[1], a[2]) if bwd else (a[0], a[1])
    _fill_index(target, _dim(x, -1) if x.dim() == 1 else x.shape[1])
    if bwd and isinstance(a[-1], torch.Tensor):
        a[-1].fill_(float(max(target.numel(), 1)))  # total_weight: the count of targets


def _dim_index(a: list) -> None:  # index_select / gather / scatter*(self, dim, index, ...)
    _fill_index(a[2], _dim(a[0], int(a[1])))


def _index(a: list) -> None:  # index.Tensor(self, indices) / index_put_(self, indices, values, ...)
    for i, idx in enumerate(a[1]):
        if isinstance(idx, torch.Tensor) and idx.dtype != torch.bool:
            _fill_index(idx, a[0].shape[i])


def _assert_true(a: list) -> None:  # _assert_async(self[, msg]): random data would fire the assert
    a[0].fill_(1)


INDEX_FIXERS: dict[str, Callable[[list], None]] = {
    "_assert_async": _assert_true, "_functional_assert_async": _assert_true,
    "embedding": _embedding, "embedding_dense_backward": _embedding_bwd,
    "nll_loss_forward": _nll, "nll_loss_backward": _nll, "nll_loss2d_forward": _nll, "nll_loss2d_backward": _nll,
    "index_select": _dim_index, "gather": _dim_index, "scatter": _dim_index, "scatter_": _dim_index,
    "scatter_add": _dim_index, "scatter_add_": _dim_index, "scatter_reduce": _dim_index,
    "scatter_reduce_": _dim_index, "index_add": _dim_index, "index_add_": _dim_index,
    "index_copy": _dim_index, "index_copy_": _dim_index, "index_fill": _dim_index, "index_fill_": _dim_index,
    "index": _index, "_unsafe_index": _index, "index_put": _index, "index_put_": _index,
    "_index_put_impl_": _index, "_unsafe_index_put": _index,
}
# Ops whose output size depends on values, or that read values on the host: their time depends
# on data the recording never saw.
DATA_DEPENDENT = frozenset({"nonzero", "masked_select", "unique", "_unique2", "unique_consecutive",
                            "_local_scalar_dense", "item", "is_nonzero", "equal", "multinomial", "randperm"})


def rebuild(spec: dict, device: str = "cuda") -> tuple[torch._ops.OpOverload, Callable[[], Any], float]:
    """(op, a function that runs the call once on fresh inputs, input bytes of one input set).

    Each call of the returned `make` builds a new input set (for rotation); the returned
    `run(inputs)` is op(*args, **kwargs)."""
    func = resolve_op(spec["op"])
    name = spec["op"].split(".")[1]
    if name in DATA_DEPENDENT:
        raise Unrebuildable(f"{name}: output or time depends on tensor values the recording never saw")
    fixer = INDEX_FIXERS.get(name)
    if fixer is None and any(_has_int_tensor(v) for v in spec["args"]) and _looks_like_index_op(name):
        raise Unrebuildable(f"{name}: integer index argument with no known valid range")

    def make() -> tuple[list, dict]:
        args = [_value(v, device) for v in spec["args"]]
        kwargs = {k: _value(v, device) for k, v in spec["kwargs"].items()}
        if fixer is not None:
            fixer(args)
        return args, kwargs

    nbytes = sum(_spec_bytes(v) for v in spec["args"]) + sum(_spec_bytes(v) for v in spec["kwargs"].values())
    return func, make, float(nbytes)


def _has_int_tensor(spec: Any) -> bool:
    if isinstance(spec, dict) and "T" in spec:
        return spec["T"].startswith(("int", "uint"))
    if isinstance(spec, dict) and "L" in spec:
        return any(_has_int_tensor(v) for v in spec["L"])
    return False


def _looks_like_index_op(name: str) -> bool:
    return any(w in name for w in ("index", "gather", "scatter", "embedding", "take", "put", "nll"))


def _spec_bytes(spec: Any) -> int:
    if isinstance(spec, dict) and "T" in spec:
        n = 1
        for s, st in zip(spec["shape"], spec["stride"]):
            if st != 0:
                n *= s
        return n * _dtype(spec["T"]).itemsize
    if isinstance(spec, dict) and "L" in spec:
        return sum(_spec_bytes(v) for v in spec["L"])
    return 0
