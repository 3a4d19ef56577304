"""Small patches to torch itself that simulation needs, each with the reason.

These are not framework adapters (those live in phantom/adapters, one module a framework):
they fix places where torch's own code assumes a real device.
"""
from __future__ import annotations

import functools
import warnings
import weakref
from typing import TYPE_CHECKING, Any

import torch
import torch.utils

from phantom.interception import compiled
from phantom.sim.values import HINT_ATTR

if TYPE_CHECKING:
    from phantom.sim import Simulation


class _WeakrefForSwap:
    """torch.utils.swap_tensors refuses tensors that have weakrefs. `Module._apply` (behind
    `.to(dtype)`, `.half()`, `.bfloat16()`, `.cuda()`) swaps FakeTensor parameters, and every
    fake tensor has weakrefs from FakeTensorMode's memo, which maps meta tensors that stay put,
    so a swap cannot corrupt it. (phantom's own memory tracking follows storages, which a
    swap leaves where they are.) The check is skipped for fake tensors only, and, for a real
    tensor, for the identity-keyed memos of fake-tensor conversion (`torch.utils.weak.WeakIdRef`:
    the simulation's mode converted it once to compute `.to("cuda")`); a swap keeps the
    object's identity, and nothing converts it from real again."""

    def __getattr__(self, name: str) -> Any:
        return getattr(weakref, name)

    @staticmethod
    def getweakrefs(obj: Any) -> list:
        from torch._subclasses.fake_tensor import FakeTensor
        from torch.utils.weak import WeakIdRef

        if isinstance(obj, FakeTensor):
            return []
        return [r for r in weakref.getweakrefs(obj) if not isinstance(r, WeakIdRef)]


def _patch_swap_tensors() -> None:
    torch.utils.weakref = _WeakrefForSwap()  # the name swap_tensors looks up at call time


def _patch_module_apply() -> None:
    """`Module._apply` (behind `.to()`, `.cuda()`, `.bfloat16()`, `.half()`, `.float()`)
    must leave a module's parameters the same Python objects, with their attributes, as it
    does on a GPU, where it assigns `param.data`.

    - A CPU parameter moved to the fake device: torch sees two tensor types that cannot share
      a `.data` (`_has_compatible_shallow_copy_type`) and puts a new Parameter in the module.
      An optimizer built before `model.cuda()` (accelerate's `prepare` order) then kept the
      old CPU parameters: it never stepped the model's, silently (no state, no kernels). And
      a weight two modules share (tied embeddings) became two. The old object takes the new
      one's contents instead (`torch.utils.swap_tensors`), and goes back into the module.
    - A fake parameter converted again is swapped with a new Parameter by torch's own branch
      for fake tensors, which swaps the Python attributes too. Megatron marks expert weights
      `allreduce=False` and sequence-parallel norm weights `sequence_parallel=True` before
      `Float16Module` converts the model; without them a Mixtral EP2 rank sharded its
      experts' optimizer state over the dense data-parallel group (20 GiB under the real
      peak). The attributes the parameter had and its replacement lacks are put back."""
    from torch._subclasses.fake_tensor import FakeTensor

    real_apply = torch.nn.Module._apply

    @functools.wraps(real_apply)
    def _apply(self, fn, *args, **kwargs):
        before = dict(self._parameters)
        kept = {key: p.__dict__.copy() for key, p in before.items() if p is not None and p.__dict__}
        out = real_apply(self, fn, *args, **kwargs)
        for key, old in before.items():
            new = self._parameters.get(key)
            if old is None or new is None or new is old:
                continue
            if isinstance(new, FakeTensor) and not isinstance(old, FakeTensor):
                _keep_identity(self, key, old, new)
        for key, attrs in kept.items():
            param = self._parameters.get(key)
            if param is not None:
                for name, value in attrs.items():
                    param.__dict__.setdefault(name, value)
        return out

    torch.nn.Module._apply = _apply


def _keep_identity(module: torch.nn.Module, key: str, old: torch.nn.Parameter,
                   new: torch.nn.Parameter) -> None:
    """Make `old` (a CPU parameter `Module._apply` replaced) hold `new`'s fake tensor and put
    it back in `module`, as a GPU keeps the object; if torch refuses the swap (other tensors
    hold the old one's implementation: views, autograd nodes), the module keeps `new`."""
    try:
        torch.utils.swap_tensors(old, new)
    except RuntimeError:
        return
    module._parameters[key] = old


