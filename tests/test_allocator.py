"""Tests of the caching-allocator model against numbers derived by hand from the C++ rules.

The last test replays a random workload on a real CUDA device, when there is one,
and compares every statistic with torch.cuda.memory_stats() after every step.
"""
from __future__ import annotations

import random

import pytest

from phantom.memory import AllocatorOutOfMemory, CachingAllocator, format_size, get_allocation_size, round_size
from phantom.memory.allocator import GiB, MiB

DRIVER = 500 * MiB


def make(capacity: int = 80 * GiB, driver: int = DRIVER, **kwargs) -> CachingAllocator:
    return CachingAllocator(capacity, driver_reserved_bytes=driver, **kwargs)


def stat(a: CachingAllocator, key: str) -> int:
    return a.memory_stats()[key]


# ------------------------------------------------------------------ rounding / pools


@pytest.mark.parametrize(
    "request_bytes, rounded",
    [(1, 512), (511, 512), (512, 512), (513, 1024), (1000, 1024), (MiB, MiB), (MiB + 1, MiB + 512)],
)
def test_round_size(request_bytes: int, rounded: int) -> None:
    assert round_size(request_bytes) == rounded


def test_round_size_power2_divisions() -> None:
    # 1200 bytes with 4 divisions of [1024, 2048): 1024, 1280, 1536, 1792 -> 1280 (C++ comment).
    assert round_size(1200 * 1024, roundup_power2_divisions=4) == 1280 * 1024
    assert round_size(1024 * 1024, roundup_power2_divisions=4) == 1024 * 1024


@pytest.mark.parametrize(
    "rounded, segment",
    [
        (512, 2 * MiB),  # small pool
        (MiB, 2 * MiB),  # 1 MiB is still small
        (MiB + 512, 20 * MiB),  # large, < 10 MiB: shares a kLargeBuffer
        (10 * MiB - 512, 20 * MiB),
        (10 * MiB, 10 * MiB),  # >= kMinLargeAlloc: own segment, 2 MiB multiple
        (11 * MiB + 512, 12 * MiB),
        (100 * MiB + 512, 102 * MiB),
    ],
)
def test_segment_sizes(rounded: int, segment: int) -> None:
    assert get_allocation_size(rounded) == segment


def test_small_allocation_reserves_2mib_and_allocates_rounded_size() -> None:
    a = make()
    a.malloc(1000, stream=0)
    assert a.allocated_bytes == 1024
    assert a.reserved_bytes == 2 * MiB
    s = a.memory_stats()
    assert s["allocated_bytes.small_pool.current"] == 1024
    assert s["allocated_bytes.large_pool.current"] == 0
    assert s["requested_bytes.all.current"] == 1000
    assert s["segment.small_pool.current"] == 1
    assert s["inactive_split_bytes.all.current"] == 2 * MiB - 1024
    assert s["num_device_alloc"] == 1


def test_pool_boundary_1mib() -> None:
    a = make()
    a.malloc(MiB, 0)  # small: 2 MiB segment
    assert stat(a, "reserved_bytes.small_pool.current") == 2 * MiB
    a.malloc(MiB + 1, 0)  # large: 20 MiB segment
    assert stat(a, "reserved_bytes.large_pool.current") == 20 * MiB
    assert a.reserved_bytes == 22 * MiB


# ------------------------------------------------------------------ reuse and streams


def test_second_small_allocation_shares_the_segment() -> None:
    a = make()
    a.malloc(1000, 0)
    a.malloc(1000, 0)
    assert a.reserved_bytes == 2 * MiB
    assert a.allocated_bytes == 2048
    assert stat(a, "num_device_alloc") == 1


def test_reuse_after_free_on_same_stream() -> None:
    a = make()
    b = a.malloc(4 * MiB, 0)
    ptr = b.ptr
    a.free(b)
    assert a.allocated_bytes == 0
    assert a.reserved_bytes == 20 * MiB  # cached, not returned to the device
    b2 = a.malloc(4 * MiB, 0)
    assert b2.ptr == ptr
    assert a.reserved_bytes == 20 * MiB
    assert stat(a, "num_device_alloc") == 1


