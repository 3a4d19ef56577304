"""The `torch.cuda` API, answered by the simulation.

A CPU-only torch build has no CUDA bindings in `torch._C`; the Python wrappers in
`torch.cuda` call them. We answer at both layers: the `torch._C._cuda_*` bindings the
wrappers use (sturdier than patching each wrapper, since frameworks reach for either), and
the module-level functions whose CPU-build versions raise before reaching a binding.
Streams and events are simulated objects whose ordering semantics live in the engine.
"""
from __future__ import annotations

import contextlib
import functools
import itertools
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import torch

from phantom.host.account import HOST_CLOCK_NS
from phantom.interception.clock import simulated_thread

if TYPE_CHECKING:
    from phantom.sim import Simulation

# CUDA and NCCL versions the simulated software stack reports: what torch 2.11's CUDA 13
# wheel runs on the GPU hosts phantom's measurements come from.
SIMULATED_CUDA_VERSION = "13.0"
SIMULATED_NCCL_VERSION = (2, 28, 9)  # what torch 2.11 (CUDA 13) loads on the measured GPU hosts


# What each call costs the node's host, in ns: torch.cuda's Python wrapper and the CUDA runtime
# call under it (a current-stream query builds a Python Stream object; a stream context queries
# and sets the current stream twice; `wait_stream` records an event and waits on it). Medians
# of bench/probes/host_cuda_api.py on two H200 hosts, two rounds each (torch 2.11, Intel Xeon
# hosts; bench/host/data/cuda_api_h200_*.json; the last six on the second host only). Its `stream_wait_stream` case also queries the current stream, and its `set_stream`
# case the default stream: those are taken off here. Under phantom each call is a Python
# function of the simulation whose own time is phantom's, not the script's: it is left out
# (HostAccount.api_enter) and these are charged instead, as the node's launch cost is for a
# kernel. The waits of the syncs come from the simulated GPU on top.
NODE_HOST_NS = {
    "current_stream": 4_280.0,
    "stream_context": 10_500.0,  # torch.cuda.stream(s): creation, enter and exit together
    "event_new": 1_880.0,  # an event created and recorded (7.65 us) less a record (5.77)
    "event_record": 5_770.0,
    "event_query": 420.0,
    "stream_wait_event": 810.0,
    "stream_wait_stream": 3_950.0,  # 8.23 us with a current_stream() (4.28)
    "synchronize": 5_770.0,  # torch.cuda.synchronize() with the GPU idle
    "stream_synchronize": 1_150.0,
    "event_synchronize": 760.0,
    "stream_query": 810.0,
    "default_stream": 6_530.0,
    "set_stream": 910.0,  # 7.44 us with a default_stream() (6.53)
    "event_wait": 1_210.0,
    "stream_new": 1_200.0,
    "record_stream": 470.0,  # Tensor.record_stream(s) (patches._patch_record_stream)
    # A torch.compile'd function called with its graph cached (interception/compiled.py `install`): Dynamo's
    # guards and Inductor's wrapper, 24-26 us a call with one kernel on an H200 host
    # (bench/probes/host_compiled_call.py, bench/host/data/compiled_call_h200_*.json), less that kernel's
    # launch, which is charged with it (HOST_KERNEL_LAUNCH_NS).
    "compiled_call": 21_000.0,
    # One graph of a torch.compile'd program run by Inductor's generated wrapper
    # (interception/compiled.py), less its kernels' launches; Dynamo's guards and AOTAutograd's
    # wrappers around it run as the script's Python. PROVISIONAL, to be measured.
    "compiled_graph": 5_000.0,
    # One graph of a torch.compile(mode="reduce-overhead") program replayed by Inductor's CUDA
    # graph trees (interception/compiled.py CudaGraphTree): the trees' checks and bookkeeping
    # around the replay, whose launch is charged by its size (engine/graphs.py). On an H200
    # host a compiled 5-kernel MLP call cost 32-38 us less in reduce-overhead than in default
    # mode (bench/suites/cuda_graphs.py `call` rows, bench/host/data/cuda_graphs_calls_h200.jsonl): default pays
    # the generated wrapper (5 us) and five launches (~9 us each), reduce-overhead this and a
    # ~6 us replay, which leaves ~10 us.
    "cudagraph_tree_call": 10_000.0,
}


