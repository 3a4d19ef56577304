"""Rank processes on a Ray cluster (`phantom run --executor ray [--ray-address ADDR]`).

The launcher process stays the driver: it runs the coordinator and the network model (on a
TCP socket instead of a Unix one) and hosts the TCPStore the ranks rendezvous on, as
torchrun's agent does (TORCHELASTIC_USE_AGENT_STORE). Each rank is a Ray actor that starts
`python -m phantom.launcher.bootstrap` with the rank's environment, streams its output lines
back through a Ray queue, and reports its exit code. The user's script must be at the same
path on every Ray node (as for torchrun on several hosts).

Actors ask for no CPU (`num_cpus=0`): the ranks of a run must all be alive at once (they wait
for each other in collectives), so Ray must not queue them behind a CPU count.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from typing import Callable

from phantom.launcher.lifetime import started_by_me

# Line sink: (rank, "out" | "err", raw line) -> None
Sink = Callable[[int, str, bytes], None]


def _ray():
    try:
        import ray
    except ImportError:
        raise RuntimeError("--executor ray needs Ray: pip install 'phantom-sim[ray]' "
                           "(or pip install ray)") from None
    return ray


def _rank_actor_class():
    ray = _ray()

    @ray.remote(num_cpus=0, max_concurrency=2)
    class RankActor:
        """One simulated rank: a bootstrap process on whichever node Ray placed this actor."""

        def __init__(self) -> None:
            self._proc: subprocess.Popen | None = None

        def run(self, rank: int, env: dict[str, str], lines) -> int:
            # the rank dies with this actor, even if Ray kills it (launcher.lifetime)
            full = started_by_me({**os.environ, **env})
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "phantom.launcher.bootstrap"], env=full,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
            pumps = [threading.Thread(target=_pump_to_queue, args=(stream, rank, tag, lines))
                     for stream, tag in ((self._proc.stdout, "out"), (self._proc.stderr, "err"))]
            for p in pumps:
                p.start()
            code = self._proc.wait()
            for p in pumps:
                p.join()
            return code

        def kill(self) -> None:
            if self._proc is not None and self._proc.poll() is None:
                import signal

                try:
                    os.killpg(self._proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    return RankActor


def _pump_to_queue(stream, rank: int, tag: str, lines) -> None:
    """Lines in small batches: one queue call per 50 ms or 200 lines, not per line."""
    batch: list = []
    last = time.monotonic()
    for line in iter(stream.readline, b""):
        batch.append((rank, tag, line))
        if len(batch) >= 200 or time.monotonic() - last > 0.05:
            lines.put_nowait_batch(batch)
            batch, last = [], time.monotonic()
    if batch:
        lines.put_nowait_batch(batch)
    stream.close()


class RayExecutor:
    def __init__(self, address: str | None, sink: Sink) -> None:
        ray = _ray()
        from ray.util.queue import Queue

        self._ray = ray
        if not ray.is_initialized():
            ray.init(address=address, log_to_driver=False, include_dashboard=False,
                     logging_level="ERROR")
        self.node_ip = ray.util.get_node_ip_address()
        self._lines = Queue()
        self._actor_class = _rank_actor_class()
        self._sink = sink
        self._stop = threading.Event()
        self._flush_lock = threading.Lock()
        self._drain_thread = threading.Thread(target=self._drain, daemon=True, name="phantom-ray-output")
        self._drain_thread.start()

    def start(self, rank: int, env: dict[str, str]) -> "RayRank":
        actor = self._actor_class.options(scheduling_strategy="SPREAD").remote()
        return RayRank(self, actor, actor.run.remote(rank, env, self._lines), rank)

    def _drain(self) -> None:
        while not self._stop.is_set():
            self._flush(timeout=0.1)

    def _flush(self, timeout: float) -> None:
        with self._flush_lock:  # lines in order, whoever drains
            try:
                batch = self._lines.get_nowait_batch(max(1, self._lines.qsize()))
            except Exception:  # empty queue, or Ray going down at the end
                batch = []
            for rank, tag, line in batch:
                self._sink(rank, tag, line)
        if not batch:
            time.sleep(timeout)

    def flush(self) -> None:
        """Everything the actors have sent so far reaches the terminal and the logs."""
        self._flush(timeout=0)

    def close(self) -> None:
        self._stop.set()
        self._drain_thread.join(timeout=2)
        self._flush(timeout=0)  # the last lines of the last ranks
        self._ray.shutdown()


class RayRank:
    """What the launcher uses of `subprocess.Popen`, for a rank running in a Ray actor."""

    def __init__(self, executor: RayExecutor, actor, result_ref, rank: int) -> None:
        self._executor = executor
        self._ray = executor._ray
        self._actor = actor
        self._ref = result_ref
        self.rank = rank
        self.returncode: int | None = None
        self._killed = False  # by the launcher, which ends the run: not a failure to report

    def poll(self) -> int | None:
        if self.returncode is None:
            done, _ = self._ray.wait([self._ref], timeout=0)
            if done:
                self.returncode = self._result()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            done, _ = self._ray.wait([self._ref], timeout=timeout)
            if not done:
                raise subprocess.TimeoutExpired(f"rank {self.rank}", timeout)
            self.returncode = self._result()
        return self.returncode

    def _result(self) -> int:
        # The actor queued all of the rank's output before returning: drain it, so that a
        # failure report shows the rank's last lines.
        self._executor.flush()
        try:
            return int(self._ray.get(self._ref))
        except Exception as e:  # the actor died (node lost, killed): a failed rank
            if self._killed:
                return -signal.SIGKILL  # as a local rank's process group is killed
            print(f"phantom: rank {self.rank}'s Ray actor failed: {e}", file=sys.stderr)
            return 1

    def kill_rank(self) -> None:
        if self.poll() is None:
            self._killed = True
            try:
                self._ray.get(self._actor.kill.remote(), timeout=10)
            except Exception:
                pass
            self._ray.kill(self._actor)
