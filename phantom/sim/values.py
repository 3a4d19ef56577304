"""What a script sees when it reads the value of a fake CUDA tensor.

Fake tensors have no values, so `.item()`, `.tolist()`, `.cpu()` and other device-to-host
copies return placeholders. The policy (README, "Data-dependent reads"):

- floating point: 0.0   (loss prints as 0; a GradScaler's found-inf flag reads "no inf")
- integer:        1     (neutral for the divisions and counts scripts do with token counts)
- bool:           the *healthy* answer where the tensor comes from a finiteness check
                  (`isfinite(x)` -> True, `isnan(x)`/`isinf(x)` -> False, propagated
                  through all/any/logical_not/and/or), else False.

A value phantom can know is read back as it is: factories and fills (`torch.full(..., 1024.)`),
small CPU data copied to the device, arithmetic on such values, including in place (an
optimizer's step counter). An in-place op it cannot follow makes copied values unknown again.

With `--on-data-read error` the read raises `DataReadError` naming the user's source line,
so control flow that depends on tensor values can be found.
"""
from __future__ import annotations

import linecache
from typing import Any

import operator
import sys

import torch

aten = torch.ops.aten

HINT_ATTR = "_phantom_value_hint"
# Small CUDA tensors copied from real CPU data keep that data here ("shadow"), so metadata a
# framework ships through the GPU (DDP's bucket indices, shape exchanges) reads back right.
SHADOW_ATTR = "_phantom_shadow"
SHADOW_MAX_NUMEL = 1 << 16
# Integer and boolean data (token ids, attention masks, document ids) is kept up to this size:
# masks built from it on the device are evaluated on these values (FlexAttention's block mask,
# interception/attention.py). 4M int64 elements: a 32 MiB copy a batch.
SHADOW_MAX_NUMEL_INDEX = 1 << 22

# Factories and fills whose value is known from their arguments (e.g. GradScaler's scale).
_VALUE_SOURCES = {
    aten.full.default: lambda args: args[1],
    aten.fill_.Scalar: lambda args: args[1],
    aten.ones.default: lambda args: 1,
    aten.ones_like.default: lambda args: 1,
    aten.zeros.default: lambda args: 0,
    aten.zeros_like.default: lambda args: 0,
    aten.zero_.default: lambda args: 0,
    aten.new_ones.default: lambda args: 1,
    aten.new_zeros.default: lambda args: 0,
}
# Ops that pass the hint of their first tensor argument through.
_HINT_PASSTHROUGH = {
    aten.all.default, aten.all.dim, aten.all.dims, aten.any.default, aten.any.dim,
    aten.any.dims, aten.view.default, aten.clone.default, aten._to_copy.default,
    aten.squeeze.default, aten.squeeze.dim, aten.reshape.default, aten.detach.default,
    aten.alias.default, aten.select.int, aten.expand.default, aten.lift_fresh.default,
    aten._unsafe_view.default,
    # a reduction of a uniform tensor to one of its elements
    aten.max.default, aten.min.default, aten.amax.default, aten.amin.default, aten.mean.default,
}
# Comparisons of uniform tensors (or Python scalars) are uniform.
_COMPARISONS = {
    aten.eq.Scalar: operator.eq, aten.eq.Tensor: operator.eq, aten.ne.Scalar: operator.ne,
    aten.ne.Tensor: operator.ne, aten.lt.Scalar: operator.lt, aten.lt.Tensor: operator.lt,
    aten.le.Scalar: operator.le, aten.le.Tensor: operator.le, aten.gt.Scalar: operator.gt,
    aten.gt.Tensor: operator.gt, aten.ge.Scalar: operator.ge, aten.ge.Tensor: operator.ge,
}
# And / or, bitwise (`&`, `|` on bool tensors) and logical: a known False (0) decides an and,
# a known True an or, whatever the other side holds. Hugging Face's `generate` stops when
# `unfinished & ~(max_length_reached | eos_found)` is all False: the length criterion is known,
# the end-of-sequence one is not, and without this the loop never ended.
_ANDS = {aten.bitwise_and.Tensor, aten.bitwise_and.Scalar, aten.logical_and.default}
_ORS = {aten.bitwise_or.Tensor, aten.bitwise_or.Scalar, aten.logical_or.default}

_ARITHMETIC = {
    aten.mul.Tensor: operator.mul, aten.mul.Scalar: operator.mul,
    aten.add.Tensor: operator.add, aten.add.Scalar: operator.add,
    aten.sub.Tensor: operator.sub, aten.sub.Scalar: operator.sub,
    aten.div.Tensor: operator.truediv, aten.div.Scalar: operator.truediv,
    aten.minimum.default: min, aten.maximum.default: max,
}