def node_call(site: str, node_ns: float | Callable[..., float]) -> Callable[[Callable], Callable]:
    """Time a simulated CUDA runtime call as the node's `node_ns`, not as what the simulation
    spends answering it; `node_ns` may be a function of the call's arguments (an extension
    whose cost grows with its tensor lists). Kernels the call launches add their launch cost.
    Threads off the simulated host (data loaders) call straight through."""
    def wrap(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            now = HOST_CLOCK_NS()  # first: from here on the time is phantom's
            # no simulation: a simulated module run for real on a GPU (bench/device), as is
            if _SIM is None or not simulated_thread():
                return fn(*args, **kwargs)
            sim = _sim()
            sim.host.api_enter(site, now)
            cost = 0.0
            try:
                cost = node_ns(*args, **kwargs) if callable(node_ns) else node_ns
                return fn(*args, **kwargs)
            finally:
                sim.host.api_exit(cost)
        return call
    return wrap


def extension_kernel(name: str, nbytes: float, flops: float = 0.0, blocks: int | None = None) -> None:
    """Launch one kernel of a hand-written CUDA extension (DeepSpeed's fused optimizers) on the
    current stream: it streams `nbytes` through HBM, priced on the memory curve of fused
    elementwise kernels; `blocks`, its grid, where it may leave SMs idle. The extension's own
    Python stand-in says what it reads and writes."""
    if _SIM is None or not simulated_thread():
        from phantom.errors import SimulationError
        raise SimulationError(f"phantom: the simulated CUDA extension kernel {name} was called outside "
                              "the simulation's host thread; it has no real kernel to run")
    _SIM.launch_extension_kernel(name, nbytes, flops, blocks)


def _device_index(device: Any = None) -> int:
    if device is None:
        return torch.accelerator.current_device_index()
    if isinstance(device, int):
        return device if device >= 0 else torch.accelerator.current_device_index()
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        return device.index if device.index is not None else torch.accelerator.current_device_index()
    index = getattr(device, "device_index", None) or getattr(device, "index", None)
    return int(index or 0)


class Stream:
    """A simulated CUDA stream (stands in for torch.cuda.Stream)."""

    @node_call("cuda.Stream", NODE_HOST_NS["stream_new"])
    def __new__(cls, device: Any = None, priority: int = 0, stream_id: int | None = None,
                device_index: int | None = None, device_type: int | None = None, **_: Any):
        self = object.__new__(cls)
        sim = _sim()
        self.device_index = device_index if device_index is not None else _device_index(device)
        self.priority = priority
        self.stream_id = stream_id if stream_id is not None else sim.streams.new_id()
        sim.timeline.stream(self.stream_id).priority = priority
        return self

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    @property
    def device(self) -> torch.device:
        return torch.device("cuda", self.device_index)

    @property
    def device_type(self) -> int:
        return 1  # DeviceType::CUDA

    @property
    def cuda_stream(self) -> int:
        return 0x7F0000 + self.stream_id  # a stable fake cudaStream_t

    @node_call("cuda.Stream.wait_event", NODE_HOST_NS["stream_wait_event"])
    def wait_event(self, event: "Event") -> None:
        _sim().streams.wait_event(self.stream_id, event._event)

    @node_call("cuda.Stream.wait_stream", NODE_HOST_NS["stream_wait_stream"])
    def wait_stream(self, stream: "Stream") -> None:
        _sim().streams.wait_stream(self.stream_id, stream.stream_id)

    def record_event(self, event: "Event | None" = None) -> "Event":
        event = event if event is not None else Event()
        event.record(self)
        return event

    @node_call("cuda.Stream.query", NODE_HOST_NS["stream_query"])
    def query(self) -> bool:
        return _sim().streams.query_stream(self.stream_id)

    @node_call("cuda.Stream.synchronize", NODE_HOST_NS["stream_synchronize"])
    def synchronize(self) -> None:
        _sim().streams.synchronize_stream(self.stream_id)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stream) and other.stream_id == self.stream_id \
            and other.device_index == self.device_index

    def __hash__(self) -> int:
        return hash((self.stream_id, self.device_index))

    def __enter__(self) -> "Stream":
        self._ctx = stream(self)
        self._ctx.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._ctx.__exit__(*exc)

    def __repr__(self) -> str:
        return f"<torch.cuda.Stream device=cuda:{self.device_index} cuda_stream={self.cuda_stream:#x}>"