def _patch_tensor_data_setter() -> None:
    """`tensor.data = other` where one of the two is a simulated CUDA tensor and the other a
    real CPU tensor. FSDP2's `fully_shard` on a model built on the CPU moves its states with
    `tensor.data = tensor.to(device)` (torch/distributed/fsdp/_fully_shard/_fsdp_init.py
    `_move_states_to_device`), as other frameworks move parameters. On a GPU the tensor keeps
    its Python identity and takes the new storage. Here the setter would give a real CPU
    Parameter a fake tensor's meta storage and CUDA device without making it a fake tensor:
    its next op reaches a CUDA kernel that a CPU build lacks (`Could not run 'aten::as_strided'
    with arguments from the 'CUDA' backend`). Swapping the two tensors instead
    (`torch.utils.swap_tensors`, what `Module._apply` does for fake parameters) keeps the
    object, its Python attributes and requires_grad, and makes it the other kind."""
    from torch._subclasses.fake_tensor import FakeTensor

    descriptor = torch._C.TensorBase.data
    real_set = descriptor.__set__

    def set_data(self: torch.Tensor, value: torch.Tensor) -> None:
        if isinstance(value, torch.Tensor) and isinstance(value, FakeTensor) != isinstance(self, FakeTensor):
            attrs = self.__dict__.copy()
            if isinstance(self, torch.nn.Parameter):
                new = torch.nn.Parameter(value, requires_grad=self.requires_grad)
            else:
                new = value.detach().requires_grad_(self.requires_grad)
            try:
                torch.utils.swap_tensors(self, new)
            except RuntimeError:
                swapped = False
            else:
                swapped = True
            if not swapped:
                _data_across_viewed_tensor(self)  # raises (outside the except: one traceback)
            for name, attr in attrs.items():
                self.__dict__.setdefault(name, attr)
            return
        real_set(self, value)

    torch.Tensor.data = property(descriptor.__get__, set_data, doc=descriptor.__doc__)


def _patch_profiler_cuda_activity() -> None:
    """torch.profiler with ProfilerActivity.CUDA (or the legacy `use_cuda=True`) records CUDA
    events around every op through the profiler's CUDA stubs, which a CPU-only build lacks:
    each op then printed "Failed to record CUDA event" with a C++ stack. The profiler keeps
    its CPU activity (real time on this machine, not simulated time); the simulated GPU
    timeline is `phantom run --trace`'s, which says so once."""
    from torch.autograd import profiler

    original = profiler.profile.__init__
    warned = []

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if kwargs.get("use_cuda") or kwargs.get("use_device") == "cuda":
            # a CUDA-only profile keeps the CPU side, or it would profile nothing
            kwargs["use_cuda"], kwargs["use_device"], kwargs["use_cpu"] = False, None, True
            if not warned:
                warned.append(True)
                warnings.warn("phantom: the profiler's CUDA activity is not simulated; it records "
                              "the CPU side only (in this machine's time). `phantom run --trace "
                              "FILE` writes the simulated GPU timeline.", stacklevel=2)
        original(self, *args, **kwargs)

    profiler.profile.__init__ = __init__


def _patch_optimizer_steps(sim: "Simulation") -> None:
    """Optimizer steps mark iterations: every training loop calls one per iteration. An
    optimizer that steps others inside its own step (an Optimizer subclass holding one
    optimizer per model part, as torchtitan's OptimizersContainer) marks one iteration.
    (The optimizers go along: a run that records tags their parameters, gradients and
    state; the inner ones hold the state.)"""
    from torch.optim.optimizer import (
        register_optimizer_step_post_hook,
        register_optimizer_step_pre_hook,
    )

    depth = [0]

    def pre(optimizer, args, kwargs) -> None:
        depth[0] += 1

    def post(optimizer, args, kwargs) -> None:
        depth[0] = max(0, depth[0] - 1)
        if depth[0] == 0:
            sim.mark_iteration(optimizer)
        elif sim.recorder is not None:
            sim.recorder.tag_optimizer(optimizer)

    # Tagged, so an adapter that brackets a framework's own optimizer step (DeepSpeed's
    # engine: adapters/deepspeed.py) runs these two and not the script's global hooks.
    pre.phantom_iteration_hook = post.phantom_iteration_hook = True
    register_optimizer_step_pre_hook(pre)
    register_optimizer_step_post_hook(post)


def _patch_storage_resize(sim: "Simulation") -> None:
    """Storage resizes change device memory without creating tensors, so the dispatch mode
    never sees them; the allocator model must."""
    real_resize = torch.UntypedStorage.resize_

    def resize_(self, size):
        result = real_resize(self, size)
        sim.storage.resize(self, int(size))
        return result

    torch.UntypedStorage.resize_ = resize_


