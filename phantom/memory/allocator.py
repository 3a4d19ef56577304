"""A model of PyTorch's CUDA caching allocator for one simulated GPU.

This module owns the simulated device memory: which bytes a script has allocated,
which bytes PyTorch holds in its cache ("reserved"), when a request needs a new
cudaMalloc, when that cudaMalloc would fail, and the statistics and OOM message
that ``torch.cuda`` reports.  It re-implements the rules of
``c10/cuda/CUDACachingAllocator.cpp`` (DeviceCachingAllocator, default settings,
expandable segments off) in Python; it holds no real memory, only sizes and
virtual addresses.

Rules modelled (names follow the C++ source):

* ``round_size``: requests are rounded up to a multiple of kMinBlockSize (512 B);
  optional power-of-two divisions (``roundup_power2_divisions``), off by default.
* Pools: rounded sizes <= kSmallSize (1 MiB) use the small pool, others the large
  pool.  Each pool is further keyed by stream: a freed block is reused only by
  the stream it was allocated on (the C++ comparator orders by stream first).
* ``get_allocation_size``: a new small segment is kSmallBuffer (2 MiB); a large
  request < kMinLargeAlloc (10 MiB) gets a kLargeBuffer (20 MiB) segment; larger
  requests are rounded up to kRoundLarge (2 MiB).
* ``get_free_block``: best fit (smallest free block >= size, lowest address on
  ties) within (pool, stream), with the ``max_split_size`` guards.
* ``should_split``: small pool splits when the remainder >= 512 B, large pool
  when the remainder > 1 MiB (and the request is below ``max_split_size``).
* ``free_block``: the freed block is merged with free neighbours of its segment.
* On a failed device malloc: ``release_available_cached_blocks`` (only when
  ``max_split_size`` is set), then ``release_cached_blocks`` (every cached
  segment with no allocated block is cudaFree'd) and one counted retry; then OOM.
* Statistics: the same counters, with the same update points, as DeviceStats.

The simulated device: a cudaMalloc of ``n`` bytes succeeds only if
``driver_reserved + reserved + n <= capacity`` (and under the per-process memory
fraction, if one is set).  Segment sizes are multiples of 2 MiB, the GPU's page
size, so no further driver rounding is needed.
"""
from __future__ import annotations

from bisect import bisect_left, insort
from typing import Callable, Hashable, Iterator

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

# Constants of CUDACachingAllocator.cpp / c10/core/AllocatorConfig.h.
K_MIN_BLOCK_SIZE = 512  # every size is rounded to a multiple of this
K_SMALL_SIZE = 1 * MiB  # largest "small" request
K_SMALL_BUFFER = 2 * MiB  # small requests are packed into 2 MiB segments
K_LARGE_BUFFER = 20 * MiB  # large requests < kMinLargeAlloc share 20 MiB segments
K_MIN_LARGE_ALLOC = 10 * MiB
K_ROUND_LARGE = 2 * MiB  # larger requests get their own segment, rounded to 2 MiB
SIZE_MAX = 2**64 - 1  # max_split_size default: "unlimited"
_ONE_EXABYTE = 1 << 60  # NativeCachingAllocator::allocate refuses requests this big

# Memory that the CUDA context, loaded kernel images and library handles take on the
# GPU outside PyTorch's allocator; cudaMemGetInfo counts it as used.  Measured on an
# NVIDIA H100 80GB HBM3 (driver 580.159.04, torch 2.11.0+cu130, CUDA lazy module
# loading, total reported by cudaMemGetInfo 85,017,493,504 bytes = 79.18 GiB):
#   526.8 MiB right after context creation (the same on an H200),
#   594.8 MiB after the first bf16 matmul (cuBLAS handle and kernels loaded),
#   766.8 MiB after three AdamW steps of a 4-layer bf16-autocast transformer.
# The default is the last figure: by the time a training step reaches its peak it
# has loaded most of its kernels.  cuBLAS's workspace is NOT in it: PyTorch takes
# that (32 MiB on Hopper) from the caching allocator on the first matmul per stream.
DEFAULT_DRIVER_RESERVED_BYTES = 767 * MiB