class ExternalStream(Stream):
    pass


class Event:
    """A simulated CUDA event (stands in for torch.cuda.Event)."""

    @node_call("cuda.Event", NODE_HOST_NS["event_new"])
    def __init__(self, enable_timing: bool = False, blocking: bool = False,
                 interprocess: bool = False, external: bool = False) -> None:
        from phantom.engine import Event as EngineEvent
        self._event = EngineEvent(enable_timing=enable_timing)
        self.enable_timing = enable_timing

    @node_call("cuda.Event.record", NODE_HOST_NS["event_record"])
    def record(self, stream: Stream | None = None) -> None:
        stream = stream if stream is not None else current_stream()
        _sim().streams.record_event(self._event, stream.stream_id)

    @node_call("cuda.Event.wait", NODE_HOST_NS["event_wait"])
    def wait(self, stream: Stream | None = None) -> None:
        stream = stream if stream is not None else current_stream()
        stream.wait_event(self)

    @node_call("cuda.Event.query", NODE_HOST_NS["event_query"])
    def query(self) -> bool:
        return _sim().streams.query_event(self._event)

    @node_call("cuda.Event.synchronize", NODE_HOST_NS["event_synchronize"])
    def synchronize(self) -> None:
        _sim().streams.synchronize_event(self._event)

    def elapsed_time(self, end_event: "Event") -> float:
        """Milliseconds between two recorded events, on the simulated GPU clock."""
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if self._event.time_ns is None or end_event._event.time_ns is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        _sim().streams.synchronize_event(end_event._event)  # CUDA requires the end event completed
        return (end_event._event.time_ns - self._event.time_ns) / 1e6

    @property
    def cuda_event(self) -> int:
        return id(self._event)

    def ipc_handle(self) -> bytes:
        raise RuntimeError("phantom: CUDA IPC event handles are not simulated")

    def __repr__(self) -> str:
        return f"<torch.cuda.Event {self.cuda_event:#x}>"


class StreamContext:
    """`with torch.cuda.stream(s):` selects `s` as the current stream of its device."""

    def __init__(self, stream: Stream | None) -> None:
        self.stream = stream
        self._prev: Stream | None = None

    @node_call("cuda.stream", NODE_HOST_NS["stream_context"])
    def __enter__(self) -> None:
        if self.stream is None:
            return
        self._prev = current_stream(self.stream.device_index)
        _set_current_stream(self.stream)

    @node_call("cuda.stream.exit", 0.0)  # the context's whole cost is charged on entry
    def __exit__(self, *exc: Any) -> None:
        if self.stream is not None and self._prev is not None:
            _set_current_stream(self._prev)


def _set_current_stream(s: Stream) -> None:
    _sim().streams.current[s.device_index] = s


def stream(s: Stream | None) -> StreamContext:
    return StreamContext(s)


def _default_stream(index: int) -> Stream:
    streams = _sim().streams
    s = streams.default.get(index)
    if s is None:
        s = streams.default[index] = Stream(stream_id=0, device_index=index)
    return s


def _current_stream(device: Any = None) -> Stream:
    index = _device_index(device)
    s = _sim().streams.current.get(index)
    return s if s is not None else _default_stream(index)


current_stream = node_call("cuda.current_stream", NODE_HOST_NS["current_stream"])(_current_stream)