def _patch_record_stream(sim: "Simulation") -> None:
    """`Tensor.record_stream(stream)` is a C++ binding that only accepts a C++ torch.Stream,
    so a simulated torch.cuda.Stream fails with "unknown parameter type" (Megatron's MoE
    dispatcher records its device-to-host copies on a side stream; DeepSpeed's ZeRO 1/2
    records every reduced bucket on its reduction stream). For a simulated stream the
    tensor's block is marked used on that stream in the allocator model (the C++
    allocator's rule: not reusable until that stream's work is done)."""
    from phantom.interception.cuda_api import NODE_HOST_NS, Stream, node_call

    real_record_stream = torch.Tensor.record_stream

    @node_call("Tensor.record_stream", NODE_HOST_NS["record_stream"])
    def record_stream(self, stream):
        if isinstance(stream, Stream):
            sim.storage.record_stream(self, stream.stream_id)
            return None
        return real_record_stream(self, stream)

    torch.Tensor.record_stream = record_stream


@functools.cache
def _takes_storage(func: Any) -> bool:
    schema = getattr(func, "_schema", None)  # higher-order ops have none
    return schema is not None and any(str(a.type) == "Storage" for a in schema.arguments)


def _patch_fake_cache_storage_args() -> None:
    """FakeTensorMode's dispatch cache (torch/_subclasses/fake_tensor.py, `_cache_key`) puts
    non-tensor arguments into its keys as they are, so `t.set_(storage, ...)` stores the
    storage object in a key the cache keeps for the whole run (as an entry, or as a
    "bypass" entry): that storage is never freed and its device memory stays counted. Ops
    whose schema takes a storage get no key, so they are dispatched uncached and leave
    nothing (decided once per op: this runs on every cached dispatch)."""
    from torch._subclasses.fake_tensor import FakeTensorMode, _BypassDispatchCache

    original = FakeTensorMode._cache_key

    @functools.wraps(original)
    def cache_key(self, state, func, args, kwargs):
        if _takes_storage(func):
            raise _BypassDispatchCache("storage argument")
        return original(self, state, func, args, kwargs)

    FakeTensorMode._cache_key = cache_key


def _patch_fake_gpu_context() -> None:
    """FakeTensor's constructor (torch/_subclasses/fake_tensor.py, `init_gpu_context`) runs one
    real `torch.empty(1, device="cuda")` the first time it sees a CUDA device, to create the
    real CUDA context that autograd on real tensors would need. phantom's device has no
    context, and on a CUDA build of torch on a machine with a GPU that allocation reaches the
    real caching allocator, which phantom's hooks never initialised (an internal assert).
    Nothing real runs on the device, so there is nothing to initialise."""
    from torch._subclasses import fake_tensor

    fake_tensor.init_gpu_context = lambda device: None


def _patch_native_fake_device() -> None:
    """A FakeTensor's device lives in c10's C++ fake-device slot, set whenever FakeTensor's
    `fake_device` is (phantom_set_fake_device), so C++ reads it like a real tensor's instead of
    dispatching prim.device into Python (see Note [Fake device slot] in
    phantom/native/fake_cuda.cpp).

    A meta kernel must see the fake tensors on the meta device. Every span that runs one
    (`in_kernel_invocation_manager`, wherever it is imported) turns the meta dispatch key on in
    the thread's local key set inside a guard that restores the set; excluding the Fake key at
    the same point makes the slot answer meta there and only there. Python's `tensor.device` is
    FakeTensor's own property, unchanged."""
    from phantom.native.build import fake_device_functions
    from torch._subclasses.fake_tensor import FakeTensor

    functions = fake_device_functions()
    if functions is None:
        return  # no native library in this process (unit tests): Python answers
    set_fake_device, exclude_fake_key = functions
    fake_device = FakeTensor.fake_device
    device_types = {"cpu": 0, "cuda": 1}

    def set_device(self, device) -> None:
        fake_device.fset(self, device)
        normalized = self._fake_device
        kind = device_types.get(normalized.type)
        if kind is not None:  # meta (allowed in some tracers) and others keep Python's answer
            set_fake_device(self._cdata, kind, -1 if normalized.index is None else normalized.index)

    FakeTensor.fake_device = property(fake_device.fget, set_device, doc=fake_device.__doc__)
    set_meta_included = torch._C._set_meta_in_tls_dispatch_include

    def set_meta_in_tls_dispatch_include(included: bool) -> None:
        set_meta_included(included)
        exclude_fake_key(included)

    torch._C._set_meta_in_tls_dispatch_include = set_meta_in_tls_dispatch_include