def test_no_reuse_across_streams() -> None:
    a = make()
    a.free(a.malloc(4 * MiB, stream=0))
    a.malloc(4 * MiB, stream=1)
    assert a.reserved_bytes == 40 * MiB
    assert stat(a, "num_device_alloc") == 2
    a.free(a.malloc(1000, stream=0))
    a.malloc(1000, stream=7)
    assert stat(a, "reserved_bytes.small_pool.current") == 4 * MiB


def test_best_fit_picks_smallest_sufficient_block() -> None:
    a = make()
    big = a.malloc(30 * MiB, 0)  # own 30 MiB segment
    small = a.malloc(12 * MiB, 0)  # own 12 MiB segment
    a.free(big)
    a.free(small)
    got = a.malloc(11 * MiB, 0)  # both fit; 12 MiB is the best fit
    assert got.ptr == small.ptr
    # 12 MiB - (11 MiB) = 1 MiB remainder is not > 1 MiB: not split, whole block allocated.
    assert got.size == 12 * MiB
    assert a.allocated_bytes == 12 * MiB


# ------------------------------------------------------------------ split and coalesce


def test_large_remainder_of_1mib_is_not_split() -> None:
    a = make()
    b = a.malloc(19 * MiB, 0)  # 20 MiB segment, remainder exactly 1 MiB: kept inside
    assert b.size == 20 * MiB
    assert a.allocated_bytes == 20 * MiB
    assert stat(a, "requested_bytes.all.current") == 19 * MiB
    assert stat(a, "inactive_split.all.current") == 0


def test_large_remainder_over_1mib_is_split() -> None:
    a = make()
    b = a.malloc(18 * MiB + 1, 0)  # rounds to 18 MiB + 512, remainder 2 MiB - 512 > 1 MiB
    assert b.size == 18 * MiB + 512
    assert stat(a, "inactive_split_bytes.large_pool.current") == 2 * MiB - 512


def test_small_pool_splits_down_to_512_bytes() -> None:
    a = make()
    x = a.malloc(MiB, 0)
    y = a.malloc(MiB - 512, 0)  # leaves exactly 512 bytes: still split (>= kMinBlockSize)
    z = a.malloc(512, 0)  # takes the last 512 bytes exactly
    assert (x.size, y.size, z.size) == (MiB, MiB - 512, 512)
    assert a.reserved_bytes == 2 * MiB
    assert a.allocated_bytes == 2 * MiB
    assert stat(a, "inactive_split.all.current") == 0
    assert [b.ptr for b in (x, y, z)] == [x.ptr, x.ptr + MiB, x.ptr + 2 * MiB - 512]


def test_split_and_coalesce_track_inactive_split() -> None:
    a = make()
    b1, b2, b3 = (a.malloc(4 * MiB, 0) for _ in range(3))  # one 20 MiB segment, 8 MiB tail
    assert a.reserved_bytes == 20 * MiB
    assert stat(a, "inactive_split.all.current") == 1
    assert stat(a, "inactive_split_bytes.all.current") == 8 * MiB

    a.free(b2)  # hole between b1 and b3: two inactive split blocks (4 + 8 MiB)
    assert stat(a, "inactive_split.all.current") == 2
    assert stat(a, "inactive_split_bytes.all.current") == 12 * MiB

    a.free(b1)  # merges with b2 into one 8 MiB block
    assert stat(a, "inactive_split.all.current") == 2
    assert stat(a, "inactive_split_bytes.all.current") == 16 * MiB

    a.free(b3)  # merges both neighbours: the segment is whole again
    assert stat(a, "inactive_split.all.current") == 0
    assert stat(a, "inactive_split_bytes.all.current") == 0
    (segment,) = a.segments()
    assert [blk["size"] for blk in segment["blocks"]] == [20 * MiB]
    assert stat(a, "inactive_split_bytes.all.peak") == 16 * MiB


