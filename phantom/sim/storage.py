"""Device memory of one rank: each fake CUDA storage's block in the caching-allocator model,
for as long as the storage lives, and cuBLAS's workspaces."""
from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING, Any

import torch

from phantom.memory import AllocatorOutOfMemory, CachingAllocator
from phantom.native.build import storage_address_setter

if TYPE_CHECKING:
    from phantom.sim.simulation import Simulation

CUBLAS_WORKSPACE_BYTES = 32 * 1024**2


class Storage:
    """Live storages and their blocks (`live`: storage key -> [block, recorder's record or
    None]), and cuBLAS's workspaces (`workspaces`: (thread, stream) -> the same pair)."""

    def __init__(self, sim: Simulation, allocator: CachingAllocator) -> None:
        self.sim = sim
        self.allocator = allocator
        self.live: dict[int, list] = {}
        self.workspaces: dict[tuple[int, int], list] = {}

    def track_outputs(self, out: Any, stream_id: int) -> None:
        if self.sim.fusion.in_registers:
            return
        if isinstance(out, torch.Tensor):
            self.track(out, stream_id)
        elif isinstance(out, (tuple, list)):
            for o in out:
                if isinstance(o, torch.Tensor):
                    self.track(o, stream_id)

    def track(self, t: torch.Tensor, stream_id: int) -> None:
        """Give `t`'s storage a block, unless it has one."""
        if t.device.type != "cuda":
            return  # not device memory
        storage = t.untyped_storage()
        key = storage._cdata
        if key in self.live:
            return  # a view, or an in-place op returning its input: already counted
        block = self._malloc(storage.nbytes(), stream_id)
        self._place(storage, block)
        recorder = self.sim.recorder
        record = recorder.malloc(block.size, self.sim.timeline.host_ns) if recorder is not None else None
        self.live[key] = [block, record]
        # The block lives as long as the storage, not as long as the tensors that first held
        # it: `p.data = x` and `set_` move a tensor to another storage (DeepSpeed re-points
        # every parameter into its flat buffer), views keep a storage alive after its tensor
        # dies. torch keeps one Python object per storage (since 2.0), so its finalizer runs
        # exactly when the storage is freed; a new storage cannot take the key before that.
        weakref.finalize(storage, self._release, key)

    def _place(self, storage: Any, block: Any) -> None:
        """The storage's data_ptr() is its block's simulated address, as on a GPU: distinct
        for live storages, reused as the caching allocator reuses blocks."""
        set_address = storage_address_setter()
        if set_address is not None:
            set_address(storage._cdata, block.ptr if block is not None else 0)

    def _malloc(self, nbytes: int, stream_id: int):
        capture = self.sim.graphs.capture
        if capture is not None and capture.captures(stream_id):
            # a capture allocates from its graph's private pool, which nothing outside the
            # graph (or graphs sharing the pool) reuses: a free list of its own
            stream_id = capture.graph.pool
        try:
            return self.allocator.malloc(nbytes, stream_id)
        except AllocatorOutOfMemory as e:
            raise torch.OutOfMemoryError(e.message) from None

    def _release(self, key: int) -> None:
        host = self.sim.host
        t0 = host.clock()
        entry = self.live.pop(key, None)
        if entry is not None and entry[0] is not None:
            self.allocator.free(entry[0])
            if self.sim.recorder is not None:
                self.sim.recorder.free(entry[1], self.sim.timeline.host_ns)
        # phantom's work inside the user's time (the script dropped a tensor)
        host.storage_released(host.clock() - t0)

    def record_stream(self, t: torch.Tensor, stream_id: int) -> None:
        """Tensor.record_stream: the tensor's block is in use on `stream_id` too."""
        entry = self.live.get(t.untyped_storage()._cdata) if t.device.type == "cuda" else None
        if entry is not None and entry[0] is not None:
            self.allocator.record_stream(entry[0], stream_id)

    def resize(self, storage: Any, nbytes: int) -> None:
        """`UntypedStorage.resize_` on a CUDA storage: the caching allocator frees the old
        block and allocates one of the new size (FSDP2 frees and re-allocates its unsharded
        parameters this way, keeping the tensor objects)."""
        entry = self.live.get(storage._cdata)
        if entry is None:
            return
        sim = self.sim
        sim.host.begin_op("storage_resize")
        if entry[0] is not None:
            self.allocator.free(entry[0])
            if sim.recorder is not None:
                sim.recorder.free(entry[1], sim.timeline.host_ns)
        entry[0] = self._malloc(nbytes, sim.streams.current_id()) if nbytes > 0 else None
        self._place(storage, entry[0])
        if sim.recorder is not None:
            # A storage resized up is FSDP re-allocating an unsharded parameter (the only
            # user of resize_ on CUDA storages in training code): count it as parameters.
            record = None
            if entry[0] is not None:
                record = sim.recorder.malloc(entry[0].size, sim.timeline.host_ns,
                                             op="UntypedStorage.resize_", category="parameters")
            entry[1] = record
        sim.host.end_op()

    def gemm_workspace(self, stream_id: int) -> None:
        """cuBLAS's workspace for a GEMM on `stream_id` from this thread: taken from the
        caching allocator at the first GEMM of each (cuBLAS handle, stream) pair and kept until
        `torch._C._cuda_clearCublasWorkspaces()` (32 MiB on Hopper; measured on H100).

        torch hands out cuBLAS handles per thread (ATen's CublasHandlePool.cpp, a
        DeviceThreadHandlePool) and keys the workspaces by handle and stream, so the autograd
        engine's device thread, which runs the backward's GEMMs, holds workspaces of its own:
        a real H100 ran a training step with 32 MiB per stream for the forward's GEMMs and
        32 MiB more for the backward's (bench/probes/live_blocks.py). A thread's identity stands for
        its handle here (a thread that ends returns its handle for the next to reuse, as a
        recycled thread id does)."""
        key = (threading.get_ident(), stream_id)
        if key in self.workspaces:
            return
        block = self._malloc(CUBLAS_WORKSPACE_BYTES, stream_id)
        record = None
        recorder = self.sim.recorder
        if recorder is not None:
            record = recorder.malloc(block.size, self.sim.timeline.host_ns, op="cuBLAS workspace",
                                     category="other")
        self.workspaces[key] = [block, record]

    def clear_cublas_workspaces(self) -> None:
        """`torch._C._cuda_clearCublasWorkspaces()`: every workspace back to the allocator
        (torch.compile's CUDA graph trees call it around each warm-up and recording, so that a
        workspace is not used in two places), allocated again by the next GEMM of its pair."""
        recorder = self.sim.recorder
        for block, record in self.workspaces.values():
            self.allocator.free(block)
            if recorder is not None:
                recorder.free(record, self.sim.timeline.host_ns)
        self.workspaces.clear()

    def reset_peak_memory_stats(self) -> None:
        """torch.cuda.reset_peak_memory_stats(): the allocator's peaks, and the recorder's."""
        self.allocator.reset_peak_stats()
        if self.sim.recorder is not None:
            self.sim.recorder.reset_peak()

    def set_memory_fraction(self, fraction: float) -> None:
        if not 0.0 < fraction <= 1.0:
            raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
        self.allocator.set_memory_fraction(fraction)
