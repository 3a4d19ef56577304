"""A pre-warmed parent for rank processes: torch and phantom imported once, ranks forked.

A cold rank costs a Python start, the fake CUDA library and `import torch` (a few seconds of
CPU and some 150 MB of private memory each); a rank forked from this server starts at once,
and shares those pages with its siblings until it writes to them.

Protocol (a SOCK_SEQPACKET socket pair, one message a datagram, JSON):
  launcher -> server: {"rank": R, "env": {...}} with the rank's stdout and stderr as two file
                      descriptors (SCM_RIGHTS)
  server -> launcher: {"rank": R, "pid": P} once forked; {"rank": R, "exit": CODE} when it ends
                      (CODE < 0: killed by signal -CODE, as subprocess reports it)
The server is single-threaded on purpose: fork() copies only the calling thread, and a
thread holding a lock at that moment would leave the child deadlocked.
"""
from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import sys

from phantom.launcher.lifetime import die_with_parent

ENV_FD = "PHANTOM_FORKSERVER_FD"
MAX_MESSAGE = 1 << 20


def prepare() -> None:
    """What every rank would do first: the fake CUDA library, torch, phantom's modules and
    the parts of torch.distributed that multi-GPU scripts import."""
    from phantom.launcher.bootstrap import prepare_process

    prepare_process(quiet=True)
    import torch.distributed.fsdp  # noqa: F401
    import torch.distributed.pipelining  # noqa: F401
    import torch.distributed.tensor.parallel  # noqa: F401

    import phantom.distributed.process_group  # noqa: F401


def serve(sock: socket.socket) -> None:
    children: dict[int, int] = {}  # pid -> rank
    selector = selectors.DefaultSelector()
    selector.register(sock, selectors.EVENT_READ)
    while True:
        ready = selector.select(timeout=0.05)
        if ready:
            try:
                data, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE, 2)
            except OSError:
                data, fds = b"", []
            if not data:  # the launcher is gone: so are we (the ranks are its to kill)
                return
            request = json.loads(data)
            pid = _fork_rank(request, fds, sock)
            for fd in fds:
                os.close(fd)
            children[pid] = request["rank"]
            sock.send(json.dumps({"rank": request["rank"], "pid": pid}).encode())
        _reap(children, sock)


def _reap(children: dict[int, int], sock: socket.socket) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        rank = children.pop(pid, None)
        if rank is None:
            continue
        code = os.waitstatus_to_exitcode(status)
        try:
            sock.send(json.dumps({"rank": rank, "exit": code}).encode())
        except OSError:
            return


def _fork_rank(request: dict, fds: list[int], sock: socket.socket) -> int:
    sys.stdout.flush()
    sys.stderr.flush()
    server = os.getpid()
    pid = os.fork()
    if pid:
        return pid
    # The child: a rank process. Exit through bootstrap.exit_process only (os._exit after the
    # script's exit hooks): the server's own state (socket, selector) must not be torn down or
    # flushed twice.
    code = 1
    try:
        os.setsid()  # its own process group: the launcher kills it as a whole
        # ...and if the launcher cannot (SIGKILLed), this server exits, and the rank with it
        die_with_parent(server)
        sock.close()
        out, err = fds
        os.dup2(out, 1)
        os.dup2(err, 2)
        os.close(out)
        os.close(err)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.environ.clear()
        os.environ.update(request["env"])
        from phantom.launcher.bootstrap import main

        code = main()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        try:
            from phantom.launcher.bootstrap import exit_process

            exit_process(code)
        finally:
            os._exit(code)


def main() -> int:
    sock = socket.socket(fileno=int(os.environ.pop(ENV_FD)))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the launcher's to handle
    prepare()
    sock.send(json.dumps({"ready": True}).encode())
    serve(sock)
    return 0


if __name__ == "__main__":
    sys.exit(main())


# -- the launcher's side -------------------------------------------------------------------
class ForkServerError(RuntimeError):
    pass


class ForkServer:
    """Starts the server (`python -m phantom.launcher.forkserver`) and asks it for ranks."""

    def __init__(self, env: dict[str, str]) -> None:
        import subprocess
        import threading

        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = dict(env)
        env[ENV_FD] = str(theirs.fileno())
        self.proc = subprocess.Popen([sys.executable, "-m", "phantom.launcher.forkserver"],
                                     env=env, pass_fds=[theirs.fileno()], start_new_session=True)
        theirs.close()
        self._sock = ours
        self._cond = threading.Condition()
        self._pids: dict[int, int] = {}
        self._exits: dict[int, int] = {}
        self._gone = False
        if not self._recv().get("ready"):
            raise ForkServerError("phantom's fork server failed to start (its error is above)")
        threading.Thread(target=self._read, daemon=True, name="phantom-forkserver").start()

    def _recv(self) -> dict:
        try:
            data = self._sock.recv(MAX_MESSAGE)
        except OSError:
            data = b""
        return json.loads(data) if data else {}

    def _read(self) -> None:
        while True:
            msg = self._recv()
            with self._cond:
                if not msg:
                    self._gone = True
                elif "pid" in msg:
                    self._pids[msg["rank"]] = msg["pid"]
                else:
                    self._exits[msg["rank"]] = msg["exit"]
                self._cond.notify_all()
            if not msg:
                return

    def start(self, rank: int, env: dict[str, str], out_fd: int, err_fd: int) -> "ForkedProcess":
        socket.send_fds(self._sock, [json.dumps({"rank": rank, "env": env}).encode()],
                        [out_fd, err_fd])
        with self._cond:
            self._cond.wait_for(lambda: rank in self._pids or self._gone)
            if rank not in self._pids:
                raise ForkServerError(f"phantom's fork server died before starting rank {rank}")
            return ForkedProcess(self, rank, self._pids[rank])

    def exit_code(self, rank: int, timeout: float | None = 0) -> int | None:
        with self._cond:
            self._cond.wait_for(lambda: rank in self._exits or self._gone, timeout=timeout)
            if rank in self._exits:
                return self._exits[rank]
            return 1 if self._gone else None  # a rank the dead server cannot report on

    def close(self) -> None:
        try:
            self._sock.close()
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()


class ForkedProcess:
    """What the launcher uses of `subprocess.Popen`, for a rank forked by the server."""

    def __init__(self, server: ForkServer, rank: int, pid: int) -> None:
        self._server = server
        self.rank = rank
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._server.exit_code(self.rank)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        import subprocess

        if self.returncode is None:
            self.returncode = self._server.exit_code(self.rank, timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(f"rank {self.rank}", timeout)
        return self.returncode