@node_call("cuda.default_stream", NODE_HOST_NS["default_stream"])
def default_stream(device: Any = None) -> Stream:
    return _default_stream(_device_index(device))


@node_call("cuda.set_stream", NODE_HOST_NS["set_stream"])
def set_stream(s: Stream) -> None:
    if s is not None:
        _set_current_stream(s)


@dataclass(frozen=True)
class DeviceProperties:
    """Stands in for torch._C._CudaDeviceProperties of the simulated GPU."""

    name: str
    major: int
    minor: int
    total_memory: int
    multi_processor_count: int
    L2_cache_size: int
    is_integrated: int = 0
    is_multi_gpu_board: int = 0
    max_threads_per_multi_processor: int = 2048
    warp_size: int = 32
    regs_per_multiprocessor: int = 65536
    shared_memory_per_block_optin: int = 232448
    gcnArchName: str = "NVIDIA CUDA"
    uuid: str = "00000000-0000-0000-0000-000000000000"
    pci_bus_id: int = 0
    pci_device_id: int = 0
    pci_domain_id: int = 0

    def __repr__(self) -> str:
        return (f"_CudaDeviceProperties(name='{self.name}', major={self.major}, "
                f"minor={self.minor}, total_memory={self.total_memory // 1024**2}MB, "
                f"multi_processor_count={self.multi_processor_count}, "
                f"L2_cache_size={self.L2_cache_size // 1024**2}MB)")


_SIM: "Simulation | None" = None


def _sim() -> "Simulation":
    assert _SIM is not None, "phantom: the simulation is not installed"
    return _SIM


def _properties(device: Any = None) -> DeviceProperties:
    gpu = _sim().gpu
    return DeviceProperties(
        name=gpu.device_name, major=gpu.compute_capability[0], minor=gpu.compute_capability[1],
        total_memory=gpu.memory_bytes, multi_processor_count=gpu.sm_count,
        L2_cache_size=gpu.l2_cache_bytes,
        uuid=f"GPU-phantom-{_device_index(device):04d}",
    )


# -- memory -------------------------------------------------------------------------------

def _memory_api() -> dict[str, Any]:
    def memory_allocated(device: Any = None) -> int:
        return _sim().allocator.allocated_bytes

    def max_memory_allocated(device: Any = None) -> int:
        return _sim().allocator.max_allocated_bytes

    def memory_reserved(device: Any = None) -> int:
        return _sim().allocator.reserved_bytes

    def max_memory_reserved(device: Any = None) -> int:
        return _sim().allocator.max_reserved_bytes

    def memory_stats(device: Any = None) -> dict[str, int]:
        return dict(_sim().allocator.memory_stats())

    def memory_stats_as_nested_dict(device: Any = None) -> dict[str, Any]:
        nested: dict[str, Any] = {}
        for key, value in memory_stats(device).items():
            node = nested
            parts = key.split(".")
            for part in parts[:-1]:
                node = node.setdefault(part, {})
            node[parts[-1]] = value
        return nested

    def reset_peak_memory_stats(device: Any = None) -> None:
        _sim().storage.reset_peak_memory_stats()

    def empty_cache() -> None:
        _sim().allocator.empty_cache()

    def mem_get_info(device: Any = None) -> tuple[int, int]:
        return _sim().allocator.mem_get_info()

    # torch's own table, over the simulated allocator's stats: its formatter reads
    # `memory_stats` from torch.cuda.memory's namespace, which is replaced below
    torch_summary = torch.cuda.memory.memory_summary
    torch_summary = getattr(torch_summary, "__wrapped__", torch_summary)

    def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
        return torch_summary(device, abbreviated)

    def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
        _sim().storage.set_memory_fraction(fraction)

    return {
        "memory_allocated": memory_allocated,
        "max_memory_allocated": max_memory_allocated,
        "memory_reserved": memory_reserved,
        "max_memory_reserved": max_memory_reserved,
        "memory_cached": memory_reserved,
        "max_memory_cached": max_memory_reserved,
        "memory_stats": memory_stats,
        "memory_stats_as_nested_dict": memory_stats_as_nested_dict,
        "reset_peak_memory_stats": reset_peak_memory_stats,
        "reset_max_memory_allocated": reset_peak_memory_stats,
        "reset_max_memory_cached": reset_peak_memory_stats,
        "reset_accumulated_memory_stats": lambda *a, **k: _sim().allocator.reset_accumulated_stats(),
        "empty_cache": empty_cache,
        "mem_get_info": mem_get_info,
        "memory_summary": memory_summary,
        "memory_snapshot": lambda *a, **k: _sim().memory_history.snapshot()["segments"],
        "set_per_process_memory_fraction": set_per_process_memory_fraction,
        "_record_memory_history": lambda *a, **k: _sim().memory_history.start(*a, **k),
        "_snapshot": lambda *a, **k: _sim().memory_history.snapshot(),
        "_dump_snapshot": lambda filename="dump_snapshot.pickle": _sim().memory_history.dump(filename),
        "list_gpu_processes": lambda *a, **k: "phantom: no processes on a simulated GPU",
    }