# In-place arithmetic keeps a hinted tensor's value known: an optimizer's step counter is a
# one-element tensor made from a known value and advanced by `+= 1` (`_foreach_add_` in
# torch.optim's foreach paths); without the update its hint stays at the first value, and a
# bias correction `1 - beta ** step` read at step 0 divides by zero (torch 2.11's Adam keeps
# the step on the parameters' device when the default device is CUDA).
_INPLACE_ARITHMETIC = {
    aten.add_.Tensor: operator.add, aten.add_.Scalar: operator.add,
    aten.sub_.Tensor: operator.sub, aten.sub_.Scalar: operator.sub,
    aten.mul_.Tensor: operator.mul, aten.mul_.Scalar: operator.mul,
    aten.div_.Tensor: operator.truediv, aten.div_.Scalar: operator.truediv,
}
_FOREACH_INPLACE_SCALAR = {
    aten._foreach_add_.Scalar: operator.add, aten._foreach_sub_.Scalar: operator.sub,
    aten._foreach_mul_.Scalar: operator.mul, aten._foreach_div_.Scalar: operator.truediv,
}

# Ops whose output holds exactly their first argument's values.
_SHADOW_PASSTHROUGH = {
    aten.clone.default, aten.detach.default, aten.alias.default, aten._to_copy.default,
    aten.view.default, aten.reshape.default, aten._unsafe_view.default, aten.lift_fresh.default,
}


# Indexing ops: the output's values are the same indexing of the input's shadow (a metadata
# buffer read element by element, as DeepSpeed's pipeline engine reads its shape messages).
_SHADOW_INDEXING = {aten.select.int, aten.slice.Tensor}


def _index_shadow(func: Any, args: tuple, out: Any) -> None:
    shadow = getattr(args[0], SHADOW_ATTR, None) if args else None
    if shadow is None or not isinstance(out, torch.Tensor):
        return
    with torch._subclasses.fake_tensor.unset_fake_temporarily():
        set_shadow(out, func(shadow, *args[1:]))


class DataReadError(RuntimeError):
    pass


def _value(x: Any) -> Any:
    return x if isinstance(x, (int, float, bool)) else getattr(x, HINT_ATTR, None)


def _update_in_place(t: Any, fn: Any, b: Any) -> None:
    """`t` was changed in place to `fn(t, b)` (`b` None: not known): keep its hint and copied
    values right, or drop what can no longer be known."""
    shadow = getattr(t, SHADOW_ATTR, None)
    if shadow is not None:  # copied values: follow a known scalar, else they are stale now
        with torch._subclasses.fake_tensor.unset_fake_temporarily():
            setattr(t, SHADOW_ATTR, None if b is None else fn(shadow, b).to(shadow.dtype))
    hint = getattr(t, HINT_ATTR, None)
    if hint is None:
        return
    try:
        hint = None if b is None else fn(hint, b)
    except ZeroDivisionError:
        hint = None
    setattr(t, HINT_ATTR, hint)


def _in_place_operand(fn: Any, other: Any, alpha: Any) -> Any:
    """What `fn` combines the tensor with (add_/sub_ scale it by alpha), if known."""
    b = _value(other)
    return b * alpha if b is not None and fn in (operator.add, operator.sub) else b


def propagate_hint(func: Any, args: tuple, out: Any, kwargs: dict | None = None) -> None:
    """Attach a value hint to `out` when `func` determines it; cheap no-op otherwise."""
    fn = _INPLACE_ARITHMETIC.get(func)
    if fn is not None:
        if len(args) >= 2 and isinstance(args[0], torch.Tensor):
            _update_in_place(args[0], fn, _in_place_operand(fn, args[1], (kwargs or {}).get("alpha", 1)))
        return
    fn = _FOREACH_INPLACE_SCALAR.get(func)
    if fn is not None:
        if len(args) >= 2:
            b = _in_place_operand(fn, args[1], 1)
            for t in args[0]:
                _update_in_place(t, fn, b)
        return
    if func in _SHADOW_INDEXING:
        _index_shadow(func, args, out)  # and the hint below (select passes it through)
    if func in _VALUE_SOURCES:
        hint = _VALUE_SOURCES[func](args)
    elif func in _HINT_PASSTHROUGH:
        src = args[0] if args else None
        hint = getattr(src, HINT_ATTR, None)
        if hint is None and func is aten._to_copy.default and _is_real_scalar(src):
            hint = src.item()  # a real one-element CPU tensor moved to the GPU: value known
    elif func in _ARITHMETIC:
        # Elementwise arithmetic on uniform tensors (or Python scalars) is uniform.
        a, b = (_value(x) for x in args[:2])
        if a is None or b is None:
            return
        try:
            hint = _ARITHMETIC[func](a, b)
        except ZeroDivisionError:
            return
    elif func is aten.sum.default:
        hint = getattr(args[0], HINT_ATTR, None)
        if hint is not None:
            hint = hint * args[0].numel()  # a uniform tensor's sum (a bool's: a count)
    elif func in _COMPARISONS:
        a, b = (_value(x) for x in args[:2])
        if a is None or b is None:
            return
        hint = _COMPARISONS[func](a, b)
    elif func is aten.logical_not.default or func is aten.bitwise_not.default:
        hint = getattr(args[0], HINT_ATTR, None)
        if hint is not None:
            hint = (not hint) if func is aten.logical_not.default or isinstance(hint, bool) else ~int(hint)
    elif func in _ANDS or func in _ORS:
        hint = _and_or(func in _ANDS, *(_value(x) for x in args[:2]))
        if hint is None:
            return
    elif func is aten._amp_foreach_non_finite_check_and_unscale_.default:
        # GradScaler's found_inf flag: a healthy step found no inf/nan.
        setattr(args[1], HINT_ATTR, 0.0)
        return
    else:
        return
    if hint is not None and isinstance(out, torch.Tensor):
        setattr(out, HINT_ATTR, hint)
    if func in _SHADOW_PASSTHROUGH and args and isinstance(out, torch.Tensor):
        set_shadow(out, getattr(args[0], SHADOW_ATTR, None))


