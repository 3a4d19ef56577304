"""The coordinator: matches the ranks' collectives and times them on the network.

It runs in the launcher process, one reader thread per rank connection. A rank sends a
batch of requests (one collective, or the point-to-point transfers of one
`batch_isend_irecv`) and blocks until all of them are resolved. A collective is resolved
when every member has sent its part: the coordinator checks the parts agree, asks the
network model for its timing (starting when the last member's stream is ready) and answers
each member.

Because ranks block at issue, a wrong program cannot hang silently: when every live rank is
waiting and nothing can complete, the coordinator reports a deadlock with each rank's
pending call; members that disagree (op, size, dtype, root or member list) are reported
with both call sites as soon as the second one arrives.

With representative ranks (`--ranks auto` or a list), only some ranks run. A collective is
resolved when its *running* members have sent their parts; the others copy their class
representative (see `ranks.py`), and the sibling groups of its family that nobody runs are
handed to the network with it, so their traffic is there too. A point-to-point transfer to
a rank that is not running starts that rank (`spawn`); it then replays the collectives it
missed from the stored results.

Two exchanges keep ranks that do the same work from differing by this machine's noise (both
answer at once when there is nobody to share with, and never make a rank wait on a rank that
waits itself):
* this machine's speed for measured host time (`calibration`, where `phantom calibrate` wrote
  no file): once every running rank has asked, the lowest measures it while the others wait
  (idle, so that they do not compete with it for the cores), and they use its value;
* host gaps (`gaps`): at the end of each iteration, each rank gets the steady gaps its class's
  leader (lowest running rank) will charge next, and charges the same (`SteadyGaps.use_shared`).
"""
from __future__ import annotations

import os
import threading
import traceback
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, Listener
from typing import Callable

from phantom.distributed.ranks import RankClasses
from phantom.distributed.wire import Abort, Request, Result

# Resolved timing of one matched collective: (start, end, algorithm, protocol, channels).
Timing = tuple[float, float, str, str, int]
# schedule(requests, start, sibling groups that run the same collective at the same time)
Scheduler = Callable[[list[Request], float, list[tuple[int, ...]]], Timing]
FORGET_EVERY = 64  # collectives between pruning the network's reservation history
# Collectives kept for ranks started late (they replay them). Ranks start at their first
# point-to-point transfer, early in the first step; a bound keeps a long run's memory flat.
MAX_ANSWERED = 200_000


@dataclass
class _RankState:
    conn: Connection | None = None
    outstanding: list[Request] = field(default_factory=list)
    results: dict = field(default_factory=dict)  # key -> Result
    host_ns: float = 0.0
    finished: bool = False
    gone: bool = False
    # Waiting outside a collective: ("gaps", leader, iteration) or ("calibration",).
    side_wait: tuple | None = None


