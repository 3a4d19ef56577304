"""Where the script's own Python ends and torch's work begins: a torch function mode.

Note [The torch-call boundary]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A real run's host time is the script's Python plus what torch does inside each call. Under
phantom the second part is different work (fake tensors, the Python dispatch, the cost model),
so it is never measured: the shipped table prices it (host.costs). The boundary between the
two is every outermost torch API call, and a `TorchFunctionMode` sees exactly those: torch
functions, Tensor methods and properties, torch.nn.functional, torch.ops. Inside a call the
mode is off (torch pops it while it handles the call), so nested calls are part of the outer
one, as they are in the table's measurement.

Two places run the script's Python from inside a torch call, and the mode is put back there:
* a backward pass: the engine calls hooks (FSDP's, ZeRO-3's, the script's) between the ops it
  runs; `_engine_run_backward` is wrapped so their torch calls are outermost again, on the
  engine's threads too (the mode stack travels with autograd's thread-local state);
* nothing else yet: a tensor subclass's `__torch_dispatch__` (DTensor's sharding propagation)
  runs inside the call it handles and is priced as part of it (docs/host-time.md).

A C-level profile hook would see every Python frame, but in CPython 3.11 setting one makes all
Python code run unspecialised and traced: a call-heavy loop ran 2.7x and a plain loop 1.5x
slower here, an error on exactly the time being measured. The mode costs the way into and out
of one Python call per torch call instead, phantom's time except for the part before the first
clock read and after the last, which `measure_boundary_ns` measures and the account takes off.
"""
from __future__ import annotations

import contextlib
import types
from typing import TYPE_CHECKING, Any, Callable

import torch
from torch.overrides import TorchFunctionMode

from phantom.host.account import HOST_CLOCK_NS, HostAccount
from phantom.host.machine import MachineSpeed, cpu_model, low_percentile, measure_probe, read_calibration

if TYPE_CHECKING:
    from phantom.sim import Simulation

_PYTHON_FUNCTION = types.FunctionType  # __torch_function__'s `types` argument shadows the module
_BUILTIN_METHOD_TYPES = (types.MethodDescriptorType, types.BuiltinMethodType, types.MethodWrapperType,
                         types.WrapperDescriptorType)


def call_kind(func: Any) -> str:
    """How the table prices the way into a torch call: "property", "method" or "function"."""
    name = getattr(func, "__name__", "")
    if name == "__get__" or isinstance(func, types.GetSetDescriptorType):
        return "property"
    if isinstance(func, _BUILTIN_METHOD_TYPES) and not isinstance(getattr(func, "__self__", None),
                                                                    types.ModuleType):
        return "method"
    return "function"


class TorchCallBoundary(TorchFunctionMode):
    """Tells the host account when each outermost torch call begins and ends."""

    def __init__(self, host: HostAccount) -> None:
        super().__init__()
        self.host = host

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: D105
        now = HOST_CLOCK_NS()
        kwargs = kwargs or {}
        host = self.host
        if host.inside_phantom():
            return func(*args, **kwargs)
        host.torch_call_enter(func, call_kind(func), now, isinstance(func, _PYTHON_FUNCTION))
        try:
            return func(*args, **kwargs)
        finally:
            host.torch_call_exit()


@contextlib.contextmanager
def suspended():
    """The boundary off the function-mode stack for a call Dynamo runs: Dynamo traces the modes
    on the stack into its graphs (their clock reads would break every graph). A compiled
    graph's host cost is the node's constant (interception.compiled), and Dynamo's guards and
    AOTAutograd's wrappers around it stay the script's measured Python."""
    stack = torch.overrides._get_current_function_mode_stack()
    if not any(isinstance(m, TorchCallBoundary) for m in stack):
        yield
        return
    _set_mode_stack([m for m in stack if not isinstance(m, TorchCallBoundary)])
    try:
        yield
    finally:
        _set_mode_stack(stack)


def _set_mode_stack(stack: list) -> None:
    while torch._C._len_torch_function_stack():
        torch._C._pop_torch_function_stack()
    for mode in stack:
        torch._C._push_on_torch_function_stack(mode)


def install(host: HostAccount) -> TorchCallBoundary:
    """Push the boundary for the rest of the process and wrap the autograd engine's entry."""
    boundary = TorchCallBoundary(host)
    _wrap_engine(boundary)
    boundary.__enter__()
    return boundary


def _wrap_engine(boundary: TorchCallBoundary) -> None:
    import torch.autograd
    import torch.autograd.graph as graph

    run_backward = graph._engine_run_backward
    if getattr(run_backward, "_phantom_boundary", False):
        return
    host = boundary.host

    def engine_run_backward(*args: Any, **kwargs: Any) -> Any:
        saved = host.backward_enter()
        try:
            with boundary:
                return run_backward(*args, **kwargs)
        finally:
            host.backward_exit(saved)

    engine_run_backward._phantom_boundary = True  # type: ignore[attr-defined]
    graph._engine_run_backward = engine_run_backward
    torch.autograd._engine_run_backward = engine_run_backward


