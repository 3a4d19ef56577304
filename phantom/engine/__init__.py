"""The event engine: a virtual host clock and per-stream GPU timelines for one simulated GPU.

Interception calls `launch` for every kernel and `wait_*`/`synchronize_*` at sync points;
the engine owns all simulated time. Times are nanoseconds since the simulation started.
"""
from phantom.engine.timeline import Event, KernelRecord, Stream, Timeline

__all__ = ["Event", "KernelRecord", "Stream", "Timeline"]