class Coordinator:
    def __init__(self, world_size: int, address: str | tuple[str, int], authkey: bytes,
                 schedule: Scheduler,
                 forget_before: Callable[[float], None] | None = None,
                 running: list[int] | None = None,
                 spawn: Callable[[int], None] | None = None) -> None:
        """`running`: the ranks started as processes (all of them by default); `spawn(rank)`
        starts one more, when a running rank sends to it."""
        self.world_size = world_size
        self._schedule = schedule
        self._forget_before = forget_before
        self._spawn = spawn
        family = "AF_INET" if isinstance(address, tuple) else "AF_UNIX"
        self._local = family == "AF_UNIX"  # every rank on this machine
        self._listener = Listener(address, family=family, authkey=authkey)
        # What ranks connect to: a socket path, or "tcp:HOST:PORT" (ranks on other hosts).
        self.address = (f"tcp:{address[0]}:{self._listener.address[1]}"
                        if family == "AF_INET" else address)
        self._lock = threading.Lock()
        running = list(range(world_size)) if running is None else running
        self.classes = RankClasses(world_size, running)
        self._ranks = {r: _RankState() for r in running}
        self._pending: dict[tuple, dict[int, Request]] = {}
        # Collectives resolved while some member was not running: a rank started later
        # replays them from here (key -> Result).
        self._answered: dict[tuple, tuple[tuple, Result]] = {}
        self._connected = 0
        self._resolved = 0
        self.fatal: str | None = None  # set once: the run must end with this message
        self.fatal_event = threading.Event()
        self.collectives = 0
        self.sibling_collectives = 0  # collectives run by groups nobody runs, on the network
        # The first rank whose connection dropped before it finished: the others it left
        # waiting fail after it, and the launcher reports this one.
        self.first_exit: int | None = None
        self._gap_means: dict[int, dict[int, dict]] = {}  # leader -> iteration -> its means
        self._calibration: dict | None = None  # the run's host calibration, once measured
        self._calibrating: int | None = None  # the rank measuring it

    # -- connections ----------------------------------------------------------------------
    def start(self) -> None:
        threading.Thread(target=self._accept_loop, name="phantom-coordinator", daemon=True).start()

    def close(self) -> None:
        try:
            self._listener.close()
        except OSError:
            pass

    def _accept_loop(self) -> None:
        while True:
            try:
                conn = self._listener.accept()
            except (OSError, EOFError):
                return
            try:
                hello = conn.recv()
            except (OSError, EOFError):
                continue
            rank = hello[1]
            with self._lock:
                self._ranks[rank].conn = conn
                self._connected += 1
            threading.Thread(target=self._reader, args=(rank, conn), daemon=True,
                             name=f"phantom-rank{rank}").start()

    def _reader(self, rank: int, conn: Connection) -> None:
        while True:
            try:
                msg = conn.recv()
            except (OSError, EOFError):
                with self._lock:
                    state = self._ranks[rank]
                    state.gone = True
                    self._release_gap_waiters(rank)
                    self._maybe_calibrate()
                    if not state.finished:
                        # The launcher reports the crash itself; the peers must not wait.
                        if self.first_exit is None:
                            self.first_exit = rank
                        self._abort_waiting(f"rank {rank} exited")
                    else:
                        self._check_deadlock()
                return
            try:
                self._on_message(rank, msg)
            except Exception:  # a bug here must end the run, never leave ranks waiting
                with self._lock:
                    self._fail("internal error in phantom's coordinator:\n" + traceback.format_exc())
                return

    def _on_message(self, rank: int, msg: tuple) -> None:
        tag = msg[0]
        if tag == "requests":
            self._on_requests(rank, msg[1])
        elif tag == "groups":
            with self._lock:
                self.classes.add_groups(msg[1])
        elif tag == "gaps":
            with self._lock:
                self._on_gaps(rank, msg[1], msg[2])
        elif tag == "calibration":
            with self._lock:
                self._on_calibration(rank, msg[1])
        elif tag == "done":
            with self._lock:
                self._ranks[rank].finished = True
                self._release_gap_waiters(rank)
                self._maybe_calibrate()
                self._check_deadlock()

    # -- shared host measurements -----------------------------------------------------------
    def _on_gaps(self, rank: int, iteration: int, means: dict) -> None:
        """`rank` ended `iteration` with these steady-gap means: a leader's are kept for its
        class (it charges its own); any other rank gets its leader's. Both get the cores to
        run on (`_cores`)."""
        leader = self.classes.leader(rank)
        if leader == rank:
            kept = self._gap_means.setdefault(rank, {})
            kept[iteration] = means
            for old in [i for i in kept if i < iteration - 2]:
                del kept[old]
            self._send(rank, {"means": None, "cores": self._cores(rank)})
            for r, s in self._ranks.items():
                if s.side_wait == ("gaps", rank, iteration):
                    s.side_wait = None
                    self._send(r, {"means": means, "cores": self._cores(r)})
            return
        kept = self._gap_means.get(leader, {})
        if iteration in kept:
            self._send(rank, {"means": kept[iteration], "cores": self._cores(rank)})
        elif self._ranks[leader].finished or self._ranks[leader].gone or \
                any(i > iteration for i in kept):
            self._send(rank, None)  # the leader will not end this iteration: own gaps
        else:
            self._ranks[rank].side_wait = ("gaps", leader, iteration)
            self._check_deadlock()

    def _cores(self, rank: int) -> list[int] | None:
        """Where `rank` should run when more ranks run than this machine has cores: each class
        leader on a core of its own, every other rank on the cores left. The leaders' host
        time is what every rank charges; sharing a core with seven others, a leader's
        process-time gaps came out ~10% longer than one process alone (caches and branch
        predictors refilled after every switch). None: run anywhere (ranks on other hosts,
        or too few cores to set any apart)."""
        if not self._local:
            return None
        cores = sorted(os.sched_getaffinity(0))
        leaders = sorted({self.classes.leader(r) for r in self.classes.running})
        if len(self.classes.running) <= len(cores) or len(leaders) >= len(cores):
            return None
        if rank in leaders:
            return [cores[leaders.index(rank)]]
        return cores[len(leaders):]

    def _release_gap_waiters(self, leader: int | None = None) -> None:
        """Ranks waiting for gaps that will not come (`leader` finished, or a deadlock
        otherwise) charge their own."""
        for r, s in self._ranks.items():
            wait = s.side_wait
            if wait and wait[0] == "gaps" and leader in (None, wait[1]):
                s.side_wait = None
                self._send(r, None)

    def _on_calibration(self, rank: int, value: dict | None) -> None:
        """This machine's speed (host.machine.MachineSpeed): one rank measures it ("measure")
        once every running rank has asked for it, and the others wait for its value (`value` is
        it, when the measuring rank posts it). The others wait idle meanwhile: measured while a
        peer is still starting up on the same cores, it would come out wrong."""
        if value is not None:
            self._calibration = value
            self._calibrating = None
            for r, s in self._ranks.items():
                if s.side_wait == ("calibration",):
                    s.side_wait = None
                    self._send(r, value)
            return
        if self._calibration is not None:
            self._send(rank, self._calibration)
            return
        self._ranks[rank].side_wait = ("calibration",)
        self._maybe_calibrate()

    def _maybe_calibrate(self) -> None:
        """Once every live rank waits for the calibration, the lowest of them measures it."""
        if self._calibration is not None or (
                self._calibrating is not None and not self._ranks[self._calibrating].gone):
            return
        live = [s for s in self._ranks.values() if not s.gone and not s.finished]
        waiting = sorted(r for r, s in self._ranks.items() if s.side_wait == ("calibration",)
                         and not s.gone)
        if not waiting or len(waiting) < len(live):
            return
        self._calibrating = waiting[0]
        self._ranks[self._calibrating].side_wait = None
        self._send(self._calibrating, "measure")

    def _send(self, rank: int, obj) -> None:
        try:
            self._ranks[rank].conn.send(obj)
        except (OSError, AttributeError):
            pass  # the rank is gone; its exit is reported by the launcher

    # -- matching -------------------------------------------------------------------------
    def _on_requests(self, rank: int, requests: list[Request]) -> None:
        with self._lock:
            state = self._ranks[rank]
            state.outstanding = list(requests)
            state.results = {}
            state.host_ns = max(state.host_ns, max(r.host_ns for r in requests))
            for req in requests:
                if req.key in self._answered:
                    if not self._replay(rank, req):
                        return
                    continue
                if req.kind == "send_recv":
                    self._start_peers(req)
                parts = self._pending.setdefault(req.key, {})
                for other in parts.values():
                    problem = _mismatch(other, req)
                    if problem:
                        self._fail(_mismatch_message(problem, other, req))
                        return
                parts[rank] = req
                if set(parts) == self._running_members(req):
                    self._resolve(req.key, parts)
            if self.fatal is None:
                self._check_deadlock()

    def _running_members(self, req: Request) -> set[int]:
        return {m for m in req.members if m in self.classes.running}

    def _start_peers(self, req: Request) -> None:
        """A transfer between pipeline stages, say: both ends must run, and the group it
        went through separates classes."""
        self.classes.saw_p2p(req.group_members or req.members, req.members)
        for m in req.members:
            if m not in self.classes.running:
                self.classes.add_running(m)
                self._ranks[m] = _RankState()
                if self._spawn is None:
                    self._fail(f"rank {req.rank} sends to or receives from rank {m}, which is "
                               "not running, and this run cannot start ranks")
                    return
                self._spawn(m)

    def _replay(self, rank: int, req: Request) -> bool:
        """A rank started late asks for a collective resolved before it ran."""
        signature, result = self._answered[req.key]
        if signature != req.signature:
            self._fail(
                f"rank {rank} is not like the rank that stood in for it: its call #{req.key[-1]} "
                f"of group {_group(req)} ({_describe(req)}) at {req.site} has "
                f"signature {req.signature}, the representative's was {signature}.\n"
                "Run every rank (--ranks all) or name one rank per class (--ranks 0,8,...).")
            return False
        state = self._ranks[rank]
        state.results[req.key] = result
        if len(state.results) == len(state.outstanding):
            self._reply(rank, [state.results[q.key] for q in state.outstanding])
        return True

    def _resolve(self, key: tuple, parts: dict[int, Request]) -> None:
        del self._pending[key]
        reqs = [parts[r] for r in sorted(parts)]
        ready = max(r.ready_ns for r in reqs)
        first = reqs[0]
        absent = [m for m in first.members if m not in parts]
        siblings = self.classes.siblings(first.group_members or first.members) if absent or \
            first.kind == "send_recv" else []
        start, end, algorithm, protocol, channels = self._schedule(reqs, ready, siblings)
        payloads = {r.rank: r.payload for r in reqs if r.payload is not None}
        for m in absent:  # a rank that does not run sends what its representative sent
            rep = self.classes.representative(m)
            if rep in payloads:
                payloads[m] = payloads[rep]
        result = Result(start, end, payloads, algorithm, protocol, channels)
        if absent:
            self._answered[key] = (first.signature, result)
            if len(self._answered) > MAX_ANSWERED:
                del self._answered[next(iter(self._answered))]
        self.collectives += 1
        self.sibling_collectives += len(siblings)
        for r in reqs:
            state = self._ranks[r.rank]
            state.results[key] = result
            if len(state.results) == len(state.outstanding):
                self._reply(r.rank, [state.results[q.key] for q in state.outstanding])
        self._resolved += 1
        if self._forget_before is not None and self._resolved % FORGET_EVERY == 0:
            live = [s.host_ns for s in self._ranks.values() if not (s.finished or s.gone)]
            if live:
                self._forget_before(min(live))

    def _reply(self, rank: int, results: list) -> None:
        state = self._ranks[rank]
        state.outstanding = []
        state.results = {}
        self._send(rank, results)

    # -- failures -------------------------------------------------------------------------
    def _check_deadlock(self) -> None:
        if self._connected < len(self._ranks) or self.fatal is not None:
            return
        if self.first_exit is not None:
            # A rank crashed: the launcher reports its exit and traceback. A rank that comes
            # to wait for it afterwards is told so, not diagnosed with a deadlock (the crash
            # and the request reach us in either order).
            self._abort_waiting(f"rank {self.first_exit} exited")
            return
        live = {r: s for r, s in self._ranks.items() if not (s.finished or s.gone)}
        if all(s.outstanding or s.side_wait for s in live.values()) and \
                any(s.side_wait and s.side_wait[0] == "gaps" for s in live.values()):
            # a rank waits for its leader's gaps while the leader waits for it: no sharing
            # this iteration, never a hang
            self._release_gap_waiters()
        waiting = {r: s for r, s in live.items() if s.outstanding}
        if not waiting:
            return
        # A member that finished its script can never join: report that at once.
        for r, s in waiting.items():
            for req in s.outstanding:
                if req.key in s.results:
                    continue
                done = [m for m in req.members if m in self._ranks and self._ranks[m].finished]
                if done:
                    self._fail(
                        f"rank {r} waits in {_describe(req)} at {req.site}, but rank(s) "
                        f"{', '.join(map(str, done))} of that group already finished the "
                        "script without calling it.")
                    return
        if len(waiting) < len(live):
            return  # someone is still running and may yet arrive
        lines = ["deadlock: every rank is waiting in a collective that cannot complete."]
        for r in sorted(waiting):
            for req in waiting[r].outstanding:
                if req.key in waiting[r].results:
                    continue
                arrived = sorted(self._pending.get(req.key, {}))
                missing = [m for m in self._running_members(req) if m not in arrived]
                lines.append(f"  rank {r}: {_describe(req)} at {req.site} "
                             f"(waiting for rank(s) {', '.join(map(str, missing))})")
        lines.append("Ranks must call collectives of a group in the same order; "
                     "see the call sites above.")
        self._fail("\n".join(lines))

    def _fail(self, message: str) -> None:
        if self.fatal is None:
            self.fatal = message
            self._abort_waiting(message)
            self.fatal_event.set()

    def _abort_waiting(self, message: str) -> None:
        for s in self._ranks.values():
            if (s.outstanding or s.side_wait) and s.conn is not None:
                s.outstanding = []
                s.side_wait = None
                try:
                    s.conn.send(Abort(message))
                except OSError:
                    pass


def _mismatch(a: Request, b: Request) -> str | None:
    if a.kind != b.kind:
        return "different collectives"
    if a.members != b.members:
        return "different member ranks"
    if a.root != b.root:
        return "different roots"
    if a.signature != b.signature:
        return "different sizes or dtypes"
    return None


def _group(req: Request) -> str:
    """The group's description (`new_group(group_desc=...)`, DeviceMesh's dimension), else its
    name; torch describes a group created without one as "undefined"."""
    return req.group_desc if req.group_desc not in ("", "undefined") else str(req.key[0])


def _describe(req: Request) -> str:
    group = _group(req)
    return f"{req.kind} on group {group} ({req.nbytes:,} bytes, ranks {list(req.members)})"


def _mismatch_message(problem: str, a: Request, b: Request) -> str:
    return (f"collective mismatch ({problem}) in call #{a.key[-1]} of group {_group(a)}:\n"
            f"  rank {a.rank}: {_describe(a)}, signature {a.signature}\n    at {a.site}\n"
            f"  rank {b.rank}: {_describe(b)}, signature {b.signature}\n    at {b.site}\n"
            "Every member must make the same collective call, in the same order.")
