r"""What PyTorch's own host side costs per eager call on a GPU node: the table phantom ships.

Measures, on the GPU machine's host, the time the calling thread spends inside one eager torch
API call on small CUDA tensors (argument parsing, the dispatcher, autograd's node, the caching
allocator, the kernel launch), not the Python loop around it:

* `api_call_ns`: a call that dispatches no ATen op, by kind: a Tensor method (`x.dim()`), a
  torch function (`torch.is_floating_point(x)`), a property (`x.shape`);
* `ops`: per ATen overload (`str(OpOverload)`, e.g. "aten.add.Tensor"), a call that dispatches
  exactly that one overload, less `api_call_ns` of its kind: "no_grad" (under torch.no_grad(),
  inputs not requiring grad) and "grad" (floating inputs are leaves requiring grad, so autograd
  records a node; absent where the op is not differentiable). Cases are hand-listed (64x64
  float32 and the like) and, where `torch.testing._internal` imports (it needs `expecttest`),
  drawn from OpInfo sample inputs as well; a hand-listed call through a C builtin wins a row;
* `lists`: tensor-list ops (foreach, `_fused_adamw_`, cat, stack) at list lengths 1..256;
* `multi`: every case that dispatched several ops, with its op list and cost (for validation);
* `backward_node_ns`: the autograd engine's own cost per backward node;
* `record_function_ns`: an empty `torch.profiler.record_function` block.

Method: gc off; warm up; blocks of 100 calls timed with perf_counter_ns, the device synchronized
between blocks (untimed) so the launch queue never fills; per call, the median over blocks, less
the same loop calling a trivial C builtin of the same arity (`"".format(...)`). A call's result
is dropped at once, as a temporary's is, so its free (and in the grad column its autograd node's)
is part of its price.

Run on the GPU machine, on two or more device calls (one JSON per call; the shipped table's
three are in bench/host/data/host_costs_H200_calls/). `torch.testing._internal` needs expecttest,
which the GPU image lacks: carry its wheel in `.whl/host_cost_table` (here:
`pip download --no-deps -d .whl/host_cost_table expecttest==0.3.0`); without it only the
hand-listed cases run. Each call, about 4 minutes there:

    python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/host_cost_table/*.whl
    PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 python3 bench/host/host_cost_table.py \
        measure --out $OUT/host_costs_call1.json --budget-s 240     # then call2 on a second call

then, here (no GPU needed), into the table phantom ships:

    python bench/host/host_cost_table.py combine bench/host/data/host_costs_H200_calls/*.json \
        --out phantom/host/data/host_costs_H200.json

(the shipped H200 table also passed `--exclude` for the OpInfo lambdas its calls had not yet
flagged as test wrappers; its provenance "rows_excluded" names them).

`measure --cpu-test` runs the same logic on CPU tensors with tiny repeat counts (a check of the
script, not a measurement). Runs on torch 2.11 and later; never imports phantom.
"""
from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import types
import uuid
import warnings
from collections import Counter
from itertools import islice
from typing import Any, Callable

SCRIPT = "bench/host/host_cost_table.py"
LIST_LENGTHS = [1, 4, 16, 64, 256]
BACKWARD_CHAIN = 200
DETACH = "aten.detach.default"
# OpInfo samples tried per variant when looking for one that dispatches a single op
OPDB_SAMPLES = 4
# a timed loop must hold only the Python of a call, so the torch call's kinds of C callables
_C_TYPES = (types.BuiltinFunctionType, types.MethodDescriptorType, types.WrapperDescriptorType,
            types.MethodWrapperType, types.ClassMethodDescriptorType, types.GetSetDescriptorType,
            types.MemberDescriptorType)


class Slow(Exception):
    """A call too slow to time in blocks of 100 within the run's budget."""


def _is_c(obj: Any) -> bool:
    return isinstance(obj, _C_TYPES)


# ---------------------------------------------------------------------------------------------
# Timed loops. Each is generated for its call's shape (kind, name, positional count, keywords)
# so the loop body is exactly the call a script writes; the baseline is the same loop with the
# torch callable swapped for "".format (a C builtin that ignores any arguments), so subtracting
# it leaves only the time inside the torch call.

_LOOPS: dict = {}


def _loop(kind: str, name: str | None, npos: int, has_kw: bool) -> Callable:
    key = (kind, name, npos, has_kw)
    if key in _LOOPS:
        return _LOOPS[key]
    params = [f"a{i}" for i in range(npos)]
    if kind == "function":
        call = f"f({', '.join(params + (['**kw'] if has_kw else []))})"
    elif kind == "method":
        assert name and name.isidentifier(), name
        call = f"a0.{name}({', '.join(params[1:] + (['**kw'] if has_kw else []))})"
    elif kind == "property":
        assert name and name.isidentifier(), name
        call = f"a0.{name}"
    elif kind == "empty":
        call = "pass"
    elif kind == "with":
        call = "with f(*kw):\n            pass"
    else:
        raise ValueError(kind)
    src = (f"def loop(r, ns, f, kw{''.join(', ' + p for p in params)}):\n"
           f"    t0 = ns()\n"
           f"    for _ in r:\n"
           f"        {call}\n"
           f"    return ns() - t0\n")
    scope: dict = {}
    exec(compile(src, f"<loop {kind} {name}>", "exec"), scope)
    _LOOPS[key] = scope["loop"]
    return scope["loop"]


class Case:
    """One torch call: `make(grad)` builds its (args, kwargs) afresh. A hand-listed case's
    factory takes a `Maker` instead (`dev` given)."""

    def __init__(self, name: str, kind: str, target: Any, make: Callable, source: str = "hand",
                 refresh: bool = False, grad: bool = True, group: str = "op", dev: str | None = None) -> None:
        import torch

        if dev is not None:
            factory = make
            make = lambda g: factory(Maker(torch, dev, g))  # noqa: E731
        self.name, self.kind, self.target, self.make = name, kind, target, make
        self.source, self.refresh, self.grad, self.group = source, refresh, grad, group
        # an OpInfo's own lambda (wrapper_set_seed reseeds every generator per call): its price
        # is not torch's, so it never gives a row
        self.test_wrapper = source == "opdb" and kind == "function" and \
            (getattr(target, "__module__", None) or "").startswith("torch.testing")
        if kind == "function":
            self.python = not _is_c(target)
        else:
            self.python = not _is_c(getattr(torch.Tensor, target, None))

    def run(self, args: list, kw: dict) -> Any:
        if self.kind == "function":
            return self.target(*args, **kw)
        if self.kind == "method":
            return getattr(args[0], self.target)(*args[1:], **kw)
        return getattr(args[0], self.target)


class Meter:
    """Times calls on one device; holds the loop baselines."""

    def __init__(self, torch: Any, dev: str, cpu_test: bool) -> None:
        self.torch, self.dev = torch, dev
        self.n = 5 if cpu_test else 100
        self.blocks = 3 if cpu_test else 21
        self.base_blocks = 5 if cpu_test else 41
        # a call past this (estimated from 10 calls) is skipped, not timed: blocks of 100 would
        # eat the run's budget; such calls wait on the device (a sync), not on the host
        self.slow_ns = 1e9 if cpu_test else 2e6
        self.sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
        self._base: dict = {}

    def _blocks(self, loop: Callable, argv: Callable, blocks: int) -> list[float]:
        out = []
        for _ in range(blocks):
            a = argv()
            self.sync()
            out.append(loop(*a) / self.n)
        return out

    def baseline(self, kind: str, args: list, kw: dict) -> float:
        """ns per iteration of the same loop around a no-op C call of the same shape."""
        key = (kind, len(args), bool(kw))
        if key not in self._base:
            r = range(self.n)
            ns = time.perf_counter_ns
            if kind == "function":
                loop, argv = _loop("function", None, len(args), bool(kw)), (r, ns, "".format, kw, *args)
            elif kind == "method":
                loop, argv = _loop("method", "format", len(args), bool(kw)), (r, ns, None, kw, "", *args[1:])
            else:
                loop, argv = _loop("property", "real", 1, False), (r, ns, None, kw, 1.0)
            loop(*argv)
            self._base[key] = statistics.median(self._blocks(loop, lambda: argv, self.base_blocks))
        return self._base[key]

    def time_case(self, case: Case, args: list, kw: dict, grad: bool) -> float:
        """Median ns per call inside `case`, loop overhead taken off."""
        loop = _loop(case.kind, None if case.kind == "function" else case.target, len(args), bool(kw))
        f = case.target if case.kind == "function" else None
        ns = time.perf_counter_ns
        r = range(self.n)

        def argv() -> tuple:
            if case.refresh and grad:
                # an in-place op on a non-leaf chains a node per call: a fresh graph per block
                a, k = case.make(True)
                return (r, ns, f, k, *a)
            return (r, ns, f, kw, *args)

        est = loop(range(10), ns, f, kw, *args) / 10
        self.sync()
        if est > self.slow_ns:
            raise Slow(f"{est / 1e3:.0f} us per call")
        loop(*argv())  # warm block: allocator cache, lazily loaded kernels
        samples = self._blocks(loop, argv, self.blocks)
        return statistics.median(samples) - self.baseline(case.kind, args, kw)

    def time_loop(self, kind: str, f: Any, kw: Any, blocks: int) -> float:
        loop = _loop(kind, None, 0, False)
        argv = (range(self.n), time.perf_counter_ns, f, kw)
        loop(*argv)
        return statistics.median(self._blocks(loop, lambda: argv, blocks))