def test_whole_free_segment_is_reused_for_a_larger_request() -> None:
    a = make()
    for b in [a.malloc(4 * MiB, 0) for _ in range(5)]:
        a.free(b)
    b = a.malloc(9 * MiB, 0)  # the coalesced 20 MiB segment serves it, no new cudaMalloc
    assert a.reserved_bytes == 20 * MiB
    assert b.size == 9 * MiB
    assert stat(a, "num_device_alloc") == 1


# ------------------------------------------------------------------ peaks and stats


def test_peak_tracking_and_reset() -> None:
    a = make()
    x = a.malloc(4 * MiB, 0)
    y = a.malloc(4 * MiB, 0)
    a.free(x)
    a.free(y)
    assert a.allocated_bytes == 0
    assert a.max_allocated_bytes == 8 * MiB
    assert a.max_reserved_bytes == 20 * MiB
    a.empty_cache()
    assert a.reserved_bytes == 0
    assert a.max_reserved_bytes == 20 * MiB
    a.reset_peak_stats()
    assert a.max_allocated_bytes == 0
    assert a.max_reserved_bytes == 0
    a.malloc(1000, 0)
    assert a.max_allocated_bytes == 1024
    assert a.max_reserved_bytes == 2 * MiB


def test_reset_peak_keeps_current_value() -> None:
    a = make()
    a.malloc(30 * MiB, 0)
    a.free(a.malloc(50 * MiB, 0))
    a.reset_peak_stats()
    assert a.max_allocated_bytes == 30 * MiB
    assert a.max_reserved_bytes == 80 * MiB


def test_stats_key_names_match_torch() -> None:
    s = make().memory_stats()
    for name in (
        "allocation",
        "segment",
        "active",
        "inactive_split",
        "allocated_bytes",
        "reserved_bytes",
        "active_bytes",
        "inactive_split_bytes",
        "requested_bytes",
    ):
        for pool in ("all", "small_pool", "large_pool"):
            for metric in ("current", "peak", "allocated", "freed"):
                assert f"{name}.{pool}.{metric}" in s
    for key in (
        "num_alloc_retries",
        "num_ooms",
        "num_sync_all_streams",
        "num_device_alloc",
        "num_device_free",
        "oversize_allocations.current",
        "oversize_segments.peak",
    ):
        assert key in s
    assert s["max_split_size"] == -1  # SIZE_MAX cast to int64, as torch reports it
    assert list(s) == sorted(s)  # torch.cuda.memory_stats sorts its keys
    assert all(v == 0 for k, v in s.items() if k != "max_split_size")


def test_accumulated_counters() -> None:
    a = make()
    x = a.malloc(1000, 0)
    a.free(x)
    a.malloc(2000, 0)
    s = a.memory_stats()
    assert s["allocated_bytes.all.allocated"] == 1024 + 2048
    assert s["allocated_bytes.all.freed"] == 1024
    assert s["allocation.all.allocated"] == 2
    a.reset_accumulated_stats()
    assert stat(a, "allocated_bytes.all.allocated") == 0
    assert stat(a, "allocated_bytes.all.current") == 2048


def test_zero_byte_allocation() -> None:
    a = make()
    b = a.malloc(0, 0)
    assert b.size == 0
    assert a.allocated_bytes == 0 and a.reserved_bytes == 0
    a.free(b)
    assert all(v == 0 for k, v in a.memory_stats().items() if k != "max_split_size")


def test_double_free_is_rejected() -> None:
    a = make()
    b = a.malloc(1000, 0)
    a.free(b)
    with pytest.raises(ValueError):
        a.free(b)


# ------------------------------------------------------------------ empty_cache / device


def test_empty_cache_releases_only_segments_without_live_blocks() -> None:
    a = make()
    keep = a.malloc(4 * MiB, 0)  # segment A, stays split while `keep` lives
    a.free(a.malloc(4 * MiB, 1))  # segment B (other stream), fully free
    a.free(a.malloc(1000, 0))  # small segment, fully free
    assert a.reserved_bytes == 42 * MiB
    a.empty_cache()
    assert a.reserved_bytes == 20 * MiB
    s = a.memory_stats()
    assert s["num_device_free"] == 2
    assert s["segment.all.current"] == 1
    assert s["num_sync_all_streams"] == 1
    a.free(keep)
    a.empty_cache()
    assert a.reserved_bytes == 0


