"""The dispatch mode that makes CUDA tensors fake and reports every CUDA op to the simulation.

`PhantomMode` is a `FakeTensorMode` that decides, per aten op:
- real CPU work (only plain CPU or meta tensors, no CUDA device asked for) runs for real, so
  data loading and tokenisation behave as usual;
- everything that touches CUDA runs through FakeTensorMode (shapes, dtypes, strides, no
  memory) and is handed to the simulation, which charges its GPU time and memory;
- reads of CUDA values (`.item()`, `.cpu()`, D2H `copy_`) return placeholders after a
  simulated sync (see sim/values.py).
"""
from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import torch
from torch._C._dynamo.eval_frame import set_eval_frame as _set_eval_frame
from torch._subclasses.fake_tensor import (
    DynamicOutputShapeException,
    FakeTensor,
    FakeTensorMode,
    UnsupportedOperatorException,
)

from phantom.errors import SimulationError
from phantom.sim import values

if TYPE_CHECKING:
    from phantom.sim import Simulation

aten = torch.ops.aten
prim = torch.ops.prim

# Metadata queries FakeTensorMode answers directly; they never launch work, so they skip all
# bookkeeping. C++ reads of a fake tensor's device no longer come here where c10 has a
# fake-device slot (patches._patch_native_fake_device); without it they were ~75% of all
# dispatches.
_METADATA_OPS = frozenset({
    prim.device.default, aten.sym_size.int, aten.sym_stride.int, aten.sym_numel.default,
    aten.sym_storage_offset.default, aten.is_coalesced.default, aten.dense_dim.default,
    aten.sparse_dim.default,
})



# Dispatched here but not in a real eager run: autograd saving an output for backward under a
# Python dispatch mode detaches it (bench/host/host_cost_table.py saw the same under its logging
# mode, and the profiler did not on the node): not priced.
_UNPRICED_OPS = frozenset({aten.detach.default})


def _ops_of(namespace: str) -> frozenset:
    """Every overload of every op registered under `namespace`."""
    ns = getattr(torch.ops, namespace)
    found = []
    for name in torch._C._dispatch_get_all_op_names():
        if name.startswith(namespace + "::"):
            packet = getattr(ns, name.split("::", 1)[1])
            found += [getattr(packet, o) for o in packet.overloads()]
    return frozenset(found)


# Collectives are not shape computations: they go to phantom.distributed.ops.
_COLLECTIVE_OPS = _ops_of("_c10d_functional") | _ops_of("c10d")


_decomposes: dict[Any, bool] = {}  # op -> whether the dispatcher decomposes it (see below)


def _decomposed_by_autograd(func) -> bool:
    """Whether, with autograd on, the dispatcher would have run `func`'s
    CompositeImplicitAutograd kernel before this mode saw it: it has one and no CUDA kernel
    (on a CPU build, the CUDA kernels are phantom's placeholders for ops a CUDA build runs as
    one kernel, such as rms_norm). Higher-order ops (flex_attention, DTensor's RNG op) are
    not dispatcher ops."""
    known = _decomposes.get(func)
    if known is None:
        name = func.name() if isinstance(func, torch._ops.OpOverload) else None
        has = torch._C._dispatch_has_kernel_for_dispatch_key
        known = _decomposes[func] = bool(name) and has(name, "CompositeImplicitAutograd") \
            and not has(name, "CUDA")
    return known


class _ThreadState(threading.local):
    # FakeTensorMode.__enter__ sets torch's thread-local "lift only CPU tensors" flag
    # (torch._C._set_only_lift_cpu_tensors) on the thread that entered it. Autograd's device
    # thread runs the backward's ops and hooks under this mode but without the flag, and
    # there `torch.tensor(data, device="cuda")` (a DDP comm hook, a framework's gradient
    # hook) built a real CUDA tensor, which a CPU build cannot: set on each thread's first op.
    lifts_cpu_only = False


_thread = _ThreadState()


def _is_cuda_device(device: Any) -> bool:
    if device is None:
        return False
    if isinstance(device, torch.device):
        return device.type == "cuda"
    if isinstance(device, str):
        return device.startswith("cuda")
    return False  # an int device index means the current accelerator only in some APIs


def _touches_cuda(args: tuple, kwargs: dict) -> bool:
    """True if the op must be simulated: a fake tensor argument or a CUDA device asked for."""
    for a in args:
        if isinstance(a, FakeTensor):
            return True
        if isinstance(a, (list, tuple)) and a and isinstance(a[0], FakeTensor):
            return True
    if kwargs:
        if _is_cuda_device(kwargs.get("device")):
            return True
        for v in kwargs.values():
            if isinstance(v, FakeTensor):
                return True
    return False