# -- rng ------------------------------------------------------------------------------------

def _rng_api(n_devices: int) -> dict[str, Any]:
    # CUDA generators only matter for their state (Megatron's RNG tracker saves and restores
    # it); values drawn on fake tensors are never materialised. CPU generators carry the
    # state so get/set round-trips work.
    generators = tuple(torch.Generator() for _ in range(n_devices))

    def gen(device: Any = None) -> torch.Generator:
        return generators[_device_index(device) % n_devices]

    def manual_seed(seed: int) -> None:
        gen().manual_seed(int(seed))

    def manual_seed_all(seed: int) -> None:
        for g in generators:
            g.manual_seed(int(seed))

    def seed() -> None:
        gen().seed()

    def seed_all() -> None:
        s = generators[0].seed()
        for g in generators[1:]:
            g.manual_seed(s)

    def get_rng_state(device: Any = "cuda") -> torch.Tensor:
        return gen(device).get_state()

    def set_rng_state(new_state: torch.Tensor, device: Any = "cuda") -> None:
        gen(device).set_state(new_state)

    return {
        "default_generators": generators,
        "manual_seed": manual_seed,
        "manual_seed_all": manual_seed_all,
        "seed": seed,
        "seed_all": seed_all,
        "initial_seed": lambda: gen().initial_seed(),
        "get_rng_state": get_rng_state,
        "set_rng_state": set_rng_state,
        "get_rng_state_all": lambda: [g.get_state() for g in generators],
        "set_rng_state_all": lambda states: [g.set_state(s) for g, s in zip(generators, states)],
    }


class _NvtxStub:
    """torch.cuda.nvtx: ranges have no cost on the simulated GPU."""

    @staticmethod
    def range_push(msg: str) -> int:
        return 0

    @staticmethod
    def range_pop() -> int:
        return 0

    @staticmethod
    def range_start(msg: str) -> int:
        return 0

    @staticmethod
    def range_end(range_id: int) -> None:
        return None

    @staticmethod
    def mark(msg: str) -> None:
        return None

    @staticmethod
    @contextlib.contextmanager
    def range(msg: str, *args: Any, **kwargs: Any):
        yield


