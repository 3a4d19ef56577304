"""Collective ops that reach the dispatch mode: functional collectives and raw c10d ops.

Functional collectives (`torch.ops._c10d_functional.*`, used by DTensor, FSDP2's
`fully_shard` internals and torch.compile'd code) have fake implementations, so
FakeTensorMode would absorb them silently. `PhantomMode` hands them here instead: the
output comes from the fake implementation; the collective is issued on the group named by
the op, and `wait_tensor` on an output waits for it like ProcessGroupNCCL's work.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch.utils.weak import WeakIdKeyDictionary

from phantom.distributed.comm import Op
from phantom.distributed.process_group import PhantomProcessGroup, SimWork

fc = torch.ops._c10d_functional
_PENDING: WeakIdKeyDictionary = WeakIdKeyDictionary()  # output tensor -> SimWork
# Functional point-to-point ops (torch 2.12+; `fc.isend` raises AttributeError on 2.11).
_P2P_PACKETS = tuple(getattr(fc, name) for name in ("isend", "irecv", "batch_p2p_ops") if hasattr(fc, name))


def _group(name: Any) -> PhantomProcessGroup:
    pg = name if isinstance(name, dist.ProcessGroup) else dist.distributed_c10d._resolve_process_group(name)
    if not isinstance(pg, PhantomProcessGroup):
        from phantom.errors import SimulationError

        raise SimulationError(f"phantom: functional collective on group {name!r}, which is not "
                              "a simulated NCCL group (was it created with backend 'nccl'?)")
    return pg


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _sig(tensors, *extra) -> tuple:
    # element counts and dtypes, as process_group._sig (NCCL sees flat buffers)
    return (tuple((t.numel(), str(t.dtype)) for t in tensors), *extra)


def _as_list(x) -> list:
    return list(x) if isinstance(x, (list, tuple)) else [x]


def _op_for(func, args: tuple, out) -> tuple[Op, Any]:
    """(the collective, its group name) for a functional collective call."""
    packet = func._overloadpacket
    ins = _as_list(args[0])
    outs = _as_list(out)
    if packet in (fc.all_reduce, fc.all_reduce_, fc.all_reduce_coalesced, fc.all_reduce_coalesced_):
        return Op("all_reduce", sum(map(_nbytes, ins)), _sig(ins, args[1])), args[2]
    if packet in (fc.all_gather_into_tensor, fc.all_gather_into_tensor_coalesced):
        return Op("all_gather", sum(map(_nbytes, outs)), _sig(ins)), args[2]
    if packet is fc.all_gather_into_tensor_out:
        return Op("all_gather", _nbytes(args[0]) * args[1], _sig(ins)), args[2]
    if packet in (fc.reduce_scatter_tensor, fc.reduce_scatter_tensor_coalesced, fc.reduce_scatter_tensor_out):
        return Op("reduce_scatter", sum(map(_nbytes, ins)), _sig(ins, args[1])), args[3]
    if packet is fc.all_to_all_single:
        inp, _out_splits, in_splits, name = args[0], args[1], args[2], args[3]
        pg = _group(name)
        row = _nbytes(inp) // max(inp.shape[0], 1) if inp.dim() else _nbytes(inp)
        me = dist.get_rank()
        transfers = tuple((me, peer, int(s) * row) for peer, s in zip(pg.info.members, in_splits)
                          if peer != me)
        return Op("all_to_all", _nbytes(inp), _sig([], str(inp.dtype)), transfers=transfers), name
    if packet in (fc.broadcast, fc.broadcast_):
        pg = _group(args[2])
        return Op("broadcast", _nbytes(ins[0]), _sig(ins), root=pg.info.members[args[1]]), args[2]
    raise _unsupported(func)


def _unsupported(func):
    from phantom.errors import SimulationError

    return SimulationError(f"phantom: {func} is not simulated yet; please report it with the "
                           "script that calls it.")


def handle(mode, func, types, args: tuple, kwargs: dict):
    """Run a collective op under `mode` (a PhantomMode) and issue it on its group."""
    from phantom.distributed import process_group

    comm = process_group._COMM
    if comm is None:
        raise _unsupported(func)
    comm.enter()
    try:
        return _handle(mode, func, types, args, kwargs)
    finally:
        comm.leave()


def _handle(mode, func, types, args: tuple, kwargs: dict):
    packet = func._overloadpacket
    if func.namespace == "c10d":
        if packet is torch.ops.c10d.check_for_nan:
            return None  # TORCH_NCCL_NAN_CHECK: fake tensors hold no NaNs to find
        # Raw c10d ops come from a C++ ProcessGroup method phantom's group does not
        # override; every public torch.distributed call reaches the Python methods instead.
        raise _unsupported(func)
    if packet is fc.wait_tensor:
        work = _PENDING.pop(args[0], None)
        if work is not None:
            work.wait()
        return args[0]
    if packet in _P2P_PACKETS:
        raise _unsupported(func)
    with_depth = mode._depth
    mode._depth += 1
    try:
        out = mode.dispatch(func, types, args, kwargs)
    finally:
        mode._depth = with_depth
    op, group_name = _op_for(func, args, out)
    work: SimWork = _group(group_name)._issue(op, None, _as_list(out))
    for t in _as_list(out):
        _PENDING[t] = work
    return out