def _records_grad(args: tuple) -> bool:
    """Whether autograd records a node for the op (the host-cost table's grad column)."""
    if not torch.is_grad_enabled():
        return False
    for a in args:
        if isinstance(a, torch.Tensor) and a.requires_grad:
            return True
        if type(a) is list and a and isinstance(a[0], torch.Tensor) and a[0].requires_grad:
            return True
    return False


def _list_tensors(args: tuple) -> int:
    """Tensors in the op's list arguments (foreach ops, fused optimizers, cat): the table prices
    list ops by their length (HostAccount.begin_op)."""
    n = 0
    for a in args:
        if type(a) is list and a and isinstance(a[0], torch.Tensor):
            n += len(a)
    return n


_PLAIN_TYPES = (torch.Tensor, torch.nn.Parameter, FakeTensor)


def _has_subclass_arg(types: Any) -> bool:
    """True if an argument is a tensor subclass other than FakeTensor (e.g. DTensor)."""
    return any(t not in _PLAIN_TYPES and not issubclass(t, FakeTensor) for t in types)


def _share_higher_order_op_rules(cls: type) -> None:
    """Higher-order ops register their fake rules on the exact FakeTensorMode class; a
    subclass would miss them (e.g. DTensor's run_dtensor_rng_op), so share the rules."""
    from torch._ops import _higher_order_ops

    for op in _higher_order_ops.values():
        table = getattr(op, "python_key_table", None)
        if table is not None and FakeTensorMode in table and cls not in table:
            table[cls] = table[FakeTensorMode]


