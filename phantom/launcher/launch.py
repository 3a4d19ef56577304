"""Start the rank process(es) of a run, like torchrun, and pass the exit code through.

A single-rank run is one `python -m phantom.launcher.bootstrap` child. A distributed run
starts one child per simulated rank with torchrun's environment, plus the coordinator
(threads of this process) that matches and times their collectives. The first rank that
fails, a collective mismatch, or a deadlock ends the whole run; Ctrl-C leaves no process
behind (each rank runs in its own process group, which is killed as a whole).
"""
from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from phantom.launcher.config import ENV_VAR, RunConfig

BOOTSTRAP = [sys.executable, "-m", "phantom.launcher.bootstrap"]
LOG_TAIL_LINES = 40


def launch(config: RunConfig) -> int:
    from phantom.report.rundir import finish_run, prepare_run

    prepare_run(config)  # --out / --trace: where the ranks write their parts
    network: list = []
    code = 1
    try:
        code = _launch_one(config) if not config.distributed else \
            _launch_ranks(config, on_network=network.append)
    finally:
        if config.parts_dir is not None:
            finish_run(config, code, network[0].link_usage if network else None)
    return code


def _launch_one(config: RunConfig) -> int:
    env = dict(os.environ)
    env[ENV_VAR] = config.to_json()
    env["PHANTOM_DEVICE_COUNT"] = str(max(config.nproc_per_node, 1))
    try:
        if config.log_dir:
            Path(config.log_dir).mkdir(parents=True, exist_ok=True)
            return _call_logged(env, Path(config.log_dir) / "rank0.log")
        return subprocess.call(BOOTSTRAP, env=env)
    except KeyboardInterrupt:
        return 130


