"""A rank's connection to the coordinator."""
from __future__ import annotations

import os
import threading
from collections.abc import Callable
from multiprocessing.connection import Client

from phantom.distributed.wire import ENV_ADDRESS, ENV_AUTHKEY, Abort, Request, Result
from phantom.errors import RunStopped


class CoordinatorAborted(RunStopped):
    """The coordinator ended the run (a mismatch, a deadlock, or another rank failed).
    `reason`: the coordinator's whole message; the exception's own text is its first line."""

    def __init__(self, rank: int, reason: str, where: str = "") -> None:
        self.rank, self.reason = rank, reason
        headline = reason.splitlines()[0].rstrip(":") if reason else "the run was stopped"
        super().__init__(f"phantom: rank {rank} was stopped{where}: {headline}")


class CoordinatorClient:
    def __init__(self, rank: int) -> None:
        self.rank = rank
        address = os.environ[ENV_ADDRESS]
        if address.startswith("tcp:"):  # a coordinator on another host (--executor ray)
            host, port = address[4:].rsplit(":", 1)
            self._conn = Client((host, int(port)), family="AF_INET",
                                authkey=bytes.fromhex(os.environ[ENV_AUTHKEY]))
        else:
            self._conn = Client(address, family="AF_UNIX",
                                authkey=bytes.fromhex(os.environ[ENV_AUTHKEY]))
        self._conn.send(("hello", rank, os.getpid()))
        # DDP's reducer issues collectives from the autograd thread: one request at a time.
        self._lock = threading.Lock()

    def exchange(self, requests: list[Request]) -> list[Result]:
        """Send this rank's part of one or more collectives; block until all are resolved."""
        return self._ask(("requests", requests))

    def share_gaps(self, iteration: int, means: dict) -> dict | None:
        """This rank ended `iteration` with these steady-gap means. Returns None, or
        {"means": its class leader's to charge in the next iteration (None: its own, see
        SteadyGaps.use_shared), "cores": the cores to run on (None: any)}."""
        return self._ask(("gaps", iteration, means))

    def shared_calibration(self, measure: Callable[[], dict]) -> dict:
        """This machine's speed for the run's host time (host.machine.MachineSpeed, where no
        `phantom calibrate` file exists): `measure()` here if this rank is the first to ask,
        else what the first one measured."""
        answer = self._ask(("calibration", None))
        if answer != "measure":
            return answer
        value = measure()
        with self._lock:
            self._conn.send(("calibration", value))
        return value

    def _ask(self, message: tuple):
        with self._lock:
            try:
                self._conn.send(message)
                reply = self._conn.recv()
            except (EOFError, OSError):  # the coordinator's process ended without a word
                raise CoordinatorAborted(self.rank, "phantom's launcher is gone") from None
        if isinstance(reply, Abort):
            raise CoordinatorAborted(self.rank, reply.message)
        return reply

    def report_groups(self, groups: list[list[int]]) -> None:
        """Process groups created (member ranks), for the coordinator's rank classes."""
        with self._lock:
            self._conn.send(("groups", [tuple(g) for g in groups]))

    def finished(self) -> None:
        try:
            with self._lock:
                self._conn.send(("done", self.rank))
        except OSError:
            pass
