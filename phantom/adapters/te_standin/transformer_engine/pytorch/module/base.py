"""transformer_engine/pytorch/module/base.py: what every TE module shares.

Parameters are made and initialised as TE makes them (`torch.empty` on the device, the init
method under the RNG tracker's fork), tagged with Megatron's tensor-parallel attributes, and
the tensor-parallel collectives of the linear layers are torch.distributed calls on the TP
group, so phantom's simulated NCCL prices them.
"""
from __future__ import annotations

import warnings
from typing import Any, Callable

import torch
import torch.distributed as dist

_cublas_workspace: torch.Tensor | None = None
_dummy_wgrads: dict[tuple, torch.Tensor] = {}
# TE's cuBLAS workspace on Hopper and later: 32 MiB (+256 B of scales), one per process.
_WORKSPACE_BYTES = 32 * 1024 * 1024 + 256


def get_workspace() -> torch.Tensor:
    """The one cuBLAS workspace TE's GEMMs share (allocated once, as TE does)."""
    global _cublas_workspace
    if _cublas_workspace is None:
        _cublas_workspace = torch.empty(_WORKSPACE_BYTES, dtype=torch.uint8, device="cuda")
    return _cublas_workspace


def get_dummy_wgrad(shape: list, dtype: torch.dtype, zero: bool = False) -> torch.Tensor:
    """The weight 'gradient' TE returns to autograd when the real one went into `main_grad`:
    one cached buffer per shape and dtype, detached, so autograd takes it without a copy and
    Megatron's DDP hook (which expects a `.grad`) skips its add (`grad_added_to_main_grad`)."""
    key = (*shape, dtype)
    if key not in _dummy_wgrads:
        _dummy_wgrads[key] = torch.empty(shape, dtype=dtype, device="cuda", requires_grad=False)
    if zero:
        _dummy_wgrads[key].fill_(0)
    return _dummy_wgrads[key].detach()


_WARNED: set[str] = set()


def warn_once(key: str, message: str) -> None:
    if key not in _WARNED:
        _WARNED.add(key)
        warnings.warn(f"phantom: {message}", stacklevel=3)


def refuse(message: str) -> None:
    from phantom.errors import SimulationError

    raise SimulationError(f"phantom: {message} (simulated Transformer Engine; "
                          "docs/frameworks.md, 'Megatron-Core').")


def set_tensor_model_parallel_attributes(tensor: torch.Tensor, is_parallel: bool, dim: int,
                                         stride: int) -> None:
    """The attributes Megatron reads to tell TP-sharded parameters from duplicated ones."""
    tensor.tensor_model_parallel = is_parallel
    tensor.partition_dim = dim
    tensor.partition_stride = stride


class TransformerEngineBaseModule(torch.nn.Module):
    """TE's module base: device, dtype, TP group and parameter initialisation."""

    def __init__(self, *, tp_group: Any = None, tp_size: int = 1, sequence_parallel: bool = False,
                 params_dtype: torch.dtype | None = None, device: Any = "cuda",
                 get_rng_state_tracker: Callable | None = None,
                 rng_tracker_name: str | None = None) -> None:
        super().__init__()
        self.params_dtype = params_dtype or torch.get_default_dtype()
        self.device = device if device is not None else "cuda"
        self.get_rng_state_tracker = get_rng_state_tracker
        self.rng_tracker_name = rng_tracker_name
        self.sequence_parallel = sequence_parallel
        self.set_tensor_parallel_group(tp_group)
        if tp_group is None:
            self.tp_size = tp_size
        self.fp8 = False
        self.fp8_calibration = False
        self.fp8_initialized = False
        self.primary_weights_in_fp8 = False
        self.fp8_meta: dict = {"recipe": None}
        self.activation_dtype: torch.dtype | None = None
        self.wgrad_store = None

    def set_tensor_parallel_group(self, tp_group: Any) -> None:
        self.tp_group = tp_group
        self.tp_group_initialized = True
        if tp_group is not None and dist.is_initialized():
            self.tp_size = dist.get_world_size(tp_group)
            self.tp_rank = dist.get_rank(tp_group)
        else:
            self.tp_rank = 0

    def new_parameter(self, name: str, shape: tuple[int, ...], init: Callable | None) -> torch.nn.Parameter:
        param = torch.nn.Parameter(torch.empty(shape, dtype=self.params_dtype, device=self.device))
        if init is not None and param.device.type != "meta":
            if self.get_rng_state_tracker is None:
                init(param)
            else:
                tracker = self.get_rng_state_tracker()
                fork = tracker.fork(self.rng_tracker_name) if self.rng_tracker_name else tracker.fork()
                with fork:
                    init(param)
        self.register_parameter(name, param)
        return param

    def reset_parameters(self, defer_init: bool = False) -> None:
        pass  # initialised when made (new_parameter)

    def backward_dw(self) -> None:
        pass  # delay_wgrad_compute is refused at construction

    def set_meta_tensor(self, fwd: bool, recipe: Any = None) -> None:
        pass

    @staticmethod
    def _check_common(delay_wgrad_compute: bool = False, symmetric_ar_type: Any = None,
                      *ub_flags: bool) -> None:
        if delay_wgrad_compute:
            refuse("delay_wgrad_compute (split weight-gradient GEMMs) is not simulated")
        if symmetric_ar_type:
            refuse("symmetric-memory all-reduce (symmetric_ar_type) is not simulated")
        if any(ub_flags):
            warn_once("ub", "Transformer Engine's userbuffers TP communication overlap "
                      "(tp_comm_overlap) is not simulated: its collectives run as plain NCCL "
                      "calls, not overlapped with the GEMMs")


# -- tensor-parallel collectives on dimension 0 (TE's distributed.py helpers) --------------------

# torch 2.13 renamed the tensor collectives (the old names warn); older torch has only those
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor

def gather_along_first_dim(inp: torch.Tensor, group: Any, async_op: bool = False):
    size = dist.get_world_size(group)
    out = torch.empty((inp.shape[0] * size, *inp.shape[1:]), dtype=inp.dtype, device=inp.device)
    work = _all_gather(out, inp.contiguous(), group=group, async_op=async_op)
    return out, work


def reduce_scatter_along_first_dim(inp: torch.Tensor, group: Any, async_op: bool = False):
    size = dist.get_world_size(group)
    out = torch.empty((inp.shape[0] // size, *inp.shape[1:]), dtype=inp.dtype, device=inp.device)
    work = _reduce_scatter(out, inp.contiguous(), group=group, async_op=async_op)
    return out, work


def allreduce(inp: torch.Tensor, group: Any, async_op: bool = False):
    work = dist.all_reduce(inp, group=group, async_op=async_op)
    return inp, work
