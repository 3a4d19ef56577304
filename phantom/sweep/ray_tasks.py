"""`phantom sweep --executor ray`: each point's `phantom run` as a Ray task on some node.

A task runs the same `phantom run` command a local point runs (executors.run_point_process),
from the same working directory, on the node Ray places it on: the script and the spec's files
must be at the same paths there, as for `phantom run --executor ray`. The config copies and a
host profile the point replays travel with the task; the report and a host profile the point
saves come back, and the sweep writes them under OUT/points/ here.
"""
from __future__ import annotations

import threading
from pathlib import Path

from phantom.sweep.executors import PointCall, PointOutput, Stopped


class RayPoints:
    """Runs points as Ray tasks; `stop` cancels the ones in flight and starts no more."""

    def __init__(self, address: str | None) -> None:
        try:
            import ray
        except ImportError:
            from phantom.sweep.runner import SweepRunError

            raise SweepRunError("--executor ray needs Ray: pip install 'phantom-sim[ray]'") from None
        self._ray = ray
        if not ray.is_initialized():
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
        self._task = ray.remote(num_cpus=1, max_retries=0)(_run_on_node)
        self._in_flight: set = set()
        self._lock = threading.Lock()
        self._stopping = False

    def __call__(self, call: PointCall) -> PointOutput:
        with self._lock:
            if self._stopping:
                raise Stopped()
            ref = self._task.remote(call)
            self._in_flight.add(ref)
        try:
            output = self._ray.get(ref)
        except self._ray.exceptions.TaskCancelledError:
            raise Stopped() from None
        finally:
            with self._lock:
                self._in_flight.discard(ref)
        for path, data in output.brought.items():
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_bytes(data)
        return output

    def stop(self) -> None:
        """Cancel the points in flight (force: their workers end, and with them the `phantom
        run` each started: it dies with its starter)."""
        with self._lock:
            self._stopping = True
            refs = list(self._in_flight)
        for ref in refs:
            self._ray.cancel(ref, force=True)


def _run_on_node(call: PointCall) -> PointOutput:
    from phantom.sweep.executors import run_point_process

    return run_point_process(call)
