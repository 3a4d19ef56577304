"""`torch.cuda.memory._record_memory_history`, `_snapshot` and `_dump_snapshot` from the
simulated caching allocator.

On a GPU these record every allocator event with the Python stack that caused it, and dump a
pickle that https://pytorch.org/memory_viz (torch/cuda/_memory_viz.py) draws: the segments
with their blocks, and the trace of alloc / free / segment events. Here the same events come
from phantom's allocator model (memory/allocator.py `observer`), timed in simulated host
microseconds, with the script's Python stack (phantom's own frames left out).
"""
from __future__ import annotations

import collections
import os
import pickle
import sys
import traceback
from typing import Any, Callable

from phantom.memory.allocator import Block, CachingAllocator

_PHANTOM_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _frames() -> list[dict]:
    """The Python stack, innermost first as torch records it, without phantom's frames."""
    return [{"filename": f.filename, "line": f.lineno or 0, "name": f.name}
            for f in reversed(traceback.extract_stack())
            if not f.filename.startswith(_PHANTOM_DIR)]


class MemoryHistory:
    """The recorded trace of one simulated device's allocator."""

    def __init__(self, allocator: CachingAllocator, now_ns: Callable[[], float]) -> None:
        self.allocator = allocator
        self.now_ns = now_ns
        self.entries: collections.deque = collections.deque()
        self.stacks = True
        self.block_frames: dict[int, list[dict]] = {}  # live block address -> its alloc's stack

    def start(self, enabled: str | bool | None = "all", context: str | None = "all",
              stacks: str = "all", max_entries: int = sys.maxsize, clear_history: bool = False,
              **_: Any) -> None:
        """`_record_memory_history(enabled=...)`: None (or False, the old signature) stops
        recording; the rest starts it."""
        if clear_history:
            self.entries.clear()
        if enabled is None or enabled is False:
            self.allocator.observer = None
            return
        self.stacks = context is not None and stacks != "none"
        self.entries = collections.deque(self.entries, maxlen=max(int(max_entries), 1))
        self.allocator.observer = self.observe

    def observe(self, action: str, block: Block) -> None:
        """The allocator's event ("alloc", "free", "segment_alloc", "segment_free") as torch's
        trace entries (c10/cuda/CUDACachingAllocator.h `TraceEntry`)."""
        frames = _frames() if self.stacks else []
        time_us = int(self.now_ns() / 1e3)
        base = {"addr": block.ptr, "size": block.size, "stream": block.stream, "time_us": time_us,
                "frames": frames}
        if action == "free":
            # freed at once here (no events outlive a simulated stream's work): both entries
            self.entries.append({**base, "action": "free_requested"})
            self.entries.append({**base, "action": "free_completed"})
            self.block_frames.pop(block.ptr, None)
            return
        self.entries.append({**base, "action": action})
        if action == "alloc":
            self.block_frames[block.ptr] = frames

    def snapshot(self) -> dict:
        """`torch.cuda.memory._snapshot()`: segments with their blocks, and the trace."""
        segments = self.allocator.segments()
        for segment in segments:
            for block in segment["blocks"]:
                block["frames"] = self.block_frames.get(block["address"], [])
        return {"segments": segments, "device_traces": [list(self.entries)],
                "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")},
                "external_annotations": []}

    def dump(self, filename: str = "dump_snapshot.pickle") -> None:
        with open(filename, "wb") as f:
            pickle.dump(self.snapshot(), f)