def test_mem_get_info() -> None:
    a = make(capacity=80 * GiB, driver=500 * MiB)
    assert a.mem_get_info() == (80 * GiB - 500 * MiB, 80 * GiB)
    a.malloc(1000, 0)
    assert a.mem_get_info() == (80 * GiB - 502 * MiB, 80 * GiB)


def test_device_malloc_fits_exactly_at_capacity() -> None:
    a = make(capacity=DRIVER + 40 * MiB)
    a.malloc(40 * MiB, 0)
    assert a.mem_get_info()[0] == 0


# ------------------------------------------------------------------ OOM


def test_oom_retry_releases_cached_blocks_then_succeeds() -> None:
    a = make(capacity=DRIVER + 40 * MiB)
    a.free(a.malloc(4 * MiB, stream=0))  # cached 20 MiB segment on stream 0
    a.free(a.malloc(4 * MiB, stream=1))  # stream 1 cannot reuse it: second segment
    assert a.reserved_bytes == 40 * MiB
    b = a.malloc(30 * MiB, stream=0)  # 30 MiB segment does not fit next to 40 MiB cached
    assert b.size == 30 * MiB
    assert a.reserved_bytes == 30 * MiB
    s = a.memory_stats()
    assert s["num_alloc_retries"] == 1
    assert s["num_device_free"] == 2
    assert s["num_device_alloc"] == 3
    assert s["num_ooms"] == 0
    assert s["reserved_bytes.all.peak"] == 40 * MiB


def test_real_oom_raises_pytorch_message() -> None:
    a = make(capacity=DRIVER + 100 * MiB)
    a.malloc(5 * MiB, 0)  # 20 MiB segment, 15 MiB of it cached but unallocated
    with pytest.raises(AllocatorOutOfMemory) as info:
        a.malloc(90 * MiB, 0)
    assert info.value.message == (
        "CUDA out of memory. Tried to allocate 90.00 MiB. GPU 0 has a total capacity of "
        "600.00 MiB of which 80.00 MiB is free. Including non-PyTorch memory, this process "
        "has 520.00 MiB memory in use. Of the allocated memory 5.00 MiB is allocated by "
        "PyTorch, and 15.00 MiB is reserved by PyTorch but unallocated. If reserved but "
        "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
        "to avoid fragmentation.  See documentation for Memory Management  "
        "(https://docs.pytorch.org/docs/stable/notes/cuda.html"
        "#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)"
    )
    assert str(info.value) == info.value.message
    s = a.memory_stats()
    assert s["num_ooms"] == 1
    assert s["num_alloc_retries"] == 1
    # The failed request changed nothing else; the allocator keeps working.
    assert a.allocated_bytes == 5 * MiB and a.reserved_bytes == 20 * MiB
    a.malloc(10 * MiB, 0)  # fits in the cached 15 MiB remainder
    assert a.reserved_bytes == 20 * MiB


def test_oom_message_reports_segment_size_not_request() -> None:
    # PyTorch prints format_size(alloc_size): a 1000-byte request that needs a new
    # small segment says "Tried to allocate 2.00 MiB".
    a = make(capacity=DRIVER + 1 * MiB, include_process_info=False)
    with pytest.raises(AllocatorOutOfMemory) as info:
        a.malloc(1000, 0)
    assert info.value.message.startswith(
        "CUDA out of memory. Tried to allocate 2.00 MiB. GPU 0 has a total capacity of "
        "501.00 MiB of which 1024.00 KiB is free. Of the allocated memory 0 bytes is allocated"
    )