_OOM_ADVICE = (
    " If reserved but unallocated memory is large try setting"
    " PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid"
    " fragmentation.  See documentation for Memory Management "
    " (https://docs.pytorch.org/docs/stable/notes/cuda.html"
    "#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)"
)

# Stat array indices (c10 StatType): AGGREGATE, SMALL_POOL, LARGE_POOL.
_ALL, _SMALL, _LARGE = 0, 1, 2
_POOL_NAMES = ("all", "small_pool", "large_pool")
_STAT_ARRAY_NAMES = (
    "allocation",
    "segment",
    "active",
    "inactive_split",
    "allocated_bytes",
    "reserved_bytes",
    "active_bytes",
    "inactive_split_bytes",
    "requested_bytes",
)

Stream = Hashable  # any hashable stream id; the simulator uses ints


class AllocatorOutOfMemory(Exception):
    """A request the simulated GPU cannot satisfy; ``message`` is PyTorch's OOM text."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def format_size(size: int) -> str:
    """c10's format_size: bytes up to 1024, then KiB/MiB/GiB with two decimals.

    The boundaries are inclusive as in C++ (exactly 1 MiB prints "1024.00 KiB").
    Python's '.2f' rounds the binary value half-to-even, like iostream's fixed.
    """
    if size <= 1024:
        return f"{size} bytes"
    if size <= MiB:
        return f"{size / 1024.0:.2f} KiB"
    if size <= GiB:
        return f"{size / 1048576.0:.2f} MiB"
    return f"{size / 1073741824.0:.2f} GiB"


def round_size(size: int, roundup_power2_divisions: int = 0) -> int:
    """Size a request occupies in a block (DeviceCachingAllocator::round_size)."""
    if size < K_MIN_BLOCK_SIZE:
        return K_MIN_BLOCK_SIZE
    divisions = roundup_power2_divisions
    if divisions > 1 and size > K_MIN_BLOCK_SIZE * divisions:
        return _roundup_power2_next_division(size, divisions)
    return K_MIN_BLOCK_SIZE * ((size + K_MIN_BLOCK_SIZE - 1) // K_MIN_BLOCK_SIZE)


def _roundup_power2_next_division(size: int, divisions: int) -> int:
    # Split [2^k, 2^(k+1)) into `divisions` equal steps and round up to the next step.
    if size & (size - 1) == 0:
        return size
    power2_floor = 1 << (size.bit_length() - 1)
    step = power2_floor >> (divisions.bit_length() - 1)
    if step == 0:
        return power2_floor << 1
    floor = size & ~(step - 1)
    return size if floor == size else floor + step


def is_small_size(rounded_size: int) -> bool:
    """Whether a rounded size is served from the small pool (get_pool)."""
    return rounded_size <= K_SMALL_SIZE


def get_allocation_size(rounded_size: int, large_segment_size: int = K_LARGE_BUFFER) -> int:
    """Size of the segment cudaMalloc'd for a request no cached block can serve."""
    if rounded_size <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if rounded_size < K_MIN_LARGE_ALLOC:
        return large_segment_size
    return K_ROUND_LARGE * ((rounded_size + K_ROUND_LARGE - 1) // K_ROUND_LARGE)


class Stat:
    """One c10 Stat: current value, high-water mark and lifetime increase/decrease."""

    __slots__ = ("current", "peak", "allocated", "freed")

    def __init__(self) -> None:
        self.current = 0
        self.peak = 0
        self.allocated = 0
        self.freed = 0

    def increase(self, amount: int) -> None:
        self.current += amount
        if self.current > self.peak:
            self.peak = self.current
        self.allocated += amount

    def decrease(self, amount: int) -> None:
        self.current -= amount
        self.freed += amount

    def reset_peak(self) -> None:
        self.peak = self.current

    def reset_accumulated(self) -> None:
        self.allocated = 0
        self.freed = 0

    def as_dict(self) -> dict[str, int]:
        return {"current": self.current, "peak": self.peak, "allocated": self.allocated, "freed": self.freed}


def _stat_array() -> tuple[Stat, Stat, Stat]:
    return (Stat(), Stat(), Stat())


class _FreeList:
    """Cached free blocks of one (pool, stream), sorted by (size, address).

    This is the slice of the C++ BlockPool set (ordered by stream, size, ptr) that
    belongs to one stream, so a lower_bound on (size, 0) is the best fit.
    """

    __slots__ = ("is_small", "stream", "keys", "by_ptr")

    def __init__(self, is_small: bool, stream: Stream) -> None:
        self.is_small = is_small
        self.stream = stream
        self.keys: list[tuple[int, int]] = []
        self.by_ptr: dict[int, Block] = {}

    def add(self, block: "Block") -> None:
        insort(self.keys, (block.size, block.ptr))
        self.by_ptr[block.ptr] = block

    def remove(self, block: "Block") -> None:
        index = bisect_left(self.keys, (block.size, block.ptr))
        del self.keys[index]
        del self.by_ptr[block.ptr]

    def __len__(self) -> int:
        return len(self.keys)

    def blocks(self) -> list["Block"]:
        return [self.by_ptr[ptr] for _, ptr in self.keys]


class Block:
    """A range of a segment: allocated to a tensor, or cached free.

    As in the C++ allocator, Block objects are recycled when blocks split and
    merge: a caller's reference is valid only until it passes it to free().

    ``size`` is the rounded size the block occupies; ``requested_size`` what the
    caller asked for; ``ptr`` a simulated device address.  ``prev``/``next`` link the
    blocks of one segment in address order (both None: an unsplit segment).
    """

    __slots__ = (
        "size",
        "requested_size",
        "stream",
        "ptr",
        "allocated",
        "prev",
        "next",
        "free_list",
        "stream_uses",
    )

    def __init__(self, size: int, stream: Stream, ptr: int, free_list: _FreeList | None) -> None:
        self.size = size
        self.requested_size = 0
        self.stream = stream
        self.ptr = ptr
        self.allocated = False
        self.prev: Block | None = None
        self.next: Block | None = None
        self.free_list = free_list  # the (pool, stream) list this block returns to
        # Streams recorded with record_stream; non-empty after free() means the block
        # waits for those streams (the C++ event_count > 0) before it is reusable.
        self.stream_uses: set[Stream] | None = None

    @property
    def is_small(self) -> bool:
        return self.free_list is not None and self.free_list.is_small

    def is_split(self) -> bool:
        return self.prev is not None or self.next is not None

    def __repr__(self) -> str:
        state = "allocated" if self.allocated else "free"
        return f"Block(ptr={self.ptr:#x}, size={self.size}, stream={self.stream!r}, {state})"


class CachingAllocator:
    """PyTorch's CUDA caching allocator for one simulated device.

    ``capacity_bytes`` is the device's total memory as cudaMemGetInfo reports it;
    ``driver_reserved_bytes`` is memory used outside PyTorch's allocator (CUDA
    context, kernels, library handles).  ``max_split_size`` (None: unlimited, the
    default), ``max_non_split_rounding_size`` and ``roundup_power2_divisions`` are
    the PYTORCH_CUDA_ALLOC_CONF knobs of the same names, in bytes.
    ``include_process_info`` adds NVML's "Including non-PyTorch memory, this process
    has ... memory in use." sentence to OOM messages, as on a machine where PyTorch
    can load NVML (the usual Linux case).
    """

    def __init__(
        self,
        capacity_bytes: int,
        driver_reserved_bytes: int = DEFAULT_DRIVER_RESERVED_BYTES,
        device_index: int = 0,
        *,
        max_split_size: int | None = None,
        max_non_split_rounding_size: int = K_LARGE_BUFFER,
        roundup_power2_divisions: int = 0,
        include_process_info: bool = True,
    ) -> None:
        if capacity_bytes <= 0:
            raise ValueError(f"capacity_bytes must be positive, got {capacity_bytes}")
        if not 0 <= driver_reserved_bytes <= capacity_bytes:
            raise ValueError("driver_reserved_bytes must lie between 0 and capacity_bytes")
        self.capacity_bytes = capacity_bytes
        self.driver_reserved_bytes = driver_reserved_bytes
        self.device_index = device_index
        self.max_split_size = SIZE_MAX if max_split_size is None else max_split_size
        self.max_non_split_rounding_size = max_non_split_rounding_size
        self.roundup_power2_divisions = roundup_power2_divisions
        # Called as observer(action, block) for "alloc", "free", "segment_alloc" and
        # "segment_free" (torch.cuda.memory._record_memory_history: memory/history.py).
        self.observer: Callable[[str, Block], None] | None = None
        self.include_process_info = include_process_info
        self.allowed_memory_maximum: int | None = None  # set_memory_fraction

        self._free_lists: dict[tuple[bool, Stream], _FreeList] = {}
        self._active_blocks: set[Block] = set()  # allocated, or freed but awaiting streams
        self._pending_free: list[Block] = []  # freed blocks waiting on recorded streams
        self._total_allocated_memory = 0  # bytes cudaMalloc'd (== reserved_bytes.all)
        self._next_address = 0x7F0000000000  # simulated virtual addresses, never reused

        self._arrays: dict[str, tuple[Stat, Stat, Stat]] = {name: _stat_array() for name in _STAT_ARRAY_NAMES}
        # Direct references for the hot path.
        self._allocation = self._arrays["allocation"]
        self._segment = self._arrays["segment"]
        self._active = self._arrays["active"]
        self._inactive_split = self._arrays["inactive_split"]
        self._allocated_bytes = self._arrays["allocated_bytes"]
        self._reserved_bytes = self._arrays["reserved_bytes"]
        self._active_bytes = self._arrays["active_bytes"]
        self._inactive_split_bytes = self._arrays["inactive_split_bytes"]
        self._requested_bytes = self._arrays["requested_bytes"]
        self._oversize_allocations = Stat()
        self._oversize_segments = Stat()
        # Hot path: the stats every malloc/free touches, per pool kind (is_small), as
        # (stat, which amount) pairs with 0 = one block, 1 = block size, 2 = requested size.
        self._on_alloc: dict[bool, tuple[tuple[Stat, int], ...]] = {}
        self._on_free: dict[bool, tuple[tuple[Stat, int], ...]] = {}
        for is_small, t in ((True, _SMALL), (False, _LARGE)):
            self._on_alloc[is_small] = tuple(
                (array[i], which)
                for array, which in (
                    (self._allocation, 0),
                    (self._allocated_bytes, 1),
                    (self._active, 0),
                    (self._active_bytes, 1),
                    (self._requested_bytes, 2),
                )
                for i in (_ALL, t)
            )
            self._on_free[is_small] = tuple(
                (array[i], which)
                for array, which in ((self._allocation, 0), (self._allocated_bytes, 1))
                for i in (_ALL, t)
            )
        self._counters = {
            "num_alloc_retries": 0,
            "num_ooms": 0,
            "num_sync_all_streams": 0,
            "num_device_alloc": 0,
            "num_device_free": 0,
            "num_oom_rejections": 0,  # torch >= 2.13 key; stays 0 (no throw_on_cudamalloc_oom)
        }

    # ------------------------------------------------------------------ public API

    def malloc(self, nbytes: int, stream: Stream = 0) -> Block:
        """Allocate ``nbytes`` on ``stream``; raises AllocatorOutOfMemory like cudaMalloc would."""
        if nbytes <= 0:
            if nbytes < 0:
                raise ValueError(f"negative allocation size {nbytes}")
            # PyTorch hands out a null pointer for 0 bytes and touches no statistics.
            return Block(0, stream, 0, None)
        if nbytes >= _ONE_EXABYTE:
            raise AllocatorOutOfMemory("CUDA out of memory. Tried to allocate more than 1EB memory.")
        if self._pending_free:
            self._process_events()
        size = round_size(nbytes, self.roundup_power2_divisions)
        free_list = self._get_free_list(is_small_size(size), stream)
        alloc_size = get_allocation_size(size)
        block = self._get_free_block(free_list, size)
        if block is None:
            block = self._alloc_with_retries(free_list, size, alloc_size)
        block = self._alloc_found_block(block, size, nbytes, self._should_split(block, size))
        if self.observer is not None:
            self.observer("alloc", block)
        return block

    def free(self, block: Block) -> None:
        """Return a block to the cache (not to the device: that is empty_cache)."""
        if block.ptr == 0:
            return  # the 0-byte block
        if not block.allocated:
            raise ValueError(f"invalid device pointer: {block.ptr:#x} (double free?)")
        block.allocated = False
        if self.observer is not None:
            self.observer("free", block)
        amounts = (1, block.size)
        for stat, which in self._on_free[block.free_list.is_small]:  # Stat.decrease, inlined
            amount = amounts[which]
            stat.current -= amount
            stat.freed += amount
        if block.size >= self.max_split_size:
            self._oversize_allocations.decrease(1)
        if block.stream_uses:
            # The C++ allocator records an event on every stream in stream_uses and
            # recycles the block once they complete; here they are taken to complete
            # by the next malloc or empty_cache, see _process_events.
            self._pending_free.append(block)
        else:
            self._free_block(block)

    def record_stream(self, block: Block, stream: Stream) -> None:
        """Mark ``block`` as used on ``stream`` (Tensor.record_stream).

        Simple model: a block used on another stream is not reusable when freed (it
        stays "active", not "allocated"); it goes back to its pool at the next malloc
        or empty_cache(), the points where the C++ allocator polls or syncs its
        events, as if the GPU had finished that stream's work by then.  (On a real
        GPU the event may still be pending at that malloc if the stream is busy.)
        """
        if block.ptr == 0 or stream == block.stream:
            return  # uses on the allocation stream need no synchronisation
        if block.stream_uses is None:
            block.stream_uses = set()
        block.stream_uses.add(stream)

    def empty_cache(self) -> None:
        """torch.cuda.empty_cache(): cudaFree every cached segment with no allocated block."""
        self._release_cached_blocks()

    def set_memory_fraction(self, fraction: float) -> None:
        """torch.cuda.set_per_process_memory_fraction: cap reserved memory at fraction*total."""
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"invalid fraction: {fraction}. Please set within [0, 1].")
        self.allowed_memory_maximum = int(fraction * self.capacity_bytes) if fraction < 1.0 else None

    def memory_stats(self) -> dict[str, int]:
        """Flat statistics keyed as torch.cuda.memory_stats() keys them, sorted by key."""
        flat: dict[str, int] = dict(self._counters)
        flat["max_split_size"] = -1 if self.max_split_size == SIZE_MAX else self.max_split_size
        for name, array in self._arrays.items():
            for pool_name, stat in zip(_POOL_NAMES, array):
                for metric, value in stat.as_dict().items():
                    flat[f"{name}.{pool_name}.{metric}"] = value
        for name, stat in (("oversize_allocations", self._oversize_allocations), ("oversize_segments", self._oversize_segments)):
            for metric, value in stat.as_dict().items():
                flat[f"{name}.{metric}"] = value
        return dict(sorted(flat.items()))

    def reset_peak_stats(self) -> None:
        """torch.cuda.reset_peak_memory_stats(): every peak drops to its current value."""
        for stat in self._all_stats():
            stat.reset_peak()

    def reset_accumulated_stats(self) -> None:
        """torch.cuda.reset_accumulated_memory_stats()."""
        for stat in self._all_stats():
            stat.reset_accumulated()
        for key in self._counters:
            self._counters[key] = 0

    def mem_get_info(self) -> tuple[int, int]:
        """(free, total) as cudaMemGetInfo reports them."""
        used = self.driver_reserved_bytes + self._total_allocated_memory
        return max(self.capacity_bytes - used, 0), self.capacity_bytes

    @property
    def allocated_bytes(self) -> int:
        return self._allocated_bytes[_ALL].current

    @property
    def reserved_bytes(self) -> int:
        return self._reserved_bytes[_ALL].current

    @property
    def active_bytes(self) -> int:
        return self._active_bytes[_ALL].current

    @property
    def max_allocated_bytes(self) -> int:
        return self._allocated_bytes[_ALL].peak

    @property
    def max_reserved_bytes(self) -> int:
        return self._reserved_bytes[_ALL].peak

    def segments(self) -> list[dict]:
        """Debug view shaped like torch.cuda.memory_snapshot()'s segment entries."""
        heads = [b for b in self._iter_blocks() if b.prev is None]
        return [self._segment_info(head) for head in sorted(heads, key=lambda b: b.ptr)]

    # ------------------------------------------------------------ malloc internals

    def _get_free_list(self, is_small: bool, stream: Stream) -> _FreeList:
        key = (is_small, stream)
        free_list = self._free_lists.get(key)
        if free_list is None:
            free_list = self._free_lists[key] = _FreeList(is_small, stream)
        return free_list

    def _get_free_block(self, free_list: _FreeList, size: int) -> Block | None:
        """Best fit in this (pool, stream), or None (get_free_block)."""
        keys = free_list.keys
        index = bisect_left(keys, (size, 0))
        if index == len(keys):
            return None
        found_size, found_ptr = keys[index]
        # Never hand an oversize block to a normal request, and an oversize request
        # takes an oversize block only if it wastes < max_non_split_rounding_size.
        if size < self.max_split_size and found_size >= self.max_split_size:
            return None
        if size >= self.max_split_size and found_size >= size + self.max_non_split_rounding_size:
            return None
        del keys[index]
        return free_list.by_ptr.pop(found_ptr)

    def _alloc_with_retries(self, free_list: _FreeList, size: int, alloc_size: int) -> Block:
        """The malloc slow path: new segment, then the two cache-release retries, then OOM."""
        block = self._alloc_block(free_list, alloc_size, is_retry=False)
        if block is None and self._release_available_cached_blocks(free_list, size):
            block = self._alloc_block(free_list, alloc_size, is_retry=False)
        if block is None:
            self._release_cached_blocks()
            block = self._alloc_block(free_list, alloc_size, is_retry=True)
        if block is None:
            self._counters["num_ooms"] += 1
            raise AllocatorOutOfMemory(self._oom_message(alloc_size))
        return block

    def _alloc_block(self, free_list: _FreeList, alloc_size: int, is_retry: bool) -> Block | None:
        """cudaMalloc a new segment, or None if the device (or fraction cap) is full."""
        if is_retry:
            self._counters["num_alloc_retries"] += 1
        if not self._device_can_fit(alloc_size):
            return None
        ptr = self._next_address
        self._next_address += alloc_size
        self._total_allocated_memory += alloc_size
        for t in (_ALL, _SMALL if free_list.is_small else _LARGE):
            self._segment[t].increase(1)
            self._reserved_bytes[t].increase(alloc_size)
        if alloc_size >= self.max_split_size:
            self._oversize_segments.increase(1)
        self._counters["num_device_alloc"] += 1
        block = Block(alloc_size, free_list.stream, ptr, free_list)
        if self.observer is not None:
            self.observer("segment_alloc", block)
        return block

    def _device_can_fit(self, alloc_size: int) -> bool:
        reserved_after = self._total_allocated_memory + alloc_size
        if self.allowed_memory_maximum is not None and reserved_after > self.allowed_memory_maximum:
            return False
        return self.driver_reserved_bytes + reserved_after <= self.capacity_bytes

    def _should_split(self, block: Block, size: int) -> bool:
        remaining = block.size - size
        if block.free_list.is_small:
            return remaining >= K_MIN_BLOCK_SIZE
        # A large remainder of <= 1 MiB stays inside the allocated block (and counts
        # as allocated) rather than becoming a sliver only a small request could use.
        return size < self.max_split_size and remaining > K_SMALL_SIZE

    def _alloc_found_block(self, block: Block, size: int, requested: int, split: bool) -> Block:
        """Hand out ``block`` (cut to ``size`` when ``split``) and update statistics."""
        types = self._stat_types(block)
        already_split = block.is_split()
        if split:
            block = self._split_block(block, size, types, already_split)
        elif already_split:
            # A free piece of a split segment becomes active again.
            for t in types:
                self._inactive_split_bytes[t].decrease(block.size)
                self._inactive_split[t].decrease(1)
        block.allocated = True
        block.requested_size = requested
        self._active_blocks.add(block)
        amounts = (1, block.size, requested)
        for stat, which in self._on_alloc[block.free_list.is_small]:  # Stat.increase, inlined
            amount = amounts[which]
            current = stat.current + amount
            stat.current = current
            if current > stat.peak:
                stat.peak = current
            stat.allocated += amount
        if block.size >= self.max_split_size:
            self._oversize_allocations.increase(1)
        return block

    def _split_block(self, remaining: Block, size: int, types: tuple[int, int], already_split: bool) -> Block:
        """Cut the first ``size`` bytes off a free block; the rest goes back to the cache."""
        block = Block(size, remaining.stream, remaining.ptr, remaining.free_list)
        block.prev = remaining.prev
        if block.prev is not None:
            block.prev.next = block
        block.next = remaining
        remaining.prev = block
        remaining.ptr += size
        remaining.size -= size
        remaining.free_list.add(remaining)
        if already_split:
            # An inactive split block shrank by `size` bytes.
            for t in types:
                self._inactive_split_bytes[t].decrease(size)
        else:
            # A whole segment became split: its remainder is a new inactive split block.
            for t in types:
                self._inactive_split_bytes[t].increase(remaining.size)
                self._inactive_split[t].increase(1)
        return block

    # -------------------------------------------------------------- free internals

    def _free_block(self, block: Block) -> None:
        """Move a no-longer-used block into its cache, merging it with free neighbours."""
        original_size = block.size
        net_blocks = 0
        net_bytes = 0
        for neighbour in (block.prev, block.next):
            subsumed = self._try_merge_blocks(block, neighbour)
            if subsumed:
                net_blocks -= 1
                net_bytes -= subsumed
        self._active_blocks.discard(block)
        block.free_list.add(block)
        if block.is_split():
            net_blocks += 1
            net_bytes += block.size
        for t in self._stat_types(block):
            if net_blocks > 0:
                self._inactive_split[t].increase(net_blocks)
            elif net_blocks < 0:
                self._inactive_split[t].decrease(-net_blocks)
            if net_bytes > 0:
                self._inactive_split_bytes[t].increase(net_bytes)
            elif net_bytes < 0:
                self._inactive_split_bytes[t].decrease(-net_bytes)
            for stat, amount in (
                (self._active[t], 1),
                (self._active_bytes[t], original_size),
                (self._requested_bytes[t], block.requested_size),
            ):  # Stat.decrease, inlined
                stat.current -= amount
                stat.freed += amount

    def _try_merge_blocks(self, dst: Block, src: Block | None) -> int:
        """Absorb free neighbour ``src`` into ``dst``; returns the bytes absorbed (0: none)."""
        if src is None or src.allocated or src.stream_uses:
            return 0
        src.free_list.remove(src)
        if dst.prev is src:  # [src dst]
            dst.ptr = src.ptr
            dst.prev = src.prev
            if dst.prev is not None:
                dst.prev.next = dst
        else:  # [dst src]
            dst.next = src.next
            if dst.next is not None:
                dst.next.prev = dst
        dst.size += src.size
        return src.size

    def _process_events(self) -> None:
        """Blocks whose recorded streams have finished go back to their caches."""
        pending, self._pending_free = self._pending_free, []
        for block in pending:
            block.stream_uses = None
            self._free_block(block)

    # ------------------------------------------------------------ release internals

    def _release_cached_blocks(self) -> None:
        """cudaFree every cached segment that is not split (it holds no live block)."""
        self._counters["num_sync_all_streams"] += 1  # synchronize_and_free_events
        self._process_events()
        for is_small in (False, True):  # the C++ releases the large pool first
            for free_list in [fl for fl in self._free_lists.values() if fl.is_small == is_small]:
                for block in free_list.blocks():
                    if not block.is_split():
                        self._release_block(block)

    def _release_available_cached_blocks(self, free_list: _FreeList, size: int) -> bool:
        """Free just enough oversize cached blocks for ``size``; only with max_split_size set."""
        if self.max_split_size == SIZE_MAX:
            return False
        target = max(size, self.max_split_size)
        keys = free_list.keys
        index = bisect_left(keys, (target, 0))
        if index < len(keys):
            self._release_block(free_list.by_ptr[keys[index][1]])
            return True
        # No single block is big enough: free oversize blocks, largest first.
        released = 0
        while released < target and keys and keys[-1][0] >= self.max_split_size:
            block = free_list.by_ptr[keys[-1][1]]
            released += block.size
            self._release_block(block)
        return released >= target

    def _release_block(self, block: Block) -> None:
        """cudaFree one whole cached segment."""
        if self.observer is not None:
            self.observer("segment_free", block)
        block.free_list.remove(block)
        self._total_allocated_memory -= block.size
        for t in self._stat_types(block):
            self._segment[t].decrease(1)
            self._reserved_bytes[t].decrease(block.size)
        if block.size >= self.max_split_size:
            self._oversize_segments.decrease(1)
        self._counters["num_device_free"] += 1

    # ----------------------------------------------------------------- reporting

    def _oom_message(self, alloc_size: int) -> str:
        """The TORCH_CHECK_WITH(OutOfMemoryError, ...) text of DeviceCachingAllocator::malloc."""
        free, total = self.mem_get_info()
        allocated = self.allocated_bytes
        reserved = self.reserved_bytes
        proc_info = ""
        if self.include_process_info:
            proc_info = f"Including non-PyTorch memory, this process has {format_size(total - free)} memory in use. "
        allowed_info = ""
        if self.allowed_memory_maximum is not None:
            allowed_info = f"{format_size(self.allowed_memory_maximum)} allowed; "
        return (
            f"CUDA out of memory. Tried to allocate {format_size(alloc_size)}. "
            f"GPU {self.device_index} has a total capacity of {format_size(total)} "
            f"of which {format_size(free)} is free. {proc_info}{allowed_info}"
            f"Of the allocated memory {format_size(allocated)} is allocated by PyTorch, "
            f"and {format_size(reserved - allocated)} is reserved by PyTorch but unallocated."
            f"{_OOM_ADVICE}"
        )

    def _segment_info(self, head: Block) -> dict:
        blocks = []
        block: Block | None = head
        while block is not None:
            blocks.append(block)
            block = block.next
        return {
            "device": self.device_index,
            "address": head.ptr,
            "total_size": sum(b.size for b in blocks),
            "allocated_size": sum(b.size for b in blocks if b.allocated),
            "active_size": sum(b.size for b in blocks if b.allocated or b.stream_uses),
            "requested_size": sum(b.requested_size for b in blocks if b.allocated or b.stream_uses),
            "stream": head.stream,
            "segment_type": "small" if head.is_small else "large",
            "blocks": [
                {
                    "address": b.ptr,
                    "size": b.size,
                    "requested_size": b.requested_size,
                    "state": _block_state(b),
                }
                for b in blocks
            ],
        }

    def _iter_blocks(self) -> Iterator[Block]:
        for free_list in self._free_lists.values():
            yield from free_list.by_ptr.values()
        yield from self._active_blocks

    def _all_stats(self) -> Iterator[Stat]:
        for array in self._arrays.values():
            yield from array
        yield self._oversize_allocations
        yield self._oversize_segments

    @staticmethod
    def _stat_types(block: Block) -> tuple[int, int]:
        return (_ALL, _SMALL) if block.free_list.is_small else (_ALL, _LARGE)


def _block_state(block: Block) -> str:
    # The state names torch.cuda.memory_snapshot() uses.
    if block.allocated:
        return "active_allocated"
    if block.stream_uses:
        return "active_pending_free"
    return "inactive"
