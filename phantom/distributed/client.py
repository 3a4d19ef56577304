"""A rank's connection to the coordinator."""
from __future__ import annotations

import os
import threading
from multiprocessing.connection import Client

from phantom.distributed.wire import ENV_ADDRESS, ENV_AUTHKEY, Abort, Request, Result


class CoordinatorAborted(RuntimeError):
    """The coordinator ended the run (a mismatch, a deadlock, or another rank failed)."""


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
        with self._lock:
            self._conn.send(("requests", requests))
            reply = self._conn.recv()
        if isinstance(reply, Abort):
            raise CoordinatorAborted(reply.message)
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