def _and_or(is_and: bool, a: Any, b: Any) -> Any:
    """The value of `a and b` / `a or b` (bitwise on integers) where it is decided: both sides
    known, or one side the value that decides it (a False or 0 for an and, a True for an or)."""
    if a is not None and b is not None:
        return (a & b) if is_and else (a | b)
    known = a if b is None else b
    if known is None:
        return None
    if is_and and not known:
        return known
    if not is_and and known is True:
        return True
    return None


def set_shadow(t: torch.Tensor, values: torch.Tensor | None) -> None:
    """Give fake tensor `t` the real values `values` (CPU), if they fit its shape."""
    if values is None or values.numel() != t.numel():
        return
    index_like = not (t.dtype.is_floating_point or t.dtype.is_complex)
    if t.numel() > (SHADOW_MAX_NUMEL_INDEX if index_like else SHADOW_MAX_NUMEL):
        return
    with torch._subclasses.fake_tensor.unset_fake_temporarily():
        setattr(t, SHADOW_ATTR, values.detach().reshape(tuple(t.shape)).to(t.dtype).clone())


def shadow_of(t: torch.Tensor) -> torch.Tensor | None:
    return getattr(t, SHADOW_ATTR, None)


def _is_real_scalar(t: Any) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(t, torch.Tensor) and not isinstance(t, FakeTensor) \
        and t.device.type == "cpu" and t.numel() == 1


def placeholder_scalar(t: torch.Tensor) -> bool | int | float | complex:
    shadow = getattr(t, SHADOW_ATTR, None)
    if shadow is not None and shadow.numel() == 1:
        return shadow.item()
    hint = getattr(t, HINT_ATTR, None)
    if t.dtype == torch.bool:
        return bool(hint) if hint is not None else False
    if t.dtype.is_floating_point:
        return float(hint) if hint is not None else 0.0
    if t.dtype.is_complex:
        return complex(0.0)
    return int(hint) if hint is not None else 1


def placeholder_cpu_tensor(t: torch.Tensor, dtype: torch.dtype | None = None,
                           pinned: bool = False) -> torch.Tensor:
    """A real CPU tensor with t's shape (page-locked if `pinned`): its shadow values if it has
    them, else filled with the placeholder value."""
    shadow = getattr(t, SHADOW_ATTR, None)
    shape = tuple(shadow.shape) if shadow is not None else tuple(t.shape)
    out = torch.empty(shape, dtype=dtype or t.dtype, device="cpu", pin_memory=pinned)
    if shadow is not None:
        return out.copy_(shadow)
    return out.fill_(placeholder_scalar(t))


def user_frame_summary() -> str:
    """The innermost stack frame outside torch and phantom: where the user's code read."""
    frame = sys._getframe(1)
    while frame is not None:
        path = frame.f_code.co_filename
        if not ("/torch/" in path or "/phantom/" in path or path.startswith("<")):
            return f'File "{path}", line {frame.f_lineno}, in {frame.f_code.co_name}\n    {_statement(frame)}'
        frame = frame.f_back
    return "(no user frame found)"


def _statement(frame, max_lines: int = 4) -> str:
    """The source of the expression `frame` is executing (a call spread over several lines
    too: its instruction's positions), joined on one line."""
    first = last = frame.f_lineno
    try:
        start, end, _, _ = list(frame.f_code.co_positions())[frame.f_lasti // 2]
        if start is not None and end is not None and start <= first <= end:
            first, last = start, end
    except (AttributeError, IndexError, ValueError):
        pass  # Python before 3.11: the current line
    lines = [linecache.getline(frame.f_code.co_filename, n).strip()
             for n in range(first, min(last, first + max_lines - 1) + 1)]
    text = " ".join(line for line in lines if line)
    return text + (" ..." if last >= first + max_lines else "")


def raise_data_read(what: str) -> None:
    raise DataReadError(
        f"phantom: the script reads the value of a simulated CUDA tensor ({what}) at\n"
        f"  {user_frame_summary()}\n"
        "Simulated tensors have no values. Remove the read, or run without "
        "`--on-data-read error` to get a placeholder (see README, 'Data-dependent reads')."
    )