def _boundary_cases(x: torch.Tensor, out: torch.Tensor, python: bool) -> list[Callable[[], Any]]:
    """Torch calls of the kinds scripts make most, none allocating a storage: a property, a
    method that dispatches nothing, views, in-place and out= ops; with `python`, torch
    functions written in Python."""
    import torch.nn.functional as F

    if python:
        return [lambda: F.relu(x, inplace=True), lambda: x.split(4),
                lambda: F.dropout(x, 0.5, training=False)]
    return [lambda: x.shape, lambda: x.dim(), lambda: x.view(-1), lambda: x.t(),
            lambda: x.add_(1.0), lambda: x.mul_(1.0), lambda: torch.add(x, 1.0, out=out)]


def _segment_ns(host: HostAccount, fn: Callable[[], Any], calls: int) -> float:
    """`fn` called `calls` times under the boundary on `host` (one that charges segments as
    measured, at 1:1): the script time it charged a segment."""
    with TorchCallBoundary(host):
        fn()
        host.reset_counts()
        for _ in range(calls):
            fn()
        host.torch_call_enter(None, "function", HOST_CLOCK_NS())  # closes the last segment
        host.torch_call_exit()
    return host.script_host_ns / host.segments


def measure_boundary_ns(host_factory: Callable[[], HostAccount], python: bool = False,
                        device: str = "cuda", calls: int = 1_000, rounds: int = 9) -> float:
    """What marking one torch call adds to the script's measured time on this machine: loops of
    torch calls (`_boundary_cases`) under the boundary, as the account measures their segments,
    against the same loop calling a C builtin, which is all the script's own time there is. The
    way into and out of the mode before and after its clock reads differs between calls
    (arguments to pack, a result to wrap and drop: 1.8-3.9 us here for the cases); the median
    of the cases is taken off every segment. Each case at the low percentile of `rounds`:
    stalls only add time."""
    x = torch.zeros(8, 8, device=device)
    out = torch.empty_like(x)
    cases = _boundary_cases(x, out, python)

    def plain() -> float:
        noop = lambda: id(x)  # noqa: E731 (the cases' own lambda call)
        t0 = HOST_CLOCK_NS()
        for _ in range(calls):
            noop()
        return (HOST_CLOCK_NS() - t0) / calls

    leaks = []
    for fn in cases:
        samples = [_segment_ns(host_factory(), fn, calls) for _ in range(rounds)]
        base = [plain() for _ in range(rounds)]
        leaks.append(low_percentile(samples, 0.3) - low_percentile(base, 0.3))
    leaks.sort()
    return max(0.0, leaks[len(leaks) // 2])


def measure_machine(sim: "Simulation", probes: int = 60, rounds: int = 9) -> MachineSpeed:
    """This machine's speed (host.machine.MachineSpeed), measured now under `sim`'s fake device:
    what `phantom calibrate` measures with more probes, pinned and on an idle machine."""
    import datetime
    import platform

    from phantom.engine import Timeline

    gpu = sim.gpu

    def bare_host() -> HostAccount:
        # converts at 1:1 and charges each segment as measured
        same = MachineSpeed(gpu.host_probe_ns * gpu.host_mean_slowdown, 0.0, 0.0, 0.0, "")
        host = HostAccount(gpu, Timeline(sm_count=gpu.sm_count), "measured", sim.host.costs, same,
                           None, False, 0.0, lambda: None)
        host.steady = None
        return host

    probe = measure_probe(probes)
    boundary_ns = measure_boundary_ns(bare_host, rounds=rounds)
    boundary_python_ns = measure_boundary_ns(bare_host, python=True, rounds=rounds)
    real_host = sim.host
    try:
        release_ns = _measure_release_ns(sim, bare_host, rounds)
    finally:
        sim.host = real_host
        sim.forget_work()
    return MachineSpeed(probe, boundary_ns, boundary_python_ns, release_ns, "measured at start", cpu_model(),
                        platform.python_version(),
                        datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))


def _measure_release_ns(sim: "Simulation", host_factory: Callable[[], HostAccount], rounds: int,
                        calls: int = 1_000) -> float:
    """What freeing one fake tensor adds to the script's measured time here beyond the part
    phantom's finalizer brackets (Storage._release): the way through the tensor's and its
    storage's Python deallocation. `y = x + 1` dropped at once, against `x.add_(1)`."""
    x = torch.zeros(64, device="cuda")

    def new_tensor() -> None:
        y = x + 1  # noqa: F841 (freed on return)

    def in_place() -> None:
        x.add_(1)

    def per_segment(fn: Callable[[], None]) -> float:
        host = sim.host = host_factory()  # the storages' finalizers report to sim.host
        return _segment_ns(host, fn, calls)

    samples = [per_segment(new_tensor) - per_segment(in_place) for _ in range(rounds)]
    return max(0.0, low_percentile(samples, 0.5))


def machine_speed(sim: "Simulation") -> MachineSpeed:
    """This machine's speed for a measured run: `phantom calibrate`'s file, else measured now
    (in a distributed run by one rank, for all: host.machine)."""
    from dataclasses import asdict

    speed = read_calibration()
    if speed is not None:
        return speed
    measure = lambda: asdict(measure_machine(sim))  # noqa: E731
    client = sim.comm.client if sim.comm is not None else None
    data = client.shared_calibration(measure) if client is not None else measure()
    return MachineSpeed(**data)