# ---------------------------------------------------------------------------------------------
# Dispatch logging: which ATen overloads a call reaches (the mode sees each op that gets to the
# backend; ops a composite calls from inside another op's kernel stay inside that op).

def _logger(torch: Any) -> Any:
    from torch.utils._python_dispatch import TorchDispatchMode

    class Log(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops: list[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    return Log


def _tensors(obj: Any, torch: Any) -> list:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for o in obj for t in _tensors(o, torch)]
    return []


# ---------------------------------------------------------------------------------------------
# The hand-listed cases: the calls models and optimizers make, on 64x64 float32 and the like.

class Maker:
    """Fresh inputs for one column: `f` a floating input (a leaf requiring grad in the grad
    column), `c` a constant, `nl` the self of an in-place op (a non-leaf in the grad column,
    since autograd refuses in-place ops on leaves), `i` indices, `b` a mask."""

    def __init__(self, torch: Any, dev: str, grad: bool) -> None:
        self.torch, self.dev, self.grad = torch, dev, grad

    def c(self, *shape: int, dtype: Any = None) -> Any:
        return self.torch.randn(shape, device=self.dev, dtype=dtype or self.torch.float32)

    def f(self, *shape: int, dtype: Any = None) -> Any:
        return self.c(*shape, dtype=dtype).requires_grad_(self.grad)

    def nl(self, *shape: int, dtype: Any = None) -> Any:
        return self.f(*shape, dtype=dtype).clone() if self.grad else self.c(*shape, dtype=dtype)

    def i(self, high: int, *shape: int) -> Any:
        return self.torch.randint(0, high, shape, device=self.dev)

    def b(self, *shape: int) -> Any:
        return self.torch.rand(*shape, device=self.dev) < 0.5

    def cpu(self, *shape: int, pin: bool = False) -> Any:
        t = self.torch.randn(*shape)
        return t.pin_memory() if pin and self.dev == "cuda" else t


def api_cases(torch: Any, dev: str) -> dict[str, Case]:
    x = lambda m: ([m.c(64, 64)], {})  # noqa: E731
    return {
        "method": Case("x.dim()", "method", "dim", x, group="api", dev=dev),
        "function": Case("torch.is_floating_point(x)", "function", torch.is_floating_point, x,
                         group="api", dev=dev),
        "property": Case("x.shape", "property", "shape", x, group="api", dev=dev),
    }


def nodispatch_cases(torch: Any, dev: str) -> list[Case]:
    """Calls that dispatch nothing, besides the three api_call_ns kinds."""
    x = lambda m: ([m.c(64, 64)], {})  # noqa: E731
    out = []
    for meth in ("size", "numel", "stride", "is_contiguous", "data_ptr", "element_size",
                 "is_floating_point", "get_device", "contiguous", "requires_grad_"):
        out.append(Case(f"x.{meth}()", "method", meth, x, grad=False, group="nodispatch", dev=dev))
    out.append(Case("x.size(0)", "method", "size", lambda m: ([m.c(64, 64), 0], {}), grad=False,
                    group="nodispatch", dev=dev))
    out.append(Case("x.to(torch.float32) [same dtype]", "method", "to",
                    lambda m: ([m.c(64, 64), torch.float32], {}), grad=False, group="nodispatch", dev=dev))
    for prop in ("dtype", "device", "requires_grad", "grad", "is_cuda", "ndim", "is_leaf", "grad_fn"):
        out.append(Case(f"x.{prop}", "property", prop, x, grad=False, group="nodispatch", dev=dev))
    out.append(Case("torch.numel(x)", "function", torch.numel, x, grad=False, group="nodispatch", dev=dev))
    out.append(Case("torch.is_grad_enabled()", "function", torch.is_grad_enabled,
                    lambda m: ([], {}), grad=False, group="nodispatch", dev=dev))
    return out


def hand_cases(torch: Any, dev: str) -> list[Case]:
    F = torch.nn.functional
    cases: list[Case] = []
    bf16, f16 = torch.bfloat16, torch.float16
    N = 64

    def fn(name: str, f: Any, make: Callable, **kw: Any) -> None:
        if f is not None:
            cases.append(Case(name, "function", f, make, dev=dev, **kw))

    def me(name: str, meth: str, make: Callable, **kw: Any) -> None:
        if hasattr(torch.Tensor, meth):
            cases.append(Case(name, "method", meth, make, dev=dev, **kw))

    def ip(name: str, meth: str, make: Callable) -> None:  # in-place: fresh non-leaf per block
        me(name, meth, make, refresh=True)

    x1 = lambda m: ([m.f(N, N)], {})  # noqa: E731
    x2 = lambda m: ([m.f(N, N), m.f(N, N)], {})  # noqa: E731
    x3 = lambda m: ([m.f(N, N), m.f(N, N), m.f(N, N)], {})  # noqa: E731

    # pointwise unary, functional, in-place, out=
    for u in ("abs", "neg", "exp", "log", "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid",
              "reciprocal", "relu", "erf", "floor", "sign", "isnan", "logical_not"):
        fn(f"torch.{u}(x)", getattr(torch, u, None), x1)
    for u in ("abs_", "neg_", "exp_", "sqrt_", "relu_", "sigmoid_", "tanh_", "reciprocal_"):
        ip(f"x.{u}()", u, lambda m: ([m.nl(N, N)], {}))
    for u in ("exp", "sqrt", "neg"):
        fn(f"torch.{u}(x, out=o)", getattr(torch, u), lambda m: ([m.c(N, N)], {"out": m.c(N, N)}), grad=False)

    # pointwise binary / ternary
    for b in ("add", "sub", "mul", "div", "maximum", "minimum", "atan2", "eq", "lt", "ne", "pow"):
        fn(f"torch.{b}(x, y)", getattr(torch, b), x2)
    fn("torch.add(x, y, alpha=2.0)", torch.add, lambda m: ([m.f(N, N), m.f(N, N)], {"alpha": 2.0}))
    fn("torch.add(x, 1.0)", torch.add, lambda m: ([m.f(N, N), 1.0], {}))
    fn("torch.mul(x, 2.0)", torch.mul, lambda m: ([m.f(N, N), 2.0], {}))
    fn("torch.div(x, y, rounding_mode='floor')", torch.div,
       lambda m: ([m.f(N, N), m.f(N, N)], {"rounding_mode": "floor"}))
    fn("torch.pow(x, 2.0)", torch.pow, lambda m: ([m.f(N, N), 2.0], {}))
    fn("torch.square(x)", torch.square, x1)
    fn("torch.gt(x, 0.0)", torch.gt, lambda m: ([m.f(N, N), 0.0], {}))
    fn("torch.fmod(x, 2.0)", torch.fmod, lambda m: ([m.f(N, N), 2.0], {}))
    fn("torch.logical_and(a, b)", torch.logical_and, lambda m: ([m.b(N, N), m.b(N, N)], {}))
    fn("torch.where(mask, x, y)", torch.where, lambda m: ([m.b(N, N), m.f(N, N), m.f(N, N)], {}))
    fn("torch.where(mask, x, 0.0)", torch.where, lambda m: ([m.b(N, N), m.f(N, N), 0.0], {}))
    fn("torch.clamp(x, -1.0, 1.0)", torch.clamp, lambda m: ([m.f(N, N), -1.0, 1.0], {}))
    fn("torch.clamp_min(x, 0.0)", torch.clamp_min, lambda m: ([m.f(N, N), 0.0], {}))
    fn("torch.lerp(x, y, 0.5)", torch.lerp, lambda m: ([m.f(N, N), m.f(N, N), 0.5], {}))
    fn("torch.addcmul(x, y, z, value=0.5)", torch.addcmul,
       lambda m: ([m.f(N, N), m.f(N, N), m.f(N, N)], {"value": 0.5}))
    fn("torch.addcdiv(x, y, z, value=0.5)", torch.addcdiv,
       lambda m: ([m.f(N, N), m.f(N, N), m.f(N, N)], {"value": 0.5}))
    me("x.add(y)", "add", x2)
    me("x.mul(y)", "mul", x2)
    me("x.__add__(y)", "__add__", x2)
    me("x.__mul__(y)", "__mul__", x2)
    me("x.__truediv__(2.0)", "__truediv__", lambda m: ([m.f(N, N), 2.0], {}))
    me("x.__rsub__(1.0)", "__rsub__", lambda m: ([m.f(N, N), 1.0], {}))
    fn("torch.add(x, y, out=o)", torch.add, lambda m: ([m.c(N, N), m.c(N, N)], {"out": m.c(N, N)}), grad=False)
    fn("torch.mul(x, y, out=o)", torch.mul, lambda m: ([m.c(N, N), m.c(N, N)], {"out": m.c(N, N)}), grad=False)

    # in-place binary (the optimizer and residual-stream kinds)
    ip("x.add_(y)", "add_", lambda m: ([m.nl(N, N), m.f(N, N)], {}))
    ip("x.add_(y, alpha=2.0)", "add_", lambda m: ([m.nl(N, N), m.f(N, N)], {"alpha": 2.0}))
    ip("x.add_(1.0)", "add_", lambda m: ([m.nl(N, N), 1.0], {}))
    ip("x.__iadd__(y)", "__iadd__", lambda m: ([m.nl(N, N), m.f(N, N)], {}))
    ip("x.sub_(y)", "sub_", lambda m: ([m.nl(N, N), m.f(N, N)], {}))
    ip("x.mul_(y)", "mul_", lambda m: ([m.nl(N, N), m.f(N, N)], {}))
    ip("x.mul_(0.9)", "mul_", lambda m: ([m.nl(N, N), 0.9], {}))
    ip("x.div_(y)", "div_", lambda m: ([m.nl(N, N), m.f(N, N)], {}))
    ip("x.div_(2.0)", "div_", lambda m: ([m.nl(N, N), 2.0], {}))
    ip("x.pow_(2.0)", "pow_", lambda m: ([m.nl(N, N), 2.0], {}))
    ip("x.addcmul_(y, z, value=0.5)", "addcmul_",
       lambda m: ([m.nl(N, N), m.f(N, N), m.f(N, N)], {"value": 0.5}))
    ip("x.addcdiv_(y, z, value=0.5)", "addcdiv_",
       lambda m: ([m.nl(N, N), m.f(N, N), m.f(N, N)], {"value": 0.5}))
    ip("x.lerp_(y, 0.1)", "lerp_", lambda m: ([m.nl(N, N), m.f(N, N), 0.1], {}))
    ip("x.clamp_(-1.0, 1.0)", "clamp_", lambda m: ([m.nl(N, N), -1.0, 1.0], {}))
    ip("x.copy_(y)", "copy_", lambda m: ([m.nl(N, N), m.f(N, N)], {}))
    ip("x.copy_(y_bf16)", "copy_", lambda m: ([m.nl(N, N), m.f(N, N, dtype=bf16)], {}))
    if dev == "cuda":
        ip("x.copy_(y_cpu)", "copy_", lambda m: ([m.nl(N, N), m.cpu(N, N)], {}))
        ip("x.copy_(y_pinned, non_blocking=True)", "copy_",
           lambda m: ([m.nl(N, N), m.cpu(N, N, pin=True)], {"non_blocking": True}))
    ip("x.fill_(1.0)", "fill_", lambda m: ([m.nl(N, N), 1.0], {}))
    ip("x.fill_(t0d)", "fill_", lambda m: ([m.nl(N, N), m.c()], {}))
    ip("x.zero_()", "zero_", lambda m: ([m.nl(N, N)], {}))
    ip("x.masked_fill_(mask, 0.0)", "masked_fill_", lambda m: ([m.nl(N, N), m.b(N, N), 0.0], {}))

    # reductions
    fn("torch.sum(x)", torch.sum, x1)
    me("x.sum(-1)", "sum", lambda m: ([m.f(N, N), -1], {}))
    fn("torch.sum(x, -1, keepdim=True)", torch.sum, lambda m: ([m.f(N, N), -1], {"keepdim": True}))
    fn("torch.mean(x)", torch.mean, x1)
    fn("torch.mean(x, -1)", torch.mean, lambda m: ([m.f(N, N), -1], {}))
    for r in ("amax", "amin", "argmax", "argmin", "cumsum", "logsumexp", "prod"):
        fn(f"torch.{r}(x, -1)", getattr(torch, r), lambda m: ([m.f(N, N), -1], {}))
    fn("torch.max(x)", torch.max, x1)
    fn("torch.max(x, -1)", torch.max, lambda m: ([m.f(N, N), -1], {}))
    fn("torch.min(x, -1)", torch.min, lambda m: ([m.f(N, N), -1], {}))
    fn("torch.var(x, -1)", torch.var, lambda m: ([m.f(N, N), -1], {}))
    fn("torch.std(x, -1)", torch.std, lambda m: ([m.f(N, N), -1], {}))
    fn("torch.var_mean(x, -1)", torch.var_mean, lambda m: ([m.f(N, N), -1], {}))
    fn("torch.linalg.vector_norm(x)", torch.linalg.vector_norm, x1)
    fn("torch.norm(x)", torch.norm, x1)
    fn("torch.all(mask)", torch.all, lambda m: ([m.b(N, N)], {}))
    fn("torch.any(mask)", torch.any, lambda m: ([m.b(N, N)], {}))
    fn("torch.topk(x, 5)", torch.topk, lambda m: ([m.f(N, N), 5], {}))
    fn("torch.sort(x, -1)", torch.sort, lambda m: ([m.f(N, N), -1], {}))
    fn("torch.argsort(x, -1)", torch.argsort, lambda m: ([m.f(N, N), -1], {}))
    fn("torch.count_nonzero(x)", torch.count_nonzero, x1)

    # views and reshapes
    me("x.view(4096)", "view", lambda m: ([m.f(N, N), 4096], {}))
    me("x.view(-1, 32)", "view", lambda m: ([m.f(N, N), -1, 32], {}))
    me("x.view(torch.int32)", "view", lambda m: ([m.c(N, N), torch.int32], {}))
    me("x.view_as(y)", "view_as", lambda m: ([m.f(N, N), m.c(N, N)], {}))
    me("x.reshape(4096)", "reshape", lambda m: ([m.f(N, N), 4096], {}))
    me("x.t().reshape(4096) [copy]", "reshape", lambda m: ([m.f(N, N).t(), 4096], {}))
    me("x.t()", "t", x1)
    me("x.transpose(0, 1)", "transpose", lambda m: ([m.f(N, N), 0, 1], {}))
    me("x.swapaxes(0, 1)", "swapaxes", lambda m: ([m.f(N, N), 0, 1], {}))
    me("x3.permute(2, 0, 1)", "permute", lambda m: ([m.f(8, N, N), 2, 0, 1], {}))
    me("x1.expand(64, 64)", "expand", lambda m: ([m.f(1, N), N, N], {}))
    me("x1.expand_as(x)", "expand_as", lambda m: ([m.f(1, N), m.c(N, N)], {}))
    me("x.unsqueeze(0)", "unsqueeze", lambda m: ([m.f(N, N), 0], {}))
    me("x1.squeeze(0)", "squeeze", lambda m: ([m.f(1, N), 0], {}))
    me("x1.squeeze()", "squeeze", lambda m: ([m.f(1, N)], {}))
    fn("torch.as_strided(x, (32, 32), (64, 1))", torch.as_strided, lambda m: ([m.f(N, N), (32, 32), (64, 1)], {}))
    me("x.flatten()", "flatten", x1)
    me("x3.flatten(0, 1)", "flatten", lambda m: ([m.f(8, N, N), 0, 1], {}))
    me("x.unflatten(1, (8, 8))", "unflatten", lambda m: ([m.f(N, N), 1, (8, 8)], {}))
    me("x.detach()", "detach", x1)
    me("x.diagonal()", "diagonal", x1)
    me("x.__getitem__(0)", "__getitem__", lambda m: ([m.f(N, N), 0], {}))
    me("x.__getitem__(slice(1, 10))", "__getitem__", lambda m: ([m.f(N, N), slice(1, 10)], {}))
    me("x.__getitem__((slice(None), slice(1, 10)))", "__getitem__",
       lambda m: ([m.f(N, N), (slice(None), slice(1, 10))], {}))
    me("x.__getitem__(None)", "__getitem__", lambda m: ([m.f(N, N), None], {}))
    me("x.__getitem__(idx)", "__getitem__", lambda m: ([m.f(N, N), m.i(N, 16)], {}))
    me("x.narrow(0, 1, 9)", "narrow", lambda m: ([m.f(N, N), 0, 1, 9], {}))
    me("x.select(0, 1)", "select", lambda m: ([m.f(N, N), 0, 1], {}))
    cases.append(Case("x.T", "property", "T", x1, dev=dev))
    cases.append(Case("x.mT", "property", "mT", x1, dev=dev))
    fn("torch.movedim(x3, 0, 2)", torch.movedim, lambda m: ([m.f(8, N, N), 0, 2], {}))
    fn("torch.unbind(x)", torch.unbind, lambda m: ([m.f(8, N)], {}))

    # copies and conversions
    me("x.clone()", "clone", x1)
    fn("torch.clone(x)", torch.clone, x1)
    me("x.t().contiguous()", "contiguous", lambda m: ([m.f(N, N).t()], {}))
    me("x.to(torch.float16)", "to", lambda m: ([m.f(N, N), f16], {}))
    me("x.half()", "half", x1)
    me("x.float() [fp16]", "float", lambda m: ([m.f(N, N, dtype=f16)], {}))
    me("x.to(torch.bfloat16)", "to", lambda m: ([m.f(N, N), bf16], {}))
    me("x.type_as(h)", "type_as", lambda m: ([m.f(N, N), m.c(2, dtype=f16)], {}))
    if dev == "cuda":
        me("x.cpu()", "cpu", x1)
        me("x_cpu.to('cuda')", "to", lambda m: ([m.cpu(N, N), "cuda"], {}), grad=False)
        me("x_pinned.to('cuda', non_blocking=True)", "to",
           lambda m: ([m.cpu(N, N, pin=True), "cuda"], {"non_blocking": True}), grad=False)
        me("x_cpu.cuda()", "cuda", lambda m: ([m.cpu(N, N)], {}), grad=False)

    # factories on the device
    d = {"device": dev}
    shp = (N, N)
    for name in ("empty", "zeros", "ones", "randn", "rand"):
        fn(f"torch.{name}((64, 64), device=d)", getattr(torch, name), lambda m: ([shp], d))
    fn("torch.empty(64, 64, device=d)", torch.empty, lambda m: ([N, N], d))
    fn("torch.full((64, 64), 2.0, device=d)", torch.full, lambda m: ([shp, 2.0], d))
    fn("torch.empty_strided((64, 64), (64, 1), device=d)", torch.empty_strided, lambda m: ([shp, (N, 1)], d))
    fn("torch.randint(0, 10, (64,), device=d)", torch.randint, lambda m: ([0, 10, (N,)], d))
    fn("torch.arange(64, device=d)", torch.arange, lambda m: ([N], d))
    fn("torch.arange(0, 64, device=d)", torch.arange, lambda m: ([0, N], d))
    fn("torch.eye(64, device=d)", torch.eye, lambda m: ([N], d))
    fn("torch.linspace(0, 1, 64, device=d)", torch.linspace, lambda m: ([0, 1, N], d))
    fn("torch.scalar_tensor(1.0, device=d)", torch.scalar_tensor, lambda m: ([1.0], d))
    fn("torch.tensor(1.0, device=d)", torch.tensor, lambda m: ([1.0], d))
    for name in ("empty_like", "zeros_like", "ones_like", "randn_like", "rand_like"):
        fn(f"torch.{name}(x)", getattr(torch, name), lambda m: ([m.c(N, N)], {}))
    fn("torch.full_like(x, 2.0)", torch.full_like, lambda m: ([m.c(N, N), 2.0], {}))
    for name in ("new_empty", "new_zeros", "new_ones"):
        me(f"x.{name}((64, 64))", name, lambda m: ([m.c(N, N), shp], {}))
    me("x.new_full((64, 64), 2.0)", "new_full", lambda m: ([m.c(N, N), shp, 2.0], {}))
    fn("torch.tril(x)", torch.tril, x1)
    fn("torch.triu(x)", torch.triu, x1)

    # matrix products
    fn("torch.mm(a, b)", torch.mm, x2)
    fn("torch.addmm(bias, a, b)", torch.addmm, lambda m: ([m.f(N), m.f(N, N), m.f(N, N)], {}))
    fn("torch.addmm(c, a, b)", torch.addmm, x3)
    fn("torch.bmm(A, B)", torch.bmm, lambda m: ([m.f(8, N, N), m.f(8, N, N)], {}))
    fn("torch.baddbmm(C, A, B)", torch.baddbmm, lambda m: ([m.f(8, N, N), m.f(8, N, N), m.f(8, N, N)], {}))
    fn("torch.matmul(a, b)", torch.matmul, x2)
    fn("torch.matmul(A, B)", torch.matmul, lambda m: ([m.f(8, N, N), m.f(8, N, N)], {}))
    fn("torch.matmul(A, b)", torch.matmul, lambda m: ([m.f(8, N, N), m.f(N, N)], {}))
    me("a.__matmul__(b)", "__matmul__", x2)
    fn("F.linear(x, w, b)", F.linear, lambda m: ([m.f(N, N), m.f(N, N), m.f(N)], {}))
    fn("F.linear(x, w)", F.linear, x2)
    fn("F.linear(x3, w, b)", F.linear, lambda m: ([m.f(8, N, N), m.f(N, N), m.f(N)], {}))
    fn("F.linear(x_bf16, w_bf16, b_bf16)", F.linear,
       lambda m: ([m.f(N, N, dtype=bf16), m.f(N, N, dtype=bf16), m.f(N, dtype=bf16)], {}))
    fn("torch.mm(a_bf16, b_bf16)", torch.mm, lambda m: ([m.f(N, N, dtype=bf16), m.f(N, N, dtype=bf16)], {}))
    fn("torch.mm(a, b, out=o)", torch.mm, lambda m: ([m.c(N, N), m.c(N, N)], {"out": m.c(N, N)}), grad=False)
    fn("torch.addmm(bias, a, b, out=o)", torch.addmm,
       lambda m: ([m.c(N), m.c(N, N), m.c(N, N)], {"out": m.c(N, N)}), grad=False)
    fn("torch.mv(a, v)", torch.mv, lambda m: ([m.f(N, N), m.f(N)], {}))
    fn("torch.dot(v, w)", torch.dot, lambda m: ([m.f(N), m.f(N)], {}))
    fn("torch.einsum('ij,jk->ik', a, b)", torch.einsum, lambda m: (["ij,jk->ik", m.f(N, N), m.f(N, N)], {}))

    # normalisation, activations, losses, attention, convolution
    ln = lambda m: ([m.f(N, N), (N,), m.f(N), m.f(N)], {})  # noqa: E731
    fn("torch.layer_norm(x, (64,), w, b)", torch.layer_norm, ln)
    fn("torch.native_layer_norm(x, (64,), w, b, 1e-5)", torch.native_layer_norm,
       lambda m: ([m.f(N, N), (N,), m.f(N), m.f(N), 1e-5], {}))
    fn("F.layer_norm(x, (64,), w, b)", F.layer_norm, ln)
    fn("torch.layer_norm(x_bf16, (64,), w_bf16, b_bf16)", torch.layer_norm,
       lambda m: ([m.f(N, N, dtype=bf16), (N,), m.f(N, dtype=bf16), m.f(N, dtype=bf16)], {}))
    fn("torch.rms_norm(x, (64,), w)", getattr(torch, "rms_norm", None), lambda m: ([m.f(N, N), (N,), m.f(N)], {}))
    fn("torch.rms_norm(x, (64,), w, 1e-6)", getattr(torch, "rms_norm", None),
       lambda m: ([m.f(N, N), (N,), m.f(N), 1e-6], {}))
    fn("F.rms_norm(x, (64,), w)", getattr(F, "rms_norm", None), lambda m: ([m.f(N, N), (N,), m.f(N)], {}))
    fn("F.group_norm(x4, 2, w, b)", F.group_norm, lambda m: ([m.f(2, 8, 16, 16), 2, m.f(8), m.f(8)], {}))
    fn("F.batch_norm(x4, rm, rv, w, b, training=True)", F.batch_norm,
       lambda m: ([m.f(2, 8, 16, 16), m.c(8), m.c(8).abs(), m.f(8), m.f(8)], {"training": True}))
    fn("torch.softmax(x, -1)", torch.softmax, lambda m: ([m.f(N, N), -1], {}))
    me("x.softmax(-1)", "softmax", lambda m: ([m.f(N, N), -1], {}))
    fn("F.softmax(x, -1)", F.softmax, lambda m: ([m.f(N, N), -1], {}))
    fn("torch.log_softmax(x, -1)", torch.log_softmax, lambda m: ([m.f(N, N), -1], {}))
    fn("F.log_softmax(x, -1)", F.log_softmax, lambda m: ([m.f(N, N), -1], {}))
    fn("F.gelu(x)", F.gelu, x1)
    fn("F.gelu(x, approximate='tanh')", F.gelu, lambda m: ([m.f(N, N)], {"approximate": "tanh"}))
    fn("F.silu(x)", F.silu, x1)
    fn("torch.nn.functional.relu(x)", F.relu, x1)
    fn("F.leaky_relu(x, 0.1)", F.leaky_relu, lambda m: ([m.f(N, N), 0.1], {}))
    fn("F.softplus(x)", F.softplus, x1)
    fn("F.mish(x)", F.mish, x1)
    fn("torch.dropout(x, 0.1, True)", torch.dropout, lambda m: ([m.f(N, N), 0.1, True], {}))
    fn("F.dropout(x, 0.1, True)", F.dropout, lambda m: ([m.f(N, N), 0.1, True], {}))
    fn("torch.embedding(W, idx)", torch.embedding, lambda m: ([m.f(1000, N), m.i(1000, 8, N)], {}))
    fn("F.embedding(idx, W)", F.embedding, lambda m: ([m.i(1000, 8, N), m.f(1000, N)], {}))
    ce = lambda m: ([m.f(N, 100), m.i(100, N)], {})  # noqa: E731
    fn("F.cross_entropy(logits, target)", F.cross_entropy, ce)
    fn("torch._C._nn.cross_entropy_loss(logits, target)", getattr(torch._C._nn, "cross_entropy_loss", None), ce)
    fn("torch._C._nn.nll_loss(logp, target)", torch._C._nn.nll_loss, ce)
    fn("F.nll_loss(logp, target)", F.nll_loss, ce)
    fn("F.mse_loss(x, y)", F.mse_loss, x2)
    qkv = lambda m: ([m.f(2, 4, N, N, dtype=bf16) for _ in range(3)], {"is_causal": True})  # noqa: E731
    fn("F.scaled_dot_product_attention(q, k, v, is_causal=True) [bf16]", F.scaled_dot_product_attention, qkv)
    fn("F.scaled_dot_product_attention(q, k, v) [bf16]", F.scaled_dot_product_attention,
       lambda m: ([m.f(2, 4, N, N, dtype=bf16) for _ in range(3)], {}))
    fn("F.scaled_dot_product_attention(q, k, v) [fp32]", F.scaled_dot_product_attention,
       lambda m: ([m.f(2, 4, N, N) for _ in range(3)], {}))
    fn("F.conv2d(x4, w, b, padding=1)", F.conv2d,
       lambda m: ([m.f(2, 8, 16, 16), m.f(8, 8, 3, 3), m.f(8)], {"padding": 1}))
    fn("F.pad(x, (1, 1))", F.pad, lambda m: ([m.f(N, N), (1, 1)], {}))
    fn("torch.constant_pad_nd(x, (1, 1))", torch.constant_pad_nd, lambda m: ([m.f(N, N), (1, 1)], {}))

    # indexing, gather/scatter, masking
    fn("torch.index_select(x, 0, idx)", torch.index_select, lambda m: ([m.f(N, N), 0, m.i(N, 16)], {}))
    fn("torch.gather(x, 1, idx2)", torch.gather, lambda m: ([m.f(N, N), 1, m.i(N, N, 8)], {}))
    fn("torch.scatter(x, 1, idx2, src)", torch.scatter, lambda m: ([m.f(N, N), 1, m.i(N, N, 8), m.f(N, 8)], {}))
    fn("torch.scatter_add(x, 1, idx2, src)", torch.scatter_add,
       lambda m: ([m.f(N, N), 1, m.i(N, N, 8), m.f(N, 8)], {}))
    ip("x.scatter_(1, idx2, src)", "scatter_", lambda m: ([m.nl(N, N), 1, m.i(N, N, 8), m.f(N, 8)], {}))
    ip("x.scatter_add_(1, idx2, src)", "scatter_add_", lambda m: ([m.nl(N, N), 1, m.i(N, N, 8), m.f(N, 8)], {}))
    ip("x.index_add_(0, idx, src)", "index_add_", lambda m: ([m.nl(N, N), 0, m.i(N, 16), m.f(16, N)], {}))
    ip("x.index_fill_(0, idx, 0.0)", "index_fill_", lambda m: ([m.nl(N, N), 0, m.i(N, 16), 0.0], {}))
    ip("x.index_put_((idx,), src)", "index_put_", lambda m: ([m.nl(N, N), (m.i(N, 16),), m.f(16, N)], {}))
    ip("x.index_copy_(0, idx, src)", "index_copy_",
       lambda m: ([m.nl(N, N), 0, torch.randperm(N, device=dev)[:16], m.f(16, N)], {}))
    me("x.masked_fill(mask, 0.0)", "masked_fill", lambda m: ([m.f(N, N), m.b(N, N), 0.0], {}))
    ip("x.__setitem__(slice(0, 8), 0.0)", "__setitem__", lambda m: ([m.nl(N, N), slice(0, 8), 0.0], {}))
    ip("x.__setitem__(idx, 0.0)", "__setitem__", lambda m: ([m.nl(N, N), m.i(N, 16), 0.0], {}))
    fn("torch.flip(x, [0])", torch.flip, lambda m: ([m.f(N, N), [0]], {}))
    fn("torch.roll(x, 1, 0)", torch.roll, lambda m: ([m.f(N, N), 1, 0], {}))
    me("x.repeat(2, 1)", "repeat", lambda m: ([m.f(N, N), 2, 1], {}))
    fn("torch.nan_to_num(x)", torch.nan_to_num, x1)

    # joining and splitting
    fn("torch.cat([x, y])", torch.cat, lambda m: ([[m.f(N, N), m.f(N, N)]], {}))
    fn("torch.cat([x, y], 1)", torch.cat, lambda m: ([[m.f(N, N), m.f(N, N)], 1], {}))
    fn("torch.cat([x, y], out=o)", torch.cat, lambda m: ([[m.c(N, N), m.c(N, N)]], {"out": m.c(2 * N, N)}), grad=False)
    fn("torch.stack([x, y])", torch.stack, lambda m: ([[m.f(N, N), m.f(N, N)]], {}))
    me("x.split(16)", "split", lambda m: ([m.f(N, N), 16], {}))
    me("x.split([16, 48])", "split", lambda m: ([m.f(N, N), [16, 48]], {}))
    me("x.split_with_sizes([16, 48])", "split_with_sizes", lambda m: ([m.f(N, N), [16, 48]], {}))
    fn("torch.split(x, 16)", torch.split, lambda m: ([m.f(N, N), 16], {}))
    me("x.chunk(4)", "chunk", lambda m: ([m.f(N, N), 4], {}))
    fn("torch.chunk(x, 4)", torch.chunk, lambda m: ([m.f(N, N), 4], {}))
    me("x.unbind(0)", "unbind", lambda m: ([m.f(8, N), 0], {}))

    # host-synchronising calls (their price includes waiting for the device)
    me("x.item()", "item", lambda m: ([m.f(1)], {}))
    fn("torch.nonzero(x)", torch.nonzero, lambda m: ([m.c(8, 8)], {}))
    me("x.__getitem__(mask)", "__getitem__", lambda m: ([m.f(8, 8), m.b(8, 8)], {}))
    return cases


# ---------------------------------------------------------------------------------------------

class Run:
    """One measuring call: cases in, the per-call JSON out."""

    def __init__(self, torch: Any, cpu_test: bool, budget_s: float) -> None:
        self.torch = torch
        self.cpu_test = cpu_test
        self.dev = "cpu" if cpu_test else "cuda"
        self.meter = Meter(torch, self.dev, cpu_test)
        self.Log = _logger(torch)
        self.t_start = time.monotonic()
        self.budget_s = budget_s
        self.records: list[dict] = []
        self.skipped: list[dict] = []
        self.api_samples: dict[str, list[float]] = {"method": [], "function": [], "property": []}
        self.notes: list[str] = []
        self.broken = False
        self.last_ops: list[str] = []  # ops of the last case evaluate() left untimed

    def elapsed(self) -> float:
        return time.monotonic() - self.t_start

    def dispatched(self, case: Case, args: list, kw: dict) -> tuple[list[str], Any]:
        log = self.Log()
        with log:
            out = case.run(args, kw)
        return log.ops, out

    def check_device(self) -> None:
        """After a failed call: is the device still usable? (A device-side assert is not.)"""
        try:
            self.meter.sync()
        except Exception as e:  # noqa: BLE001
            self.broken = True
            self.notes.append(f"device unusable after an error, stopped: {e!s:.200}")

    def evaluate(self, case: Case, columns: tuple = ("no_grad", "grad"), want_single: bool = False) -> dict | None:
        """Log and time `case` in each column. With want_single, stop (returning None) after the
        no_grad log unless it dispatched exactly one op."""
        torch = self.torch
        self.last_ops = []
        rec: dict = {"case": case.name, "source": case.source, "kind": case.kind,
                     "python": case.python, "group": case.group, "ops": {}, "ns": {},
                     "test_wrapper": case.test_wrapper}
        for col in columns:
            if col == "grad" and not case.grad:
                continue
            grad = col == "grad"
            ctx = torch.enable_grad() if grad else torch.no_grad()
            try:
                with ctx:
                    args, kw = case.make(grad)
                    out = case.run(args, kw)  # first call: lazy init stays out of the log
                    if grad and not any(t.requires_grad for t in _tensors(out, torch)):
                        rec["grad_skipped"] = "not differentiable"
                        continue
                    if case.refresh:
                        args, kw = case.make(grad)
                    ops, out = self.dispatched(case, args, kw)
                    del out
                    if grad:
                        ops = self._drop_detach_artifacts(rec, ops)
                    rec["ops"][col] = ops
                    if want_single and col == "no_grad" and len(ops) != 1:
                        self.last_ops = ops
                        return None
                    rec["ns"][col] = round(self.meter.time_case(case, args, kw, grad), 1)
            except Slow as e:
                self.skipped.append({"case": case.name, "column": col, "reason": f"slow: {e}"})
            except Exception as e:  # noqa: BLE001
                self.skipped.append({"case": case.name, "column": col,
                                     "reason": f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"})
                self.check_device()
                if self.broken:
                    break
        if rec["ops"]:
            self.records.append(rec)
            return rec
        return None

    @staticmethod
    def _drop_detach_artifacts(rec: dict, ops: list[str]) -> list[str]:
        """Autograd saving an op's output for backward detaches it (TensorImpl's
        shallow_copy_and_detach). With a dispatch mode on, that detach goes through Python and
        is logged as aten.detach; in a plain eager run it dispatches nothing. So a grad-column
        detach beyond those of the no_grad column is not the call's op (counted, not kept)."""
        extra = ops.count(DETACH) - rec["ops"].get("no_grad", []).count(DETACH)
        if extra <= 0:
            return ops
        rec["detach_artifacts"] = extra
        kept = list(ops)
        for _ in range(extra):
            kept.reverse()
            kept.remove(DETACH)
            kept.reverse()
        return kept

    # -- phases --------------------------------------------------------------------------------

    def measure_api(self) -> None:
        torch = self.torch
        for kind, case in api_cases(torch, self.dev).items():
            with torch.no_grad():
                args, kw = case.make(False)
                case.run(args, kw)
                ops, _ = self.dispatched(case, args, kw)
                if ops:
                    self.notes.append(f"api case {case.name} dispatched {ops}")
                self.api_samples[kind].append(self.meter.time_case(case, args, kw, False))

    def api_ns(self) -> dict[str, float]:
        return {k: round(statistics.median(v), 1) for k, v in self.api_samples.items() if v}

    def measure_lists(self) -> tuple[dict, dict]:
        torch = self.torch
        dev = self.dev
        shape = (64, 64)
        mk = lambda n: [torch.randn(*shape, device=dev) for _ in range(n)]  # noqa: E731

        def adamw(n: int) -> tuple[list, dict]:
            p, g, m, v = mk(n), mk(n), mk(n), [t.abs() for t in mk(n)]
            steps = [torch.tensor(1.0, device=dev) for _ in range(n)]
            return [p, g, m, v, [], steps], dict(lr=1e-3, beta1=0.9, beta2=0.999, weight_decay=0.01,
                                                  eps=1e-8, amsgrad=False, maximize=False,
                                                  grad_scale=None, found_inf=None)

        specs = [
            ("torch._foreach_add_(xs, 1.0)", torch._foreach_add_, lambda n: ([mk(n), 1.0], {})),
            ("torch._foreach_add_(xs, ys)", torch._foreach_add_, lambda n: ([mk(n), mk(n)], {})),
            ("torch._foreach_mul_(xs, 0.9)", torch._foreach_mul_, lambda n: ([mk(n), 0.9], {})),
            ("torch._foreach_mul_(xs, ys)", torch._foreach_mul_, lambda n: ([mk(n), mk(n)], {})),
            ("torch._foreach_lerp_(xs, ys, 0.1)", torch._foreach_lerp_, lambda n: ([mk(n), mk(n), 0.1], {})),
            ("torch._foreach_addcmul_(xs, ys, zs, 0.5)", torch._foreach_addcmul_,
             lambda n: ([mk(n), mk(n), mk(n), 0.5], {})),
            ("torch._foreach_addcdiv_(xs, ys, zs, 0.5)", torch._foreach_addcdiv_,
             lambda n: ([mk(n), mk(n), [t.abs() + 1 for t in mk(n)], 0.5], {})),
            ("torch._foreach_sqrt(xs)", torch._foreach_sqrt, lambda n: ([[t.abs() for t in mk(n)]], {})),
            ("torch._foreach_norm(xs)", torch._foreach_norm, lambda n: ([mk(n)], {})),
            ("torch._foreach_zero_(xs)", torch._foreach_zero_, lambda n: ([mk(n)], {})),
            ("torch._fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, [], steps, ...)",
             torch._fused_adamw_, adamw),
            ("torch.cat(xs)", torch.cat, lambda n: ([mk(n)], {})),
            ("torch.stack(xs)", torch.stack, lambda n: ([mk(n)], {})),
        ]
        lists: dict = {}
        cases: dict = {}
        api = self.api_ns()["function"]
        for name, f, make in specs:
            key = None
            row: dict = {"lengths": [], "ns": [], "tensors": []}
            for n in LIST_LENGTHS:
                case = Case(name, "function", f, lambda g, make=make, n=n: make(n), grad=False, group="list")
                try:
                    with torch.no_grad():
                        args, kw = case.make(False)
                        case.run(args, kw)
                        ops, _ = self.dispatched(case, args, kw)
                        if len(ops) != 1:
                            self.records.append({"case": f"{name} [n={n}]", "source": "hand", "kind": "function",
                                                 "python": case.python, "group": "list",
                                                 "ops": {"no_grad": ops}, "ns": {}})
                            self.notes.append(f"{name} at n={n} dispatched {len(ops)} ops: {sorted(set(ops))}")
                            break
                        key = key or ops[0]
                        ns = self.meter.time_case(case, args, kw, False) - api
                except Exception as e:  # noqa: BLE001
                    self.skipped.append({"case": f"{name} [n={n}]", "column": "no_grad",
                                         "reason": f"{type(e).__name__}: {str(e)[:160]}"})
                    self.check_device()
                    break
                row["lengths"].append(n)
                row["ns"].append(round(max(ns, 0.0), 1))
                row["tensors"].append(sum(len(a) for a in args if isinstance(a, list)))
            if key and row["lengths"]:
                lists[key] = row
                cases[key] = name
            if self.broken:
                break
        return lists, cases

    def measure_backward(self) -> dict:
        """Backward over a chain of y = y * 1.0001 (graph rebuilt untimed each block)."""
        torch = self.torch
        w = torch.randn(64, 64, device=self.dev, requires_grad=True)

        def graph(n: int) -> Any:
            y = w
            for _ in range(n):
                y = y * 1.0001
            return y.sum()

        def timed(n: int) -> float:
            samples = []
            for b in range(self.meter.blocks + 2):
                s = graph(n)
                w.grad = None
                self.meter.sync()
                t0 = time.perf_counter_ns()
                s.backward()
                t1 = time.perf_counter_ns()
                del s
                if b >= 2:  # two warm passes
                    samples.append(t1 - t0)
            return statistics.median(samples)

        def logged(n: int) -> Counter:
            s = graph(n)
            w.grad = None
            log = self.Log()
            with log:
                s.backward()
            return Counter(log.ops)

        n = BACKWARD_CHAIN
        total, fixed = timed(n), timed(0)
        per_node_ops = logged(n)
        per_node_ops.subtract(logged(0))
        where = "device"
        if not +per_node_ops and self.dev == "cuda":
            # the mode travels to autograd's device threads with its thread-local state; if it
            # did not, the same graph on CPU tensors runs the same backward formulas
            where = "cpu (not seen on the device thread)"
            wc = torch.randn(64, 64, requires_grad=True)
            y = wc
            for _ in range(n):
                y = y * 1.0001
            log = self.Log()
            with log:
                y.sum().backward()
            yc = wc.sum()
            log0 = self.Log()
            with log0:
                yc.backward()
            per_node_ops = Counter(log.ops)
            per_node_ops.subtract(Counter(log0.ops))
        ops_per_node = {k: v / n for k, v in (+per_node_ops).items()}
        return {"chain": n, "total_ns": total, "fixed_ns": fixed, "ops_per_node": ops_per_node,
                "ops_logged_on": where}

    def measure_record_function(self) -> float:
        rf = self.torch.profiler.record_function
        m = self.meter
        with_ = m.time_loop("with", rf, ("x",), m.base_blocks)
        empty = m.time_loop("empty", None, None, m.base_blocks)
        return with_ - empty

    def opdb_phase(self) -> dict:
        """OpInfo sample inputs, until the budget is spent."""
        status: dict = {"imported": False}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                from torch.testing._internal.common_methods_invocations import op_db
        except Exception as e:  # noqa: BLE001
            status["error"] = f"{type(e).__name__}: {e!s:.200}"
            return status
        status.update(imported=True, opinfos=len(op_db), done=0)
        gc.collect()
        gc.freeze()  # op_db's objects out of any later collection
        dev = self.dev
        dev_type = "cuda" if dev == "cuda" else "cpu"
        for k, op in enumerate(op_db):
            if self.elapsed() > self.budget_s or self.broken:
                status["stopped_at"] = op.name
                break
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self._opinfo(op, dev, dev_type)
            status["done"] = k + 1
            if k % 50 == 49:
                gc.collect()
        return status

    def _opinfo(self, op: Any, dev: str, dev_type: str) -> None:
        torch = self.torch
        try:
            dts = op.supported_dtypes(dev_type)
        except Exception:  # noqa: BLE001
            return
        dtype = next((d for d in (torch.float32, torch.int64, torch.bool, torch.complex64) if d in dts), None)
        if dtype is None:
            return
        base = f"opdb:{op.name}" + (f".{op.variant_test_name}" if op.variant_test_name else "")
        try:
            with torch.no_grad():
                samples = list(islice(op.sample_inputs(dev, dtype, requires_grad=False), OPDB_SAMPLES))
        except Exception as e:  # noqa: BLE001
            self.skipped.append({"case": base, "column": "samples", "reason": f"{type(e).__name__}: {str(e)[:120]}"})
            self.check_device()
            return
        if not samples:
            return
        grad_samples: list | None = None

        def get_grad_samples() -> list:
            nonlocal grad_samples
            if grad_samples is None:
                grad_samples = []
                if op.supports_autograd and dtype.is_floating_point:
                    try:
                        grad_samples = list(islice(op.sample_inputs(dev, dtype, requires_grad=True), OPDB_SAMPLES))
                    except Exception:  # noqa: BLE001
                        grad_samples = []
            return grad_samples

        def sample_args(s: Any, clone_input: bool) -> tuple[list, dict]:
            inp = s.input
            if clone_input and isinstance(inp, torch.Tensor):
                inp = inp.detach().clone()
            return [inp, *s.args], dict(s.kwargs)

        variants = []
        f = op.op
        mv = op.method_variant
        mname = getattr(mv, "__name__", None)
        if _is_c(f) or mv is None or not _is_c(mv) or not (mname or "").isidentifier() \
                or getattr(torch.Tensor, mname, None) is not mv:
            variants.append(("fn", "function", f, False))
        else:
            variants.append(("method", "method", mname, False))
        iv = op.inplace_variant
        iname = getattr(iv, "__name__", None)
        if iv is not None and op.name not in ("unsqueeze",) and iname and iname.isidentifier() \
                and getattr(torch.Tensor, iname, None) is iv:
            variants.append(("inplace", "method", iname, True))
        if op.supports_out and _is_c(f):
            variants.append(("out", "function", f, False))

        for label, kind, target, inplace in variants:
            primary = label in ("fn", "method")
            first_multi: Case | None = None
            for i, s in enumerate(samples):
                if self.broken or self.elapsed() > self.budget_s:
                    return

                def make(grad: bool, s=s, i=i, label=label, inplace=inplace) -> tuple[list, dict]:
                    if grad:
                        gs = get_grad_samples()
                        if i >= len(gs):
                            raise LookupError("no grad sample")
                        return sample_args(gs[i], False)
                    args, kw = sample_args(s, inplace)
                    if label == "out":
                        with torch.no_grad():
                            res = f(*args, **kw)
                        if isinstance(res, torch.Tensor):
                            kw["out"] = torch.empty_like(res)
                        elif isinstance(res, (tuple, list)) and res and all(isinstance(r, torch.Tensor) for r in res):
                            kw["out"] = tuple(torch.empty_like(r) for r in res)
                        else:
                            raise TypeError("no tensor result for out=")
                    return args, kw

                if kind == "method" and not isinstance(s.input, torch.Tensor):
                    break
                case = Case(f"{base}:{label}#{i}", kind, target, make, source="opdb",
                            grad=primary and op.supports_autograd and dtype.is_floating_point)
                if self.evaluate(case, want_single=True) is not None:
                    first_multi = None
                    break
                if first_multi is None and len(self.last_ops) > 1:
                    first_multi = case
            else:
                # no sample dispatched one op: time the first as a multi-op case (validation)
                if first_multi is not None and primary:
                    self.evaluate(first_multi)

    # -- output --------------------------------------------------------------------------------

    def derive(self) -> dict:
        api = self.api_ns()
        rows: dict = {}
        chosen: dict = {}
        variants: dict = {}
        multi: list = []
        nodispatch: dict = {}
        noop: list = []

        def prio(rec: dict) -> tuple:
            return (rec["source"] != "hand", rec["python"])  # hand-listed first, C builtins first

        ordered = sorted(enumerate(self.records), key=lambda ir: (prio(ir[1]), ir[0]))
        for _, rec in ordered:
            ops, ns, kind = rec["ops"], rec["ns"], rec["kind"]
            if rec["group"] == "nodispatch":
                if not any(ops.values()) and "no_grad" in ns:
                    nodispatch[rec["case"]] = ns["no_grad"]
                    continue
            single = {c: o[0] for c, o in ops.items() if len(o) == 1}
            if single:
                v = {"op": single.get("no_grad", single.get("grad")), "kind": kind, "python": rec["python"],
                     "source": rec["source"]}
                if rec.get("test_wrapper"):
                    v["test_wrapper"] = True
                for col, op in single.items():
                    if col in ns:
                        val = round(max(ns[col] - api[kind], 0.0), 1)
                        v[col] = val
                        if rec.get("test_wrapper"):
                            continue
                        row = rows.setdefault(op, {})
                        if col not in row:
                            row[col] = val
                            chosen.setdefault(op, {})[col] = rec["case"]
                variants[rec["case"]] = v
            many = {c: o for c, o in ops.items() if len(o) > 1}
            if many:
                m = {"case": rec["case"], "ops": many.get("no_grad", many.get("grad")), "kind": kind,
                     "python": rec["python"]}
                if "grad" in many and "no_grad" in many and many["grad"] != many["no_grad"]:
                    m["ops_grad"] = many["grad"]
                for col in many:
                    if col in ns:
                        m[col] = round(ns[col] - api[kind], 1)
                multi.append(m)
            if not single and not many:
                noop.append(rec["case"])
        rows = {k: {c: v[c] for c in ("no_grad", "grad") if c in v} for k, v in sorted(rows.items())}
        return {"api_call_ns": api, "ops": rows, "cases": dict(sorted(chosen.items())),
                "variants": variants, "multi": multi, "no_dispatch": nodispatch, "no_op_cases": noop}


def provenance(torch: Any, dev: str) -> dict:
    def sh(cmd: list[str]) -> str | None:
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout.strip() or None
        except Exception:  # noqa: BLE001
            return None

    cpu_model = None
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu_model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    driver = sh(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    return {
        "device": torch.cuda.get_device_name(0) if dev == "cuda" else "cpu (--cpu-test, not a measurement)",
        "driver": driver.splitlines()[0] if driver else None,
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "python": platform.python_version(),
        "cpu_model": cpu_model,
        "logical_cpus": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "script": SCRIPT,
        "call_id": uuid.uuid4().hex[:12],
    }


def measure(out: str, cpu_test: bool, budget_s: float, opdb: bool) -> None:
    import torch

    if not cpu_test and not torch.cuda.is_available():
        sys.exit("no CUDA device: run on the GPU machine, or pass --cpu-test")
    warnings.simplefilter("ignore")
    run = Run(torch, cpu_test, budget_s)
    dev = run.dev
    prov = provenance(torch, dev)
    prov.update(cpu_test=cpu_test, block_calls=run.meter.n, blocks=run.meter.blocks,
                baseline='"".format(...) with the same arguments (method: "".format, property: (1.0).real)')
    print(f"[host_cost_table] {prov['device']} torch {prov['torch']} python {prov['python']}", flush=True)
    if dev == "cuda":
        # context, cuBLAS handle and allocator warm before anything is timed
        a = torch.randn(64, 64, device=dev)
        (a @ a).sum().item()
    result: dict = {}
    gc.disable()  # a collection inside a timed block would be charged to the op
    try:
        run.measure_api()
        print(f"[{run.elapsed():6.1f}s] api {run.api_ns()}", flush=True)
        for case in nodispatch_cases(torch, dev):
            run.evaluate(case, columns=("no_grad",))
        hand = hand_cases(torch, dev)
        for k, case in enumerate(hand):
            run.evaluate(case)
            if run.broken:
                break
            if k % 40 == 39:
                print(f"[{run.elapsed():6.1f}s] hand {k + 1}/{len(hand)}", flush=True)
        run.measure_api()
        lists, list_cases = run.measure_lists()
        print(f"[{run.elapsed():6.1f}s] lists {len(lists)}", flush=True)
        try:
            backward = run.measure_backward()
        except Exception as e:  # noqa: BLE001
            run.notes.append(f"backward failed: {type(e).__name__}: {e!s:.200}")
            backward = {"chain": BACKWARD_CHAIN, "total_ns": float("nan"), "fixed_ns": float("nan"),
                        "ops_per_node": {}}
        try:
            rf = run.measure_record_function()
        except Exception as e:  # noqa: BLE001
            run.notes.append(f"record_function failed: {type(e).__name__}: {e!s:.200}")
            rf = float("nan")
        print(f"[{run.elapsed():6.1f}s] backward {backward['total_ns'] / backward['chain']:.0f} ns/node raw, "
              f"record_function {rf:.0f} ns", flush=True)
        status = run.opdb_phase() if opdb else {"imported": False, "error": "--no-opdb"}
        print(f"[{run.elapsed():6.1f}s] opdb {status}", flush=True)
        run.measure_api()
        derived = run.derive()
        rows = derived["ops"]
        api_fn = derived["api_call_ns"]
        bw_ops = backward["ops_per_node"]
        bw_missing = [op for op in bw_ops if "no_grad" not in rows.get(op, {})]
        ops_ns = sum(cnt * rows.get(op, {}).get("no_grad", 0.0) for op, cnt in bw_ops.items())
        raw_node = backward["total_ns"] / backward["chain"]
        backward.update(raw_per_node_ns=round(raw_node, 1), ops_ns_per_node=round(ops_ns, 1),
                        marginal_per_node_ns=round((backward["total_ns"] - backward["fixed_ns"]) / backward["chain"]
                                                   - ops_ns, 1),
                        ops_without_row=bw_missing)
        prov.update(seconds=round(run.elapsed(), 1), opdb=status, notes=run.notes)
        result = {
            "provenance": prov,
            "units": "ns",
            "api_call_ns": api_fn,
            "ops": rows,
            "lists": lists,
            "multi": derived["multi"],
            "backward_node_ns": round(raw_node - ops_ns, 1),
            "record_function_ns": round(rf, 1),
            "backward": backward,
            "no_dispatch": derived["no_dispatch"],
            "cases": derived["cases"],
            "list_cases": list_cases,
            "variants": derived["variants"],
            "no_op_cases": derived["no_op_cases"],
            "skipped": run.skipped,
        }
    finally:
        gc.enable()
        if not result:  # a crash part-way: keep what was measured
            result = {"provenance": {**prov, "notes": run.notes, "crashed": True}, "records": run.records,
                      "skipped": run.skipped}
        with open(out, "w") as fh:
            json.dump(result, fh, indent=1, sort_keys=False)
            fh.write("\n")
    print(f"[{run.elapsed():6.1f}s] wrote {out}: {len(result.get('ops', {}))} rows, "
          f"{len(result.get('multi', []))} multi, {len(result.get('skipped', []))} skipped", flush=True)
    show = ["aten.add.Tensor", "aten.mul.Tensor", "aten.addmm.default", "aten.mm.default", "aten.view.default",
            "aten.t.default", "aten.native_layer_norm.default", "aten.copy_.default", "aten.empty.memory_format"]
    for k in show:
        print(f"  {k:36s} {result.get('ops', {}).get(k)}")
    for k, v in result.get("lists", {}).items():
        print(f"  {k:36s} {v['ns']}")
    print(f"  api {result.get('api_call_ns')} backward_node {result.get('backward_node_ns')} "
          f"record_function {result.get('record_function_ns')}")


# ---------------------------------------------------------------------------------------------
# combine: the median over calls, and how far the calls were apart

def _median(vals: list) -> float | None:
    vals = [v for v in vals if v is not None]
    return round(statistics.median(vals), 1) if vals else None


def _rel(vals: list) -> float | None:
    """(max - min) / mean over the calls: for two calls, their relative difference."""
    vals = [v for v in vals if v is not None]
    if len(vals) < 2:
        return None
    mean = statistics.fmean(vals)
    return round((max(vals) - min(vals)) / mean, 4) if mean > 0 else 0.0


def _exclude_rows(call: dict, pattern: str | None) -> list[str]:
    """Take out of `call`'s rows the cells measured through a case that must not price torch
    (flagged test_wrapper, or named by `pattern`): the next single-op call of the same op in
    row order stands in, else the cell goes. Returns the cases taken out."""
    import re

    rx = re.compile(pattern) if pattern else None
    variants = call["variants"]

    def out(name: str) -> bool:
        return bool(variants.get(name, {}).get("test_wrapper")) or bool(rx and rx.search(name))

    gone = []
    for op, cols in list(call["cases"].items()):
        for col, name in list(cols.items()):
            if not out(name):
                continue
            gone.append(name)
            alt = next((n for n, v in variants.items() if v.get("op") == op and col in v and not out(n)), None)
            if alt is not None:
                call["ops"][op][col] = variants[alt][col]
                cols[col] = alt
            else:
                del call["ops"][op][col]
                del cols[col]
        if not call["ops"].get(op):
            call["ops"].pop(op, None)
            call["cases"].pop(op, None)
    return sorted(set(gone))


def combine(files: list[str], out: str, exclude: str | None = None) -> None:
    calls = []
    for path in files:
        with open(path) as fh:
            calls.append(json.load(fh))
    bad = [p for p, c in zip(files, calls) if "ops" not in c]
    if bad:
        sys.exit(f"not a finished measure output: {bad}")
    excluded = sorted({n for c in calls for n in _exclude_rows(c, exclude)})
    provs = [c["provenance"] for c in calls]
    common = {}
    for key in ("device", "driver", "torch", "torch_cuda", "python", "cpu_model", "logical_cpus"):
        vals = sorted({str(p.get(key)) for p in provs})
        common[key] = provs[0].get(key) if len(vals) == 1 else " | ".join(vals)
    prov = {**common, "date": max(p["date"] for p in provs), "script": SCRIPT,
            "combine": "median over calls", "cpu_test": any(p.get("cpu_test") for p in provs),
            "rows_excluded": {"pattern": exclude, "cases": excluded}, "calls": provs}

    spread: dict = {}

    def comb_map(key: str) -> dict:
        keys = list(dict.fromkeys(k for c in calls for k in c[key]))
        spread[key] = {k: _rel([c[key].get(k) for c in calls]) for k in keys}
        return {k: _median([c[key].get(k) for c in calls]) for k in keys}

    api = comb_map("api_call_ns")
    no_dispatch = comb_map("no_dispatch")
    spread.pop("no_dispatch")

    ops: dict = {}
    spread["ops"] = {}
    for k in sorted({k for c in calls for k in c["ops"]}):
        row, sp = {}, {}
        for col in ("no_grad", "grad"):
            vals = [c["ops"].get(k, {}).get(col) for c in calls]
            if any(v is not None for v in vals):
                row[col] = _median(vals)
                sp[col] = _rel(vals)
        ops[k] = row
        spread["ops"][k] = sp

    lists: dict = {}
    spread["lists"] = {}
    for k in dict.fromkeys(k for c in calls for k in c["lists"]):
        ref = max((c["lists"][k] for c in calls if k in c["lists"]), key=lambda v: len(v["lengths"]))
        ns, sp = [], []
        for i, n in enumerate(ref["lengths"]):
            vals = []
            for c in calls:
                v = c["lists"].get(k)
                if v and n in v["lengths"]:
                    vals.append(v["ns"][v["lengths"].index(n)])
            ns.append(_median(vals))
            sp.append(_rel(vals))
        lists[k] = {"lengths": ref["lengths"], "ns": ns, "tensors": ref["tensors"]}
        spread["lists"][k] = sp

    multi_by: dict = {}
    for c in calls:
        for m in c["multi"]:
            multi_by.setdefault(m["case"], []).append(m)
    multi = []
    for name, ms in multi_by.items():
        m = {k: v for k, v in ms[0].items() if k not in ("no_grad", "grad")}
        for col in ("no_grad", "grad"):
            vals = [x.get(col) for x in ms]
            if any(v is not None for v in vals):
                m[col] = _median(vals)
        multi.append(m)

    variants: dict = {}
    for name in dict.fromkeys(k for c in calls for k in c["variants"]):
        vs = [c["variants"][name] for c in calls if name in c["variants"]]
        v = {k: x for k, x in vs[0].items() if k not in ("no_grad", "grad")}
        for col in ("no_grad", "grad"):
            vals = [x.get(col) for x in vs]
            if any(x is not None for x in vals):
                v[col] = _median(vals)
        variants[name] = v

    backward: dict = {}
    for key in ("chain", "total_ns", "fixed_ns", "raw_per_node_ns", "ops_ns_per_node", "marginal_per_node_ns"):
        backward[key] = _median([c["backward"].get(key) for c in calls])
    backward["ops_per_node"] = calls[0]["backward"]["ops_per_node"]
    backward["ops_logged_on"] = calls[0]["backward"].get("ops_logged_on")
    backward["ops_without_row"] = sorted({o for c in calls for o in c["backward"].get("ops_without_row", [])})
    bnode = [c["backward_node_ns"] for c in calls]
    rfn = [c["record_function_ns"] for c in calls]
    spread["backward_node_ns"] = _rel(bnode)
    spread["record_function_ns"] = _rel(rfn)
    cells = [(k, col, v) for k, sp in spread["ops"].items() for col, v in sp.items() if v is not None]
    if cells:
        vals = sorted(v for _, _, v in cells)
        worst = max(cells, key=lambda kcv: kcv[2])
        # relative spread of a row near zero says little: the spread in ns shows it
        abs_d = sorted(round(abs(max(vs) - min(vs)), 1) for k in ops for col in ops[k]
                       for vs in [[c["ops"][k][col] for c in calls if col in c["ops"].get(k, {})]] if len(vs) > 1)
        spread["summary"] = {"ops_cells": len(vals), "median": vals[len(vals) // 2],
                             "p90": vals[int(0.9 * (len(vals) - 1))], "max": worst[2],
                             "max_cell": f"{worst[0]} {worst[1]}",
                             "abs_ns_median": abs_d[len(abs_d) // 2] if abs_d else None,
                             "abs_ns_max": abs_d[-1] if abs_d else None}
    cases = dict(calls[0]["cases"])
    result = {
        "provenance": prov,
        "units": "ns",
        "api_call_ns": api,
        "ops": ops,
        "lists": lists,
        "multi": multi,
        "backward_node_ns": _median(bnode),
        "record_function_ns": _median(rfn),
        "spread": spread,
        "backward": backward,
        "no_dispatch": no_dispatch,
        "cases": cases,
        "list_cases": calls[0].get("list_cases", {}),
        "variants": variants,
        "skipped": calls[0].get("skipped", []),
        "notes": [
            "ops: ns inside one call dispatching that overload, less api_call_ns of the call's kind; "
            "'grad' adds autograd's node; the call's result is freed inside the price",
            "lists: ns at each list length (tensors: tensors in all list arguments at that length), "
            "less api_call_ns['function']",
            "multi: calls dispatching several ops (ns less api_call_ns), for validating sums of rows",
            "backward_node_ns: backward over a chain of y * 1.0001 per node, less the no_grad rows of the ops "
            "each node runs; backward.fixed_ns is a backward of a graph with no chain",
            "variants: every single-op call measured; a row comes from the first hand-listed C-builtin call "
            "(cases), python=true marks a Python wrapper in torch (F.silu, Tensor.split) whose own Python "
            "is in its price",
        ],
    }
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with open(out, "w") as fh:
        json.dump(result, fh, indent=1)
        fh.write("\n")
    s = spread.get("summary", {})
    print(f"wrote {out}: {len(ops)} rows, {len(lists)} lists, {len(multi)} multi; spread median "
          f"{s.get('median')} max {s.get('max')} ({s.get('max_cell')})")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure", help="one measuring call (GPU machine)")
    m.add_argument("--out", required=True)
    m.add_argument("--cpu-test", action="store_true", help="CPU tensors, tiny repeats: checks the logic only")
    m.add_argument("--budget-s", type=float, default=270.0,
                   help="seconds after which the OpInfo phase stops (the hand-listed cases always run)")
    m.add_argument("--no-opdb", action="store_true", help="hand-listed cases only")
    c = sub.add_parser("combine", help="median over measuring calls into the shipped table")
    c.add_argument("files", nargs="+")
    c.add_argument("--out", required=True)
    c.add_argument("--exclude", help="regex of case names that give no row (the next call of the op stands in)")
    a = p.parse_args()
    if a.cmd == "measure":
        measure(a.out, a.cpu_test, a.budget_s, not a.no_opdb)
    else:
        combine(a.files, a.out, a.exclude)


if __name__ == "__main__":
    main()
