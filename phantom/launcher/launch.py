"""Start the rank process(es) of a run, like torchrun, and pass the exit code through.

A single-rank run is one `python -m phantom.launcher.bootstrap` child. A distributed run
starts one child per simulated rank with torchrun's environment, plus the coordinator
(threads of this process) that matches and times their collectives. The first rank that
fails, a collective mismatch, or a deadlock ends the whole run; Ctrl-C leaves no process
behind (each rank runs in its own process group, which is killed as a whole).
"""
from __future__ import annotations

import contextlib
import os
import queue
import random
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
from typing import Callable

from phantom.config import ENV_VAR, RunConfig
from phantom.launcher.lifetime import started_by_me

BOOTSTRAP = [sys.executable, "-m", "phantom.launcher.bootstrap"]
LOG_TAIL_LINES = 40
# PHANTOM_NO_FORK_SERVER=1: start every rank as a fresh Python instead of forking it from a
# pre-warmed parent (forkserver.py), to compare the two or to rule the fork server out.
NO_FORK_SERVER = "PHANTOM_NO_FORK_SERVER"


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


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the platform has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _launch_one(config: RunConfig) -> int:
    env = dict(os.environ)
    env[ENV_VAR] = config.to_json()
    env["PHANTOM_DEVICE_COUNT"] = str(max(config.nproc_per_node, 1))
    log_path = None
    if config.log_dir:  # --log-dir, --out: its output shown and also written to rank0.log
        Path(config.log_dir).mkdir(parents=True, exist_ok=True)
        log_path = Path(config.log_dir) / "rank0.log"
    return _run_rank(env, log_path)


# How long the one rank may take to end after a Ctrl-C (it prints its summary) before it is stopped.
RANK_STOP_GRACE_S = 10.0


def _run_rank(env: dict, log_path: Path | None) -> int:
    """Run the one rank to its end; its exit status as a shell gives it (128 + N when signal N
    ended it). A Ctrl-C from the terminal reaches the rank too, which prints its summary and
    ends; one sent to phantom alone does not, so after a grace period the rank is stopped. A
    `kill` (SIGTERM) is sent to phantom alone: the rank is stopped at once (it went on
    simulating, orphaned). Either leaves no process behind."""
    pipe = subprocess.PIPE if log_path is not None else None
    if log_path is not None:
        env = dict(env, PYTHONUNBUFFERED="1")  # through a pipe, prints would otherwise lag
    restore = interrupts_raise()
    try:
        with contextlib.ExitStack() as stack:
            proc = subprocess.Popen(BOOTSTRAP, env=env, stdout=pipe, stderr=pipe)
            readers = []
            if log_path is not None:
                log = stack.enter_context(open(log_path, "ab"))
                readers = [threading.Thread(target=_pump, args=(stream, sink, "", log), daemon=True)
                           for stream, sink in ((proc.stdout, sys.stdout.buffer),
                                                (proc.stderr, sys.stderr.buffer))]
                for t in readers:
                    t.start()
            try:
                code = proc.wait()
            except KeyboardInterrupt as e:
                _stop(proc, grace_s=0.0 if isinstance(e, Terminated) else RANK_STOP_GRACE_S)
                raise
            finally:
                for t in readers:
                    t.join(timeout=5)
    except KeyboardInterrupt as e:
        return interrupted_status(e)
    finally:
        restore()
    return 128 - code if code < 0 else code


def _stop(proc: subprocess.Popen, grace_s: float) -> None:
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Terminated(KeyboardInterrupt):
    """SIGTERM to the launcher: ends the run as Ctrl-C does, with the shell's status for it."""


def _raise_terminated(signum, frame):
    raise Terminated