class CUDAGraph:
    """torch.cuda.CUDAGraph on the simulated device (engine/graphs.py): capture records the
    kernels launched on the capturing stream(s) and allocates from the graph's private pool;
    `replay()` costs the host one graph launch and runs the captured kernels again. torch's own
    `torch.cuda.graph` context manager and `make_graphed_callables` drive it unchanged."""

    def __init__(self, keep_graph: bool = False) -> None:
        self._graph = None
        self._lanes: list[int] = []
        self._pool: int | None = None

    def capture_begin(self, pool: Any = None, capture_error_mode: str = "global", **_: Any) -> None:
        # `pool`: another graph's pool() or graph_pool_handle(), shared; else a pool of its own
        self._pool = _pool_key(pool) if pool is not None else new_pool_key()
        _sim().graphs.begin_capture(self._pool)

    def capture_end(self) -> None:
        self._graph, self._lanes = _sim().graphs.end_capture()

    def instantiate(self) -> None:
        pass  # capture_end instantiated it (its host time charged there)

    @node_call("CUDAGraph.replay", 0.0)  # engine/graphs.py charges the launch by graph size
    def replay(self) -> None:
        if self._graph is None:
            raise RuntimeError("CUDA error: replay called on a CUDAGraph with no captured graph "
                               "(capture it first with torch.cuda.graph)")
        _sim().graphs.replay(self._graph, self._lanes)

    def reset(self) -> None:
        self._graph, self._lanes = None, []

    def pool(self) -> tuple[int, int]:
        if self._pool is None:
            raise RuntimeError("CUDA error: pool() called before capture_begin")
        return (0, -self._pool)

    def enable_debug_mode(self) -> None:
        pass

    def debug_dump(self, debug_path: str) -> None:
        graph = self._graph
        with open(debug_path, "w") as f:
            for node in graph.nodes if graph is not None else ():
                f.write(f"{node}\n")

    def raw_cuda_graph(self) -> int:
        raise RuntimeError("phantom: the raw cudaGraph_t of a simulated CUDA graph does not exist")

    raw_cuda_graph_exec = raw_cuda_graph


_pools = itertools.count(1)


def new_pool_key() -> int:
    """A private memory pool: the allocator keys its free lists by stream, pools by negative ids."""
    return -next(_pools)


def _pool_key(handle: Any) -> int:
    return -int(tuple(handle)[1])


def graph_pool_handle() -> tuple[int, int]:
    return (0, -new_pool_key())