def _patch_tolist() -> None:
    """FakeTensor.tolist (torch/_subclasses/fake_tensor.py) reads a tensor element by element
    with `.item()`: one simulated device-to-host sync per element where a real CUDA tensor's
    `tolist()` makes one copy, and element reads lose the values phantom knows for a small
    tensor (its "shadow", e.g. a shape message received from another rank, DeepSpeed's
    pipeline engine). A simulated CUDA tensor reads through `.cpu()` instead: one copy, the
    device-to-host read phantom answers, with the shadow's values when there is one."""
    from torch._subclasses.fake_tensor import FakeTensor

    fake_tolist = FakeTensor.tolist

    def tolist(self):
        if self.device.type == "cuda":
            return self.cpu().tolist()
        return fake_tolist(self)

    FakeTensor.tolist = tolist


def _patch_dtensor_shape_propagation() -> None:
    """DTensor computes an op's global output shape by running the op on global-shape fake
    tensors under `detect_fake_mode() or FakeTensorMode()` (torch/distributed/tensor/
    _sharding_prop.py `_propagate_tensor_meta_non_cached`). DTensor dispatch runs with
    phantom's mode active (mode.py: subclass arguments), so detect_fake_mode would find
    phantom's mode and that metadata computation would be simulated as device work: global-
    size allocations (all of a model's optimizer states at the first fused AdamW step) and
    kernel time a real run never spends. It runs under a plain FakeTensorMode instead, as
    it does outside simulation."""
    try:
        from torch.distributed.tensor._sharding_prop import ShardingPropagator
    except ImportError:  # torch built without distributed
        return
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    original = ShardingPropagator._propagate_tensor_meta_non_cached

    @functools.wraps(original)
    def propagate(self, op_schema):
        with unset_fake_temporarily():
            return original(self, op_schema)

    ShardingPropagator._propagate_tensor_meta_non_cached = propagate


# Ops that a CUDA build runs as one fused kernel, but whose CUDA kernel a CPU-only build lacks
# while it has a CompositeImplicitAutograd decomposition of the same overload: on fake CUDA
# tensors the dispatcher then decomposes them into 5-15 elementwise and reduction kernels
# (F.rms_norm: pow, mean, add, rsqrt, mul, fp32 casts, and more in backward). Measured on H200
# with torch 2.11 (bench/kernels/results/rms_norm_check_H200.json): rms_norm forward + backward
# at 8192 x 4096 bf16 runs as `_fused_rms_norm` / `_fused_rms_norm_backward` in 295 us; the
# decomposition takes 1512 us. silu_backward and mish_backward are the other overloads with a
# CPU kernel and a composite one (the CUDA build registers CPU and CUDA kernels for them).
FUSED_ON_CUDA_BUILDS = ("_fused_rms_norm", "silu_backward", "mish_backward")
_FUSED_KERNELS: list = []  # the torch.library handle: registrations last while it lives


def _register_fused_cuda_kernels() -> None:
    """A CUDA kernel for each op above makes the dispatcher take the CUDA build's path: the
    op's own autograd formula, and one op that reaches the fake mode (and the cost model) at
    the Python key. The kernel itself never runs: fake tensors are answered before the CUDA
    key. A build that has the real CUDA kernels keeps them."""
    if _FUSED_KERNELS:
        return
    lib = torch.library.Library("aten", "IMPL")
    for name in FUSED_ON_CUDA_BUILDS:
        if torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{name}", "CUDA"):
            continue

        def unreachable(*args: Any, _name: str = name, **kwargs: Any) -> Any:
            raise RuntimeError(f"phantom: aten::{_name} reached its placeholder CUDA kernel with a "
                               "real tensor; only simulated (fake) CUDA tensors are supported")

        lib.impl(name, unreachable, "CUDA")
    _FUSED_KERNELS.append(lib)
def _data_across_viewed_tensor(tensor: torch.Tensor) -> None:
    """`tensor.data = x` across the simulated device, where other tensors hold `tensor`
    (views of it, autograd nodes), so it cannot be swapped and a real CPU tensor and a
    simulated one cannot trade places. FSDP1 moves its flat parameter, which the module's
    parameters view, this way (torch/distributed/fsdp/_flat_param.py: `FlatParamHandle.to_cpu`
    for a state dict with `offload_to_cpu=True`, the flat parameter's moves for
    `CPUOffload(offload_params=True)`, and a CPU model wrapped without `device_id`). Keeping
    the tensor where it was breaks FSDP's own checks of where its storage is (tried), so the
    run stops with what to change."""
    from phantom.errors import SimulationError

    where = "the simulated GPU to the CPU" if tensor.is_cuda else "the CPU to the simulated GPU"
    raise SimulationError(
        f"phantom: `tensor.data = ...` moving a tensor that other tensors view from {where} "
        "cannot be simulated. FSDP1 does this for a FULL_STATE_DICT with "
        "FullStateDictConfig(offload_to_cpu=True) (use offload_to_cpu=False, or FSDP2 with "
        "torch.distributed.checkpoint), for CPUOffload(offload_params=True) (parameter "
        "offloading is not simulated), and for a CPU model wrapped without device_id (pass "
        "device_id=torch.cuda.current_device()).")


