"""Device-memory model: the simulated GPU's memory and PyTorch's CUDA caching allocator over it."""
from phantom.memory.allocator import (
    DEFAULT_DRIVER_RESERVED_BYTES,
    AllocatorOutOfMemory,
    Block,
    CachingAllocator,
    format_size,
    get_allocation_size,
    round_size,
)

__all__ = [
    "DEFAULT_DRIVER_RESERVED_BYTES",
    "AllocatorOutOfMemory",
    "Block",
    "CachingAllocator",
    "format_size",
    "get_allocation_size",
    "round_size",
]