def interrupts_raise() -> Callable[[], None]:
    """From here on Ctrl-C raises KeyboardInterrupt and a `kill` (SIGTERM: a job scheduler's
    cancel, a CI timeout) raises Terminated, so the launcher ends its ranks either way, even
    where whoever started phantom left SIGINT ignored (a shell's background job, a test
    runner's worker). Returns what puts the handlers before back. Handlers can only be set on
    the main thread: `launch` called from another one changes none."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {signal.SIGINT: signal.signal(signal.SIGINT, signal.default_int_handler),
                signal.SIGTERM: signal.signal(signal.SIGTERM, _raise_terminated)}

    def restore() -> None:
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
    return restore


def interrupted_status(e: KeyboardInterrupt) -> int:
    return 128 + signal.SIGTERM if isinstance(e, Terminated) else 128 + signal.SIGINT


# -- distributed runs --------------------------------------------------------------------
FREE_PORT_FLOOR = 20_000


def free_port() -> int:
    """A local TCP port for a server some other process will open (rank 0's rendezvous store).

    Drawn below the kernel's ephemeral range: a port from bind(("", 0)) is free only until it is
    closed, and every outgoing connection on the machine (other runs' store clients, say) draws
    from that range, so in the gap before rank 0 listens one of them can take it (EADDRINUSE).
    Below the range only another server picking the same port can collide. The draw starts at
    20,000, clear of Ray's default worker ports (10,002-19,999): a Ray node reserves them as a
    block, and `ray start --port` inside it fails."""
    low = _ephemeral_range()[0]
    first = FREE_PORT_FLOOR if low > FREE_PORT_FLOOR + 1000 else 1024
    rng = random.SystemRandom()
    for _ in range(64 if low > first else 0):
        port = rng.randrange(first, low)
        if _can_listen(port):
            return port
    with socket.socket() as s:  # a crowded machine: fall back to the kernel's choice
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):  # not Linux: IANA's dynamic range
        return 49152, 65535


def _can_listen(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("", port))  # every interface, as the rendezvous store listens
        except OSError:
            return False
    return True


def _rank_env(config: RunConfig, rank: int, run_id: str, coordinator: str,
              authkey: str) -> dict[str, str]:
    """The environment torchrun gives a worker, plus phantom's own (MASTER_PORT, and MASTER_ADDR
    on Ray, come from the executor)."""
    local = rank % config.nproc_per_node
    env = dict(os.environ)
    env.update({
        "RANK": str(rank), "LOCAL_RANK": str(local), "WORLD_SIZE": str(config.world_size),
        "LOCAL_WORLD_SIZE": str(config.nproc_per_node),
        "GROUP_RANK": str(rank // config.nproc_per_node), "GROUP_WORLD_SIZE": str(config.nnodes),
        "ROLE_RANK": str(rank), "ROLE_WORLD_SIZE": str(config.world_size), "ROLE_NAME": "default",
        "MASTER_ADDR": "127.0.0.1",
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
        if self.proc.poll() is not None:
            return
        if hasattr(self.proc, "kill_rank"):  # a Ray actor
            self.proc.kill_rank()
            return
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


def _start_rank(config: RunConfig, rank: int, env: dict, log_dir: Path, server) -> _Rank:
    shown = config.tee == "all" or rank == 0
    log_path = log_dir / f"rank{rank}.log"
    if rank == 0 and config.tee != "all" and not config.log_dir:
        # Rank 0 talks to the terminal directly, as the script would.
        if server is not None:
            sys.stdout.flush()
            sys.stderr.flush()
            return _Rank(rank, server.start(rank, env, 1, 2), None)
        proc = subprocess.Popen(BOOTSTRAP, env=started_by_me(env), start_new_session=True)
        return _Rank(rank, proc, None)
    if server is not None:
        (out_r, out_w), (err_r, err_w) = os.pipe(), os.pipe()
        proc = server.start(rank, env, out_w, err_w)
        os.close(out_w)
        os.close(err_w)
        streams = (os.fdopen(out_r, "rb"), os.fdopen(err_r, "rb"))
    else:
        proc = subprocess.Popen(BOOTSTRAP, env=started_by_me(env), start_new_session=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        streams = (proc.stdout, proc.stderr)
    r = _Rank(rank, proc, log_path)
    log = open(log_path, "ab")
    prefix = f"[rank{rank}]: " if config.tee == "all" else ""
    for stream, sink in zip(streams, (sys.stdout.buffer, sys.stderr.buffer)):
        t = threading.Thread(target=_pump, args=(stream, sink if shown else None, prefix, log),
                             daemon=True)
        t.start()
        r.readers.append(t)
    return r


def _launch_ranks(config: RunConfig, on_network=None) -> int:
    # Imported here: `python -m phantom.launcher.forkserver` imports this package first.
    from phantom.distributed.coordinator import Coordinator
    from phantom.launcher.forkserver import ForkServer
    from phantom.launcher.ray_executor import RayExecutor
    from phantom.distributed.wire import socket_path
    from phantom.network import NetworkSimulator, load_cluster

    cluster = load_cluster(config.cluster, nnodes=config.nnodes,
                           nproc_per_node=config.nproc_per_node, gpu=config.gpu)
    network = NetworkSimulator(cluster)
    if config.records:  # the run directory reports each link's traffic
        from phantom.network.usage import LinkUsage

        network.link_usage = LinkUsage(network.topology)
    if on_network is not None:
        on_network(network)

    def schedule(requests, ready_ns, siblings):
        op = _collective_op(requests)
        group = requests[0].group_members or op.ranks
        s = network.schedule(op, ready_ns, [_sibling_op(op, group, g) for g in siblings])
        return s.start_ns, s.end_ns, s.algorithm, s.protocol, s.channels

    run_dir = Path(tempfile.mkdtemp(prefix="phantom-run-"))
    log_dir = Path(config.log_dir) if config.log_dir else run_dir
    log_dir.mkdir(parents=True, exist_ok=True)
    authkey = secrets.token_hex(16)
    to_start: queue.Queue[int] = queue.Queue()  # ranks the coordinator wants started
    initial = config.initial_ranks()
    ray = None
    if config.executor == "ray":
        ray = RayExecutor(config.ray_address, _RankOutput(config, log_dir).write)
        listen: str | tuple[str, int] = (ray.node_ip, 0)
    else:
        listen = socket_path(str(run_dir))
    coordinator = Coordinator(config.world_size, listen, bytes.fromhex(authkey), schedule,
                              network.forget_before, running=initial, spawn=to_start.put)
    coordinator.start()
    run_id = f"phantom-{os.getpid()}"
    store = None
    if ray is not None:
        # The ranks may be on other hosts: this process hosts the rendezvous store, as
        # torchrun's agent does, and every rank is its client.
        store = _agent_store(ray.node_ip)
        master = {"MASTER_ADDR": ray.node_ip, "MASTER_PORT": str(store.port),
                  "TORCHELASTIC_USE_AGENT_STORE": "True"}
    else:
        master = {"MASTER_PORT": str(free_port())}
    ranks: list[_Rank] = []
    server = None

    def env_of(rank: int) -> dict[str, str]:
        env = _rank_env(config, rank, run_id, coordinator.address, authkey)
        env.update(master)
        return env

    def start(rank: int) -> None:
        if ray is not None:
            env = {k: v for k, v in env_of(rank).items() if os.environ.get(k) != v}
            log_path = log_dir / f"rank{rank}.log"
            log_path.touch()  # as for local ranks: a log per rank, even a silent one
            ranks.append(_Rank(rank, ray.start(rank, env), log_path))
        else:
            ranks.append(_start_rank(config, rank, env_of(rank), log_dir, server))

    restore_handlers = interrupts_raise()  # Ctrl-C and `kill` both end the run with every rank
    interrupted = False
    try:
        if ray is None and os.environ.get(NO_FORK_SERVER) != "1":
            server = ForkServer(env_of(0))
        for rank in initial:
            start(rank)
        code = _supervise(config, ranks, coordinator, to_start, start)
        if code == 0 and len(ranks) < config.world_size and not config.quiet:
            _print_classes(coordinator, network)
        return code
    except KeyboardInterrupt as e:
        print("phantom: interrupted; stopping all ranks", file=sys.stderr)
        interrupted = True
        return interrupted_status(e)
    finally:
        if not interrupted:
            _let_exiting_ranks_finish(ranks)
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
        if server is not None:
            server.close()
        if ray is not None:
            ray.close()
        if not config.log_dir:
            shutil.rmtree(run_dir, ignore_errors=True)
        restore_handlers()


def _agent_store(host: str):
    import torch.distributed as dist

    return dist.TCPStore(host, 0, is_master=True, wait_for_workers=False)


class _RankOutput:
    """Where a rank's output lines go when they arrive as lines (Ray): the terminal for the
    ranks shown (--tee), and each rank's log file."""

    def __init__(self, config: RunConfig, log_dir: Path) -> None:
        self._config = config
        self._log_dir = log_dir
        self._logs: dict[int, object] = {}

    def write(self, rank: int, tag: str, line: bytes) -> None:
        log = self._logs.get(rank)
        if log is None:
            log = self._logs[rank] = open(self._log_dir / f"rank{rank}.log", "ab")
        log.write(line)
        log.flush()
        if self._config.tee == "all" or rank == 0:
            sink = sys.stdout.buffer if tag == "out" else sys.stderr.buffer
            prefix = f"[rank{rank}]: ".encode() if self._config.tee == "all" else b""
            sink.write(prefix + line)
            sink.flush()


def _collective_op(requests):
    from phantom.network import CollectiveOp

    first = requests[0]
    return CollectiveOp(kind=first.kind, ranks=tuple(first.members),
                        nbytes=max(r.nbytes for r in requests), root=first.root,
                        transfers=tuple(t for r in requests for t in r.transfers),
                        dtype_bytes=first.dtype_bytes)


def _sibling_op(op, group: tuple[int, ...], sibling: tuple[int, ...]):
    """`op` as the sibling group runs it: every rank replaced by the one at its position."""
    from phantom.distributed.ranks import translate
    from phantom.network import CollectiveOp

    def tr(rank):
        return None if rank is None else translate(rank, group, sibling)

    return CollectiveOp(kind=op.kind, ranks=tuple(tr(r) for r in op.ranks), nbytes=op.nbytes,
                        root=tr(op.root), dtype_bytes=op.dtype_bytes,
                        transfers=tuple((tr(s), tr(d), b) for s, d, b in op.transfers))


def _print_classes(coordinator, network) -> None:
    classes = coordinator.classes.classes()
    parts = [f"{rep} for {_span(members)}" for rep, members in classes.items()]
    print(f"phantom: {len(classes)} of {coordinator.world_size} ranks ran (--ranks): "
          + "; ".join(parts) + f". {network.sibling_ops:,} collectives of the other groups "
          f"were accounted, {network.sibling_ops_shared:,} shared links with a simulated one.",
          file=sys.stderr)


def _span(ranks: list[int]) -> str:
    """[0,1,2,3,8] -> '0-3,8'."""
    out, i = [], 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        out.append(str(ranks[i]) if i == j else f"{ranks[i]}-{ranks[j]}")
        i = j + 1
    return ",".join(out)


def _supervise(config: RunConfig, ranks: list[_Rank], coordinator,
               to_start: "queue.Queue[int]", start) -> int:
    """Wait for every rank; the first failure (or a coordinator diagnosis) ends the run.
    Ranks the coordinator asks for are started here, on the main thread."""
    running = list(ranks)
    while running or not to_start.empty():
        while not to_start.empty():
            start(to_start.get())
            running.append(ranks[-1])
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
                r, code = _first_failure(ranks, coordinator, r, code)
                _report_failure(config, r, code)
                return _shell_status(code)
        time.sleep(0.05)
    return 0


# How long the other ranks of a failed run get to end on their own before they are killed.
# Ranks that all exit with the same error code (a script's `sys.exit(3)` on every rank) are
# then ending anyway, running their exit hooks and flushing their files; killed at once, a
# later one can lose what it wrote (a file it never closed comes out empty).
# Ranks blocked in a collective with the failed one are stopped by the coordinator and say
# where in one line (a second on a loaded 2-core machine); a rank computing outside any
# collective waits the grace out and is killed.
EXIT_GRACE_S = 3.0


def _let_exiting_ranks_finish(ranks: list[_Rank]) -> None:
    deadline = time.monotonic() + EXIT_GRACE_S
    while any(r.proc.poll() is None for r in ranks) and time.monotonic() < deadline:
        time.sleep(0.02)


def _first_failure(ranks: list[_Rank], coordinator, seen: _Rank, code: int) -> tuple[_Rank, int]:
    """The rank to blame: the one that failed first. Its peers fail right after it (the
    coordinator stops them), and their exits may be noticed first."""
    first = next((r for r in ranks if r.rank == coordinator.first_exit), None)
    if first is None or first is seen:
        return seen, code
    deadline = time.monotonic() + 2.0
    while first.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    first_code = first.proc.poll()
    if first_code:
        return first, first_code
    return seen, code


def _shell_status(code: int) -> int:
    """A rank's exit status as the run's, as a shell gives it: 128 + N for signal N (a
    subprocess's `-N`), so that a killed rank is told apart from a script's `sys.exit(1)`."""
    return 128 - code if code < 0 else code


def _report_failure(config: RunConfig, r: _Rank, code: int) -> None:
    for t in r.readers:
        t.join(timeout=2)
    how = f"exit code {code}" if code > 0 else f"killed by {_signal_name(-code)}"
    print(f"phantom: rank {r.rank} failed ({how}); stopping the other ranks.", file=sys.stderr)
    shown = config.tee == "all" or r.rank == 0
    if not shown and r.log_path is not None and r.log_path.exists():
        lines = r.log_path.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
        if not lines:
            return
        print(f"--- last {len(lines)} lines of rank {r.rank}'s output ---", file=sys.stderr)
        print("\n".join(lines), file=sys.stderr)
        print("---", file=sys.stderr)


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