class PhantomMode(FakeTensorMode):
    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # TorchDispatchMode.__init_subclass__ otherwise wraps __torch_dispatch__ in
        # torch._disable_dynamo (several µs per dispatch); __torch_dispatch__ below clears
        # Dynamo's frame hook itself, for ~0.1 µs.
        return False

    def __init__(self, sim: "Simulation") -> None:
        super().__init__(allow_non_fake_inputs=True)
        self.sim = sim
        self._depth = 0

    def __deepcopy__(self, memo: dict) -> "PhantomMode":
        # Tensor.__deepcopy__ deep-copies a FakeTensor's __dict__, which holds its fake_mode:
        # `copy.deepcopy(model)` (EMA weights, a reference model) copied this mode, and with it
        # the whole Simulation, and made its copies fake tensors of another mode. There is one
        # simulated device per process: the copies belong to this one.
        return self

    @property
    def avoid_device_init(self) -> bool:
        # The fake CUDA device has no memory: never constant-fold through a real CUDA copy.
        return True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: D105
        # A frame Dynamo gave up on (a graph break under torch.compile) runs eagerly with
        # Dynamo's frame hook still set: the simulation's own frames must not be offered to it
        # as user code to compile (interception/compiled.py).
        # The torch-call boundary's function mode is on inside a backward pass
        # (interception/boundary.py): phantom's own torch calls are not the script's.
        hook = _set_eval_frame(None)
        try:
            with torch._C.DisableTorchFunction():
                return self._dispatch_op(func, types, args, kwargs)
        finally:
            _set_eval_frame(hook)

    def _dispatch_op(self, func, types, args, kwargs):
        if not _thread.lifts_cpu_only:
            torch._C._set_only_lift_cpu_tensors(True)
            _thread.lifts_cpu_only = True
        kwargs = kwargs or {}
        sim = self.sim
        if self._depth:
            return self.dispatch(func, types, args, kwargs)
        first = args[0] if args else None
        if isinstance(first, FakeTensor) and first.fake_mode is not self:
            # A tracer's fake tensor (Dynamo's, AOTAutograd's) met outside its own mode: the
            # meta converter fakes up autograd history for a non-leaf input with an op run
            # under whatever mode is ambient, which is this one (torch.compile of a DDP
            # module feeds one compiled graph's output to the next frame). It belongs to its
            # tracer, not to the simulated device: this mode would adopt it as its own.
            with first.fake_mode:
                return func(*args, **kwargs)
        if func in _METADATA_OPS:
            # A real run answers these in C++ without dispatching: phantom's work, unpriced.
            sim.host.begin_op(func)
            try:
                return self.dispatch(func, types, args, kwargs)
            finally:
                sim.host.end_op()
        if func in _COLLECTIVE_OPS:  # after the metadata check: most dispatches are metadata
            from phantom.distributed import ops as collective_ops

            return collective_ops.handle(self, func, types, args, kwargs)
        if _has_subclass_arg(types):
            # A tensor subclass (DTensor) handles the op itself, with this mode still active:
            # its local ops come back here on fake tensors and are charged then, and whatever
            # it creates on the device (DTensor's RNG tracker copying the RNG state to CUDA)
            # is simulated too. Charging here as well would count the op twice, the second
            # time at the subclass's global shapes (fused AdamW under FSDP2, whose step
            # counters are plain tensors next to DTensor parameters).
            return NotImplemented
        if _decomposed_by_autograd(func):
            # With autograd's keys off (torch.inference_mode, an inference tensor) such an op
            # reaches the mode whole: `.to()` instead of `_to_copy`, `.item()` / `bool(t)` instead of
            # `_local_scalar_dense`: FakeTensorMode would run a CPU-to-device copy for real (a
            # CPU build cannot) and answer a read with a data-dependent error. Decomposed here,
            # as the dispatcher does with autograd on, the parts come back to this handler as
            # the copy and the read phantom handles, and are priced there (the mode is
            # re-entered: inside its handler it is off).
            with self:
                decomposed = func.decompose(*args, **kwargs)
            if decomposed is not NotImplemented:
                return decomposed
        if not _touches_cuda(args, kwargs):
            return func(*args, **kwargs)  # real CPU work, as on the node; this mode is unset here
        sim.host.begin_op(func, dispatched=func not in _UNPRICED_OPS, list_inputs=_list_tensors(args),
                          grad=_records_grad(args))
        self._depth += 1
        try:
            read = self._maybe_data_read(func, args, kwargs)
            if read is not _NOT_A_READ:
                return read
            out = self._fake_dispatch(func, types, args, kwargs)
            sim.on_op(func, args, kwargs, out)
            return out
        finally:
            self._depth -= 1
            sim.host.end_op()

    def _fake_dispatch(self, func, types, args, kwargs):
        try:
            return self.dispatch(func, types, args, kwargs)
        except UnsupportedOperatorException as e:
            raise SimulationError(
                f"phantom: {func} has no shape-only (fake) implementation, so it cannot be "
                f"simulated. Called from\n  {values.user_frame_summary()}\n"
                f"To continue, register one with torch.library.register_fake('{func.name()}') "
                "before the call, or avoid the op; please report it."
            ) from e
        except DynamicOutputShapeException as e:
            raise SimulationError(
                f"phantom: {func} has an output shape that depends on tensor values, which a "
                f"simulation does not have. Called from\n  {values.user_frame_summary()}\n"
                "See README, 'Data-dependent reads', for the supported patterns."
            ) from e

    # -- device-to-host reads -------------------------------------------------------------
    def _maybe_data_read(self, func, args, kwargs):
        if func is aten._local_scalar_dense.default:
            self.sim.transfers.device_to_host(args[0], blocking=True, what=".item()")
            return values.placeholder_scalar(args[0])
        if func is aten._to_copy.default and isinstance(args[0], FakeTensor) \
                and _wants_cpu(kwargs.get("device")) and args[0].device.type == "cuda":
            src = args[0]
            # torch pins the output of a non_blocking device-to-host _to_copy
            # (aten/src/ATen/native/TensorConversions.cpp, `pin_out`)
            non_blocking = bool(kwargs.get("non_blocking", False))
            self.sim.transfers.device_to_host(src, blocking=not non_blocking, pinned=non_blocking,
                                  what="a device-to-host copy (.cpu() / .to('cpu'))")
            return values.placeholder_cpu_tensor(src, kwargs.get("dtype"), pinned=non_blocking)
        if func is aten.copy_.default and not isinstance(args[0], FakeTensor) \
                and isinstance(args[1], FakeTensor) and args[1].device.type == "cuda":
            dst, src = args[0], args[1]
            pinned = dst.is_pinned()
            # into pageable memory CUDA copies synchronously, non_blocking or not
            self.sim.transfers.device_to_host(src, blocking=not (len(args) > 2 and args[2] and pinned),
                                  pinned=pinned, what="a device-to-host copy_()")
            with torch._subclasses.fake_tensor.unset_fake_temporarily():
                shadow = values.shadow_of(src)
                if shadow is not None and shadow.numel() == dst.numel():
                    dst.copy_(shadow.reshape(dst.shape))
                else:
                    dst.fill_(values.placeholder_scalar(src))
            return dst
        return _NOT_A_READ


def _wants_cpu(device: Any) -> bool:
    if device is None:
        return False
    return (device.type if isinstance(device, torch.device) else str(device)) == "cpu"


_NOT_A_READ = object()


_share_higher_order_op_rules(PhantomMode)


def disable_fake_tensor_torch_function() -> None:
    """FakeTensor inherits Tensor.__torch_function__, a Python-level hook that runs on every
    torch call with a fake argument only to re-wrap results that dispatch already returns as
    FakeTensors. Disabling it (as plain tensors have it) halves the host cost of a call."""
    FakeTensor.__torch_function__ = torch._C._disabled_torch_function_impl