def install(sim: "Simulation") -> None:
    """Point torch.cuda and the torch._C CUDA bindings at the simulation."""
    global _SIM
    _SIM = sim
    cuda = torch.cuda
    n = sim.device_count

    def set_device(device: Any) -> None:
        index = _device_index(device)
        if index >= n:
            raise RuntimeError(f"CUDA error: invalid device ordinal (device {index}, {n} simulated)")
        torch._C._accelerator_setDeviceIndex(index)

    def exchange_device(index: int) -> int:
        prev = torch.accelerator.current_device_index()
        if index >= 0:
            torch._C._accelerator_setDeviceIndex(index)
        return prev

    def maybe_exchange_device(index: int) -> int:
        # its own function object: Dynamo registers a handler per torch.cuda function and
        # refuses a second one for the same object
        return exchange_device(index)

    @node_call("cuda.synchronize", NODE_HOST_NS["synchronize"])
    def synchronize(device: Any = None) -> None:
        sim.streams.synchronize_device()

    c_bindings = {
        "_cuda_getDeviceCount": lambda: n,
        "_cuda_getDevice": lambda: torch.accelerator.current_device_index(),
        "_cuda_setDevice": set_device,
        "_cuda_exchangeDevice": exchange_device,
        "_cuda_maybeExchangeDevice": maybe_exchange_device,
        "_cuda_synchronize": synchronize,
        "_cuda_getArchFlags": lambda: "sm_80 sm_90",
        "_cuda_isInBadFork": lambda: False,
        "_cuda_init": lambda: None,
        "_cuda_getCurrentRawStream": lambda idx: _current_stream(idx).cuda_stream,
        "_cuda_getCurrentBlasHandle": lambda: 0,
        "_cuda_clearCublasWorkspaces": lambda: sim.storage.clear_cublas_workspaces(),
        "_cuda_sleep": node_call("torch.cuda._sleep", 0.0)(lambda cycles: sim.launch_sleep(cycles)),
        "_cuda_get_conv_benchmark_empty_cache": lambda: True,
        "_cuda_set_conv_benchmark_empty_cache": lambda enable: None,
        # torch 2.11's optimizers ask before every step (`_accelerator_graph_capture_health_check`),
        # and on a CUDA build without a driver the real binding raises.
        "_cuda_isCurrentStreamCapturing": lambda: sim.graphs.is_capturing(),
        "_graph_pool_handle": graph_pool_handle,
        # torch.cuda.graph empties the pinned host cache before capturing; the CPU build lacks it
        "_host_emptyCache": lambda: None,
    }
    for name, fn in c_bindings.items():
        # each binding its own function object: Dynamo maps torch's functions by identity
        # (trace_rules.get_torch_obj_rule_map) and refuses one object under two names with
        # different rules, as torch.cuda.set_device and torch._C._cuda_setDevice have
        setattr(torch._C, name, functools.wraps(fn)(lambda *a, _fn=fn, **k: _fn(*a, **k)))

    module_api: dict[str, Any] = {
        "is_available": lambda: True,
        "is_initialized": lambda: True,
        "_is_compiled": lambda: True,
        "_lazy_init": lambda: None,
        "init": lambda: None,
        "device_count": lambda: n,
        "current_device": lambda: torch.accelerator.current_device_index(),
        "set_device": set_device,
        "_exchange_device": exchange_device,
        "_maybe_exchange_device": maybe_exchange_device,
        "get_device_properties": _properties,
        "get_device_name": lambda device=None: sim.gpu.device_name,
        "get_device_capability": lambda device=None: sim.gpu.compute_capability,
        "get_arch_list": lambda: ["sm_80", "sm_90"],
        "get_gencode_flags": lambda: "-gencode compute=compute_80,code=sm_80 -gencode compute=compute_90,code=sm_90",
        "is_bf16_supported": lambda including_emulation=True: sim.gpu.compute_capability >= (8, 0),
        "is_tf32_supported": lambda: sim.gpu.compute_capability >= (8, 0),
        "synchronize": synchronize,
        "Stream": Stream,
        "ExternalStream": ExternalStream,
        "Event": Event,
        "StreamContext": StreamContext,
        "stream": stream,
        "current_stream": current_stream,
        "default_stream": default_stream,
        "set_stream": set_stream,
        "current_blas_handle": lambda: 0,
        "set_sync_debug_mode": lambda mode: None,
        "get_sync_debug_mode": lambda: 0,
        "ipc_collect": lambda: None,
        "can_device_access_peer": lambda device, peer: True,
        "utilization": lambda device=None: 100,
        "nvtx": _NvtxStub,
        "is_current_stream_capturing": lambda: sim.graphs.is_capturing(),
        "CUDAGraph": CUDAGraph,
        "graph_pool_handle": graph_pool_handle,
    }
    module_api.update(_memory_api())
    module_api.update(_rng_api(n))
    for name, value in module_api.items():
        setattr(cuda, name, value)
    for name, value in _memory_api().items():
        setattr(cuda.memory, name, value)
    for name in ("get_rng_state", "set_rng_state", "get_rng_state_all", "set_rng_state_all",
                 "manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed"):
        setattr(cuda.random, name, module_api[name])
    # torch.cuda.graphs bound these at import: its `graph` context manager and
    # make_graphed_callables run unchanged on phantom's CUDAGraph
    cuda.graphs.is_current_stream_capturing = module_api["is_current_stream_capturing"]
    cuda.graphs.CUDAGraph = CUDAGraph
    cuda.graphs.graph_pool_handle = graph_pool_handle
    cuda.streams.Stream = Stream
    cuda.streams.Event = Event
    cuda.nvtx = _NvtxStub
    cuda._initialized = True
    torch.version.cuda = SIMULATED_CUDA_VERSION
    _install_nccl_version()


def _install_nccl_version() -> None:
    nccl = torch.cuda.nccl
    nccl.version = lambda: SIMULATED_NCCL_VERSION
    nccl.is_available = lambda tensors=None: True


def warn_once(message: str, _seen: set[str] = set()) -> None:
    if message not in _seen:
        _seen.add(message)
        warnings.warn(message, stacklevel=3)