def test_oom_message_in_gib() -> None:
    # H100 80GB HBM3 as cudaMemGetInfo reports it, default non-PyTorch memory (767 MiB):
    # free = 85,017,493,504 - 767 MiB - 70 GiB = 9,051,308,032 B = 8.43 GiB;
    # in use by the process = 70 GiB + 767 MiB = 70.75 GiB.
    a = CachingAllocator(85_017_493_504, device_index=3)
    a.malloc(70 * GiB, 0)
    with pytest.raises(AllocatorOutOfMemory) as info:
        a.malloc(10 * GiB, 0)
    msg = info.value.message
    assert msg.startswith(
        "CUDA out of memory. Tried to allocate 10.00 GiB. GPU 3 has a total capacity of 79.18 GiB "
        "of which 8.43 GiB is free. Including non-PyTorch memory, this process has 70.75 GiB memory "
        "in use. Of the allocated memory 70.00 GiB is allocated by PyTorch, and 0 bytes is reserved "
        "by PyTorch but unallocated."
    )


def test_memory_fraction_caps_reserved() -> None:
    a = make(capacity=1 * GiB, driver=0)
    a.set_memory_fraction(0.5)
    a.malloc(500 * MiB, 0)
    with pytest.raises(AllocatorOutOfMemory) as info:
        a.malloc(20 * MiB, 0)
    assert "is free. Including non-PyTorch memory, this process has 500.00 MiB memory in use. 512.00 MiB allowed; Of the" in info.value.message


def test_over_one_exabyte() -> None:
    with pytest.raises(AllocatorOutOfMemory, match="more than 1EB"):
        make().malloc(1 << 60, 0)


# ------------------------------------------------------------------ max_split_size hook


def test_max_split_size_keeps_oversize_blocks_whole() -> None:
    a = make(max_split_size=100 * MiB)
    assert stat(a, "max_split_size") == 100 * MiB
    big = a.malloc(200 * MiB, 0)
    assert stat(a, "oversize_allocations.current") == 1
    assert stat(a, "oversize_segments.current") == 1
    a.free(big)
    a.malloc(50 * MiB, 0)  # may not take the oversize cached block
    assert a.reserved_bytes == 250 * MiB
    b = a.malloc(190 * MiB, 0)  # oversize request may round up by < 20 MiB: reuses it
    assert b.ptr == big.ptr and b.size == 200 * MiB
    assert a.reserved_bytes == 250 * MiB


def test_max_split_size_releases_only_what_is_needed() -> None:
    a = make(capacity=DRIVER + 250 * MiB, max_split_size=100 * MiB)
    a.free(a.malloc(200 * MiB, 0))
    a.free(a.malloc(1000, 0))  # a cached small segment that release_cached_blocks would free
    a.malloc(60 * MiB, 0)  # needs room: frees the 200 MiB oversize block, no full flush
    s = a.memory_stats()
    assert s["num_device_free"] == 1
    assert s["num_alloc_retries"] == 0
    assert s["num_sync_all_streams"] == 0
    assert a.reserved_bytes == 62 * MiB


# ------------------------------------------------------------------ record_stream


def test_record_stream_delays_reuse_until_next_malloc() -> None:
    a = make()
    b = a.malloc(4 * MiB, stream=0)
    ptr = b.ptr
    a.record_stream(b, 1)
    a.free(b)
    s = a.memory_stats()
    assert s["allocated_bytes.all.current"] == 0  # freed for the caller...
    assert s["active_bytes.all.current"] == 4 * MiB  # ...but still in use by stream 1
    assert [blk["state"] for blk in a.segments()[0]["blocks"]] == ["active_pending_free", "inactive"]
    c = a.malloc(4 * MiB, stream=0)  # stream 1's work is done by now: block is reused
    assert c.ptr == ptr
    assert stat(a, "active_bytes.all.current") == 4 * MiB
    assert a.reserved_bytes == 20 * MiB


def test_record_stream_on_own_stream_is_ignored() -> None:
    a = make()
    b = a.malloc(4 * MiB, stream=2)
    a.record_stream(b, 2)
    a.free(b)
    assert stat(a, "active_bytes.all.current") == 0