def _patch_optimizer_defaults() -> None:
    """torch.optim picks its default implementation (foreach on CUDA, else the for-loop) in
    `_default_to_fused_or_foreach`, which requires `type(p)` to be exactly Tensor or
    Parameter. Simulated parameters are FakeTensors, so every optimizer built without an
    explicit `foreach=`/`fused=` fell back to the for-loop kernels (one launch per tensor and
    no foreach temporaries) where a GPU runs foreach. FakeTensor counts as a plain tensor; the
    function's device check still applies (fake CUDA only).

    `torch.nn.utils.clip_grad_norm_` (and `get_total_norm`, `clip_grads_with_norm_`,
    `clip_grad_value_`) make the same choice through `torch.utils._foreach_utils.
    _has_foreach_support`, whose list holds only Tensor: a simulated script that clips ran one
    norm and one `mul_` kernel per gradient (1,372 launches for the SD UNet's 686) where a GPU
    runs a few foreach kernels. DTensor appends itself to both lists for the same reason
    (torch/distributed/tensor/__init__.py)."""
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.optim import optimizer
    from torch.utils import _foreach_utils

    for supported in (optimizer._foreach_supported_types, _foreach_utils._foreach_supported_types):
        if FakeTensor not in supported:
            supported.append(FakeTensor)


def _quiet_fake_data_ptr_warning() -> None:
    """FakeTensor marks each storage to warn on data_ptr() ("almost definitely a bug in your
    code", fake_tensor.py's FakeTensor.__new__, the one caller of this torch._C function):
    for a program traced by torch.compile that is true, for a script under phantom it is not.
    Its data pointers are the simulated addresses of the allocator model
    (sim.storage.Storage._place), and the frameworks that read them (FSDP, accelerate, DeepSpeed)
    print nothing of the sort on a GPU. Not marking the storage, rather than filtering the
    warning, keeps a script's own `warnings.simplefilter("error")` from turning it into an
    exception."""
    torch._C._set_warn_deprecated_on_mutable_data_ptr = lambda tensor: None



# Finiteness checks and their healthy answers. Several of them decompose into generic
# comparisons before reaching the dispatcher (isnan is `x != x`), so they are wrapped at
# the torch-function level by `install_hint_sources`.
_HEALTHY_CHECKS = {"isfinite": True, "isnan": False, "isinf": False, "isposinf": False,
                   "isneginf": False}


def _with_healthy_hint(fn: Any, healthy: bool) -> Any:
    def check(*args: Any, **kwargs: Any) -> Any:
        out = fn(*args, **kwargs)
        if isinstance(out, torch.Tensor) and out.device.type == "cuda":
            setattr(out, HINT_ATTR, healthy)
        return out

    check.__name__ = getattr(fn, "__name__", "check")
    check.__doc__ = getattr(fn, "__doc__", None)
    return check


def install_hint_sources() -> None:
    """torch's finiteness checks mark their outputs with the healthy answer (sim.values)."""
    for name, healthy in _HEALTHY_CHECKS.items():
        setattr(torch, name, _with_healthy_hint(getattr(torch, name), healthy))
        setattr(torch.Tensor, name, _with_healthy_hint(getattr(torch.Tensor, name), healthy))


def install(sim: "Simulation") -> None:
    _register_fused_cuda_kernels()
    _patch_swap_tensors()
    _patch_module_apply()
    _patch_tensor_data_setter()
    _patch_optimizer_defaults()
    _patch_dtensor_shape_propagation()
    _patch_storage_resize(sim)
    _patch_record_stream(sim)
    _patch_tolist()
    _patch_fake_gpu_context()
    _patch_native_fake_device()
    _patch_fake_cache_storage_args()
    compiled.install(sim)  # torch.compile (interception/compiled.py)
    _patch_optimizer_steps(sim)
    _quiet_fake_data_ptr_warning()
    _patch_profiler_cuda_activity()
