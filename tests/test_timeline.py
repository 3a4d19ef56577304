"""The event engine: launch queues, events, stream waits and host sync points."""
from phantom.engine import Event, Timeline
from phantom.engine.timeline import LAUNCH_LATENCY_NS, MAX_PENDING_KERNELS


def test_host_runs_ahead_until_synchronize():
    tl = Timeline()
    for _ in range(10):
        tl.launch(0, gpu_ns=1_000_000, host_ns=5_000)
    assert tl.host_ns == 50_000  # the host only paid launch costs
    assert tl.stream(0).ready_ns == LAUNCH_LATENCY_NS + 5_000 + 10 * 1_000_000
    tl.synchronize_device()
    assert tl.host_ns == tl.stream(0).ready_ns


def test_gpu_waits_for_a_slow_host():
    tl = Timeline()
    tl.launch(0, gpu_ns=1_000, host_ns=0)
    tl.advance_host(1_000_000)  # the script spends 1 ms in Python
    start, end = tl.launch(0, gpu_ns=1_000, host_ns=0)
    assert start == 1_000_000 + LAUNCH_LATENCY_NS and end == start + 1_000


def test_event_elapsed_and_cross_stream_wait():
    tl = Timeline()
    begin, done = Event(True), Event(True)
    tl.record_event(begin, 0)
    tl.launch(1, gpu_ns=2_000_000, host_ns=0)  # side stream: 2 ms of work
    tl.record_event(done, 1)
    tl.stream_wait_event(0, done)
    _, end = tl.launch(0, gpu_ns=1_000, host_ns=0)
    assert end == done.time_ns + 1_000  # the main stream waited for the side stream's event
    assert done.time_ns - begin.time_ns >= 2_000_000


def test_compute_kernels_of_two_streams_share_the_sms():
    tl = Timeline()
    _, end_a = tl.launch(1, gpu_ns=1_000_000, host_ns=0)
    start_b, _ = tl.launch(2, gpu_ns=1_000_000, host_ns=0)
    assert start_b == end_a
    # A copy-engine transfer overlaps with compute.
    start_c, _ = tl.launch(3, gpu_ns=1_000, host_ns=0, uses_sms=False)
    assert start_c < end_a


def test_waiting_on_an_unrecorded_event_is_a_no_op():
    tl = Timeline()
    tl.stream_wait_event(0, Event())
    assert tl.stream(0).ready_ns == 0.0


def test_launch_queue_limit_blocks_the_host():
    tl = Timeline()
    for _ in range(MAX_PENDING_KERNELS + 10):
        tl.launch(0, gpu_ns=1_000_000, host_ns=1_000)
    # Without the limit the host would be at ~1 ms; with it, it waited for kernels to finish.
    assert tl.host_ns > 9 * 1_000_000


def test_gpu_busy_counts_overlap_once():
    tl = Timeline()
    tl.launch(0, gpu_ns=1_000, host_ns=0, uses_sms=False)
    tl.launch(1, gpu_ns=1_000, host_ns=0, uses_sms=False)
    assert tl.gpu_busy_ns == 1_000