def test_empty_cache_waits_for_pending_blocks() -> None:
    a = make()
    b = a.malloc(4 * MiB, stream=0)
    a.record_stream(b, 1)
    a.free(b)
    a.empty_cache()
    assert a.reserved_bytes == 0


# ------------------------------------------------------------------ format_size


@pytest.mark.parametrize(
    "size, text",
    [
        (0, "0 bytes"),
        (1024, "1024 bytes"),
        (1025, "1.00 KiB"),
        (MiB, "1024.00 KiB"),
        (2 * MiB, "2.00 MiB"),
        (GiB, "1024.00 MiB"),
        (2 * GiB, "2.00 GiB"),
        (81559 * MiB, "79.65 GiB"),
    ],
)
def test_format_size(size: int, text: str) -> None:
    assert format_size(size) == text


# ------------------------------------------------------------------ invariants under load


def _check_invariants(a: CachingAllocator) -> None:
    s = a.memory_stats()
    segments = a.segments()
    assert sum(seg["total_size"] for seg in segments) == a.reserved_bytes == s["reserved_bytes.all.current"]
    assert sum(seg["allocated_size"] for seg in segments) == a.allocated_bytes
    assert len(segments) == s["segment.all.current"]
    for seg in segments:
        offset = seg["address"]
        for blk in seg["blocks"]:  # blocks tile the segment without gaps
            assert blk["address"] == offset
            offset += blk["size"]
        assert offset == seg["address"] + seg["total_size"]
        states = [blk["state"] for blk in seg["blocks"]]
        # Coalescing: two free neighbours never stay separate.
        assert all(not (x == y == "inactive") for x, y in zip(states, states[1:]))
    split_free = [
        blk for seg in segments if len(seg["blocks"]) > 1 for blk in seg["blocks"] if blk["state"] == "inactive"
    ]
    assert len(split_free) == s["inactive_split.all.current"]
    assert sum(blk["size"] for blk in split_free) == s["inactive_split_bytes.all.current"]
    for pool in ("small_pool", "large_pool"):
        assert s[f"allocated_bytes.{pool}.current"] <= s[f"active_bytes.{pool}.current"]
        assert s[f"active_bytes.{pool}.current"] <= s[f"reserved_bytes.{pool}.current"]
    free, total = a.mem_get_info()
    assert free + a.reserved_bytes + a.driver_reserved_bytes == total


def test_random_workload_keeps_invariants() -> None:
    rng = random.Random(1234)
    a = make(capacity=DRIVER + 2 * GiB)
    live = []
    for step in range(3000):
        r = rng.random()
        if r < 0.55 or not live:
            size = rng.choice([rng.randint(1, 4096), rng.randint(4097, MiB), rng.randint(MiB, 12 * MiB), rng.randint(12 * MiB, 200 * MiB)])
            try:
                block = a.malloc(size, stream=rng.randint(0, 2))
            except AllocatorOutOfMemory:
                continue
            if rng.random() < 0.05:
                a.record_stream(block, 9)
            live.append(block)
        elif r < 0.99:
            a.free(live.pop(rng.randrange(len(live))))
        else:
            a.empty_cache()
        if step % 50 == 0:
            _check_invariants(a)
    for block in live:
        a.free(block)
    a.empty_cache()
    assert a.reserved_bytes == 0 and a.allocated_bytes == 0
    assert stat(a, "inactive_split_bytes.all.current") == 0


# ------------------------------------------------------------------ against a real GPU


def _cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # noqa: BLE001 - no torch, or a broken CUDA install
        return False