def _call_logged(env: dict, log_path: Path) -> int:
    """The one rank, its output shown and also written to `log_path` (--log-dir, --out)."""
    env = dict(env, PYTHONUNBUFFERED="1")  # through a pipe, prints would otherwise lag
    proc = subprocess.Popen(BOOTSTRAP, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    with open(log_path, "ab") as log:
        readers = [threading.Thread(target=_pump, args=(stream, sink, "", log), daemon=True)
                   for stream, sink in ((proc.stdout, sys.stdout.buffer),
                                        (proc.stderr, sys.stderr.buffer))]
        for t in readers:
            t.start()
        try:
            code = proc.wait()
        except KeyboardInterrupt:
            proc.wait()
            raise
        finally:
            for t in readers:
                t.join(timeout=5)
    return code


# -- distributed runs --------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_env(config: RunConfig, rank: int, master_port: int, run_id: str,
              coordinator: str, authkey: str) -> dict[str, str]:
    """The environment torchrun gives a worker, plus phantom's own."""
    local = rank % config.nproc_per_node
    env = dict(os.environ)
    env.update({
        "RANK": str(rank), "LOCAL_RANK": str(local), "WORLD_SIZE": str(config.world_size),
        "LOCAL_WORLD_SIZE": str(config.nproc_per_node),
        "GROUP_RANK": str(rank // config.nproc_per_node), "GROUP_WORLD_SIZE": str(config.nnodes),
        "ROLE_RANK": str(rank), "ROLE_WORLD_SIZE": str(config.world_size), "ROLE_NAME": "default",
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(master_port),
        "TORCHELASTIC_RUN_ID": run_id, "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0", "TORCHELASTIC_USE_AGENT_STORE": "False",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
        # torchrun's default for multi-process runs; here it also keeps N ranks from
        # fighting over the machine's few cores.
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
        "PHANTOM_DEVICE_COUNT": str(config.nproc_per_node),
        "PHANTOM_COORDINATOR": coordinator, "PHANTOM_COORDINATOR_KEY": authkey,
        ENV_VAR: config.to_json(),
    })
    return env


class _Rank:
    def __init__(self, rank: int, proc: subprocess.Popen, log_path: Path | None) -> None:
        self.rank = rank
        self.proc = proc
        self.log_path = log_path
        self.readers: list[threading.Thread] = []

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def _pump(stream, sink, prefix: str, log) -> None:
    for line in iter(stream.readline, b""):
        if log is not None:
            log.write(line)
            log.flush()
        if sink is not None:
            sink.write(prefix.encode() + line if prefix else line)
            sink.flush()
    stream.close()


def _start_rank(config: RunConfig, rank: int, env: dict, log_dir: Path) -> _Rank:
    shown = config.tee == "all" or rank == 0
    log_path = log_dir / f"rank{rank}.log"
    if rank == 0 and config.tee != "all" and not config.log_dir:
        # Rank 0 talks to the terminal directly, as the script would.
        proc = subprocess.Popen(BOOTSTRAP, env=env, start_new_session=True)
        return _Rank(rank, proc, None)
    proc = subprocess.Popen(BOOTSTRAP, env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    r = _Rank(rank, proc, log_path)
    log = open(log_path, "ab")
    prefix = f"[rank{rank}]: " if config.tee == "all" else ""
    for stream, sink in ((proc.stdout, sys.stdout.buffer), (proc.stderr, sys.stderr.buffer)):
        t = threading.Thread(target=_pump, args=(stream, sink if shown else None, prefix, log),
                             daemon=True)
        t.start()
        r.readers.append(t)
    return r


def _launch_ranks(config: RunConfig, on_network=None) -> int:
    from phantom.distributed.coordinator import Coordinator
    from phantom.distributed.wire import socket_path
    from phantom.network import CollectiveOp, NetworkSimulator, load_cluster

    cluster = load_cluster(config.cluster, nnodes=config.nnodes,
                           nproc_per_node=config.nproc_per_node, gpu=config.gpu)
    network = NetworkSimulator(cluster)
    if config.records:  # the run directory reports each link's traffic
        from phantom.network.usage import LinkUsage

        network.link_usage = LinkUsage(network.topology)
    if on_network is not None:
        on_network(network)

    def schedule(requests, ready_ns):
        first = requests[0]
        op = CollectiveOp(kind=first.kind, ranks=tuple(first.members),
                          nbytes=max(r.nbytes for r in requests), root=first.root,
                          transfers=tuple(t for r in requests for t in r.transfers),
                          dtype_bytes=first.dtype_bytes)
        s = network.schedule(op, ready_ns)
        return s.start_ns, s.end_ns, s.algorithm, s.protocol, s.channels

    run_dir = Path(tempfile.mkdtemp(prefix="phantom-run-"))
    log_dir = Path(config.log_dir) if config.log_dir else run_dir
    log_dir.mkdir(parents=True, exist_ok=True)
    authkey = secrets.token_hex(16)
    coordinator = Coordinator(config.world_size, socket_path(str(run_dir)),
                              bytes.fromhex(authkey), schedule, network.forget_before)
    coordinator.start()
    port, run_id = _free_port(), f"phantom-{os.getpid()}"
    ranks: list[_Rank] = []
    # Ctrl-C and `kill` both end the run with every rank; a shell that started phantom in
    # the background may have left SIGINT ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        for rank in range(config.world_size):
            env = _rank_env(config, rank, port, run_id, socket_path(str(run_dir)), authkey)
            ranks.append(_start_rank(config, rank, env, log_dir))
        return _supervise(config, ranks, coordinator)
    except KeyboardInterrupt:
        print("phantom: interrupted; stopping all ranks", file=sys.stderr)
        return 130
    finally:
        for r in ranks:
            r.kill()
        for r in ranks:
            try:
                r.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            for t in r.readers:
                t.join(timeout=2)
        coordinator.close()
        if not config.log_dir:
            shutil.rmtree(run_dir, ignore_errors=True)


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def _supervise(config: RunConfig, ranks: list[_Rank], coordinator) -> int:
    """Wait for every rank; the first failure (or a coordinator diagnosis) ends the run."""
    running = list(ranks)
    while running:
        if coordinator.fatal_event.is_set():
            time.sleep(0.5)  # let the ranks print the error they were sent
            print(f"phantom: error: {coordinator.fatal}", file=sys.stderr)
            return 1
        for r in list(running):
            code = r.proc.poll()
            if code is None:
                continue
            running.remove(r)
            if code != 0:
                _report_failure(config, r, code)
                return code if code > 0 else 1
        time.sleep(0.05)
    return 0


def _report_failure(config: RunConfig, r: _Rank, code: int) -> None:
    for t in r.readers:
        t.join(timeout=2)
    how = f"exit code {code}" if code > 0 else f"signal {-code}"
    print(f"phantom: rank {r.rank} failed ({how}); stopping the other ranks.", file=sys.stderr)
    shown = config.tee == "all" or r.rank == 0
    if not shown and r.log_path is not None and r.log_path.exists():
        lines = r.log_path.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
        print(f"--- last {len(lines)} lines of rank {r.rank}'s output ---", file=sys.stderr)
        print("\n".join(lines), file=sys.stderr)
        print("---", file=sys.stderr)