@pytest.mark.skipif(not _cuda_available(), reason="needs a CUDA device")
def test_matches_real_caching_allocator() -> None:
    """Replay one random workload on the real allocator and on the model; compare all stats."""
    import torch

    torch.cuda.init()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.reset_accumulated_memory_stats()
    free, total = torch.cuda.mem_get_info()
    model = CachingAllocator(total, driver_reserved_bytes=total - free)
    streams = [torch.cuda.current_stream(), torch.cuda.Stream(), torch.cuda.Stream()]
    rng = random.Random(7)
    live: list[tuple[torch.Tensor, object]] = []

    def compare(step: int, what: str) -> None:
        real = torch.cuda.memory_stats()
        mine = model.memory_stats()
        diffs = {k: (real[k], mine[k]) for k in real if k in mine and real[k] != mine[k]}
        assert not diffs, f"step {step} ({what}): (real, model) differ: {diffs}"

    for step in range(600):
        r = rng.random()
        if r < 0.55 or not live:
            size = rng.choice([rng.randint(1, 4096), rng.randint(4097, MiB), rng.randint(MiB, 12 * MiB), rng.randint(12 * MiB, 64 * MiB)])
            s = rng.randrange(len(streams))
            with torch.cuda.stream(streams[s]):
                live.append((torch.empty(size, dtype=torch.uint8, device="cuda"), model.malloc(size, stream=s)))
            if rng.random() < 0.1:
                other = (s + 1) % len(streams)
                live[-1][0].record_stream(streams[other])
                model.record_stream(live[-1][1], other)
            what = f"malloc {size} on stream {s}"
        elif r < 0.98:
            t, b = live.pop(rng.randrange(len(live)))
            del t
            model.free(b)
            what = f"free {b.requested_size}"
        else:
            torch.cuda.empty_cache()
            model.empty_cache()
            what = "empty_cache"
        compare(step, what)

    # A request larger than the device, with live blocks and cached segments on both
    # sides: both fail with the same message.  Non-PyTorch memory grows a little as
    # the process runs (streams, events), so take it from the driver right now.
    free_now, _ = torch.cuda.mem_get_info()
    model.driver_reserved_bytes = total - free_now - torch.cuda.memory_reserved()
    model_msg = real_msg = None
    try:
        torch.empty(total, dtype=torch.uint8, device="cuda")
    except torch.OutOfMemoryError as e:
        real_msg = str(e).splitlines()[0]
    try:
        model.malloc(total, stream=0)
    except AllocatorOutOfMemory as e:
        model_msg = e.message
    print("\nreal :", real_msg, "\nmodel:", model_msg)
    assert real_msg is not None and model_msg is not None

    def strip_process(msg: str) -> str:  # NVML's per-process figure is not ours to match
        head, _, tail = msg.partition(" is free. ")
        return head + " is free. " + tail[tail.find("Of the allocated") :]

    assert strip_process(real_msg) == strip_process(model_msg)
    compare(-1, "after OOM")
    while live:  # free in one order on both sides (list.clear() would go last-to-first)
        t, b = live.pop()
        del t
        model.free(b)
    torch.cuda.empty_cache()
    model.empty_cache()
    compare(-2, "after freeing everything")


def test_memory_history_records_the_allocators_events():
    from phantom.memory.history import MemoryHistory

    alloc = CachingAllocator(80 * 2**30)
    clock = iter(range(0, 10**9, 1000))
    history = MemoryHistory(alloc, lambda: next(clock))
    alloc.free(alloc.malloc(100))  # before recording: not in the trace
    history.start(max_entries=100)
    block = alloc.malloc(3 * 2**20)  # a new large segment, then the block in it
    size = block.size  # a Block object is recycled once freed
    kept = alloc.malloc(512)
    alloc.free(block)
    snap = history.snapshot()
    actions = [e["action"] for e in snap["device_traces"][0]]
    assert actions == ["segment_alloc", "alloc", "alloc", "free_requested", "free_completed"]
    assert snap["device_traces"][0][1]["size"] == size
    assert snap["device_traces"][0][1]["frames"][0]["name"] == "test_memory_history_records_the_allocators_events"
    live = [b for seg in snap["segments"] for b in seg["blocks"] if b["state"] == "active_allocated"]
    assert [b["address"] for b in live] == [kept.ptr] and live[0]["frames"]
    history.start(enabled=None)
    alloc.malloc(1024)
    assert len(history.snapshot()["device_traces"][0]) == 5  # stopped
