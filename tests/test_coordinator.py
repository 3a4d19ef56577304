"""The coordinator in-process: matching, timing hand-off, mismatch and deadlock diagnosis."""
from __future__ import annotations

import os
import threading
import time

import pytest

from phantom.distributed.client import CoordinatorAborted, CoordinatorClient
from phantom.distributed.coordinator import Coordinator
from phantom.distributed.wire import ENV_ADDRESS, ENV_AUTHKEY, Request


SIBLINGS: list = []  # what the last schedule() call was given


def _schedule(requests, ready, siblings):
    # 1 ns per byte after the last member is ready: easy to check by hand.
    SIBLINGS[:] = siblings
    return ready, ready + requests[0].nbytes, "ring", "Simple", 4


@pytest.fixture
def clients(tmp_path, monkeypatch):
    def make(world: int):
        address = str(tmp_path / "c.sock")
        key = os.urandom(8)
        coord = Coordinator(world, address, key, _schedule)
        coord.start()
        monkeypatch.setenv(ENV_ADDRESS, address)
        monkeypatch.setenv(ENV_AUTHKEY, key.hex())
        return coord, [CoordinatorClient(r) for r in range(world)]
    return make


def _req(rank, key, kind="all_reduce", members=(0, 1), nbytes=100, ready=0.0, site="x.py:1"):
    return Request(key=key, rank=rank, kind=kind, members=members, nbytes=nbytes,
                   signature=(nbytes,), ready_ns=ready, host_ns=ready, site=site)


def _in_threads(*calls):
    out, threads = [None] * len(calls), []
    for i, fn in enumerate(calls):
        def run(i=i, fn=fn):
            try:
                out[i] = fn()
            except Exception as e:  # noqa: BLE001 - the test inspects it
                out[i] = e
        threads.append(threading.Thread(target=run))
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    return out


def test_collective_starts_when_the_last_member_is_ready(clients):
    coord, (c0, c1) = clients(2)
    r0, r1 = _in_threads(lambda: c0.exchange([_req(0, ("g", 1), ready=10.0)]),
                         lambda: c1.exchange([_req(1, ("g", 1), ready=30.0)]))
    assert r0[0].start_ns == r1[0].start_ns == 30.0
    assert r0[0].end_ns == 130.0
    assert coord.collectives == 1


def test_payloads_reach_every_member(clients):
    _, (c0, c1) = clients(2)
    a, b = _req(0, ("g", 1)), _req(1, ("g", 1))
    a.payload, b.payload = "from0", "from1"
    r0, r1 = _in_threads(lambda: c0.exchange([a]), lambda: c1.exchange([b]))
    assert r0[0].payloads == r1[0].payloads == {0: "from0", 1: "from1"}


def test_mismatch_names_both_call_sites(clients):
    coord, (c0, c1) = clients(2)
    r0, r1 = _in_threads(lambda: c0.exchange([_req(0, ("g", 1), nbytes=100, site="a.py:3")]),
                         lambda: c1.exchange([_req(1, ("g", 1), nbytes=200, site="b.py:7")]))
    assert isinstance(r0, CoordinatorAborted) and isinstance(r1, CoordinatorAborted)
    assert "mismatch" in coord.fatal and "a.py:3" in coord.fatal and "b.py:7" in coord.fatal


def test_crossed_order_is_reported_as_a_deadlock(clients):
    coord, (c0, c1) = clients(2)
    r0, r1 = _in_threads(lambda: c0.exchange([_req(0, ("A", 1), site="a.py:1")]),
                         lambda: c1.exchange([_req(1, ("B", 1), site="b.py:2")]))
    assert isinstance(r0, CoordinatorAborted)
    assert "deadlock" in coord.fatal and "a.py:1" in coord.fatal and "b.py:2" in coord.fatal


def test_a_finished_peer_is_reported(clients):
    coord, (c0, c1) = clients(2)
    c1.finished()
    (r0,) = _in_threads(lambda: c0.exchange([_req(0, ("g", 1), site="a.py:9")]))
    assert isinstance(r0, CoordinatorAborted)
    assert "already finished" in coord.fatal and "a.py:9" in coord.fatal


def test_a_crashed_peer_is_not_reported_as_a_deadlock(clients):
    # The crash (the rank's connection closing) and the survivor's request reach the
    # coordinator in either order; in both the launcher reports the crashed rank's own error.
    coord, (c0, c1) = clients(2)
    c1._conn.close()  # rank 1 dies without finishing its script
    deadline = time.monotonic() + 5
    while coord.first_exit is None and time.monotonic() < deadline:
        time.sleep(0.01)
    (r0,) = _in_threads(lambda: c0.exchange([_req(0, ("g", 1), site="a.py:9")]))
    assert isinstance(r0, CoordinatorAborted) and "rank 1 exited" in str(r0)
    assert coord.fatal is None  # no deadlock diagnosis over the crash


def test_point_to_point_batches_resolve_together(clients):
    _, (c0, c1) = clients(2)
    send01 = _req(0, ("g", "p2p", 0, 1, 1), kind="send_recv", nbytes=50)
    recv10 = _req(0, ("g", "p2p", 1, 0, 1), kind="send_recv", nbytes=50)
    send10 = _req(1, ("g", "p2p", 1, 0, 1), kind="send_recv", nbytes=50)
    recv01 = _req(1, ("g", "p2p", 0, 1, 1), kind="send_recv", nbytes=50)
    # Both ranks post their send first: batched, this must not deadlock.
    r0, r1 = _in_threads(lambda: c0.exchange([send01, recv10]),
                         lambda: c1.exchange([send10, recv01]))
    assert len(r0) == len(r1) == 2


def test_representative_ranks_resolve_replay_and_start_peers(tmp_path, monkeypatch):
    """4 ranks, only rank 0 running: its collectives complete alone, with its payload for
    the others; a send to rank 2 starts rank 2, which replays what it missed."""
    address, key = str(tmp_path / "r.sock"), os.urandom(8)
    started: list[int] = []
    coord = Coordinator(4, address, key, _schedule, running=[0], spawn=started.append)
    coord.start()
    monkeypatch.setenv(ENV_ADDRESS, address)
    monkeypatch.setenv(ENV_AUTHKEY, key.hex())
    c0 = CoordinatorClient(0)
    c0.report_groups([[0, 1], [2, 3]])  # two pipeline stages' data-parallel groups, say
    world = (0, 1, 2, 3)
    req = _req(0, ("world", 1), members=world, ready=5.0)
    req.payload = "from rank 0"
    (res,) = c0.exchange([req])
    assert (res.start_ns, res.end_ns) == (5.0, 105.0)
    assert res.payloads == {r: "from rank 0" for r in world}
    # a collective on {0,1}: its sibling {2,3} runs it too, nobody simulates that group
    (res,) = c0.exchange([_req(0, ("dp01", 1), members=(0, 1))])
    assert SIBLINGS == [(2, 3)]
    # rank 0 sends to rank 2 (on the world group): rank 2 must run
    send = _req(0, ("world", "p2p", 0, 2, 1), kind="send_recv", members=(0, 2), ready=200.0)
    send.group_members = world
    out = {}
    t = threading.Thread(target=lambda: out.update(r=c0.exchange([send])))
    t.start()
    deadline = threading.Event()
    while not started and not deadline.wait(0.01):
        pass
    assert started == [2]
    c2 = CoordinatorClient(2)
    (replayed,) = c2.exchange([_req(2, ("world", 1), members=world, ready=1.0)])
    assert replayed.start_ns == 5.0  # the stored result, not a new placement
    recv = _req(2, ("world", "p2p", 0, 2, 1), kind="send_recv", members=(0, 2), ready=250.0)
    recv.group_members = world
    (got,) = c2.exchange([recv])
    t.join(timeout=10)
    assert got.start_ns == out["r"][0].start_ns == 250.0
    # the send split the classes: {0,1} and {2,3}
    assert coord.classes.classes() == {0: [0, 1], 2: [2, 3]}
    # a rank whose call differs from its representative's is reported
    bad = _req(2, ("dp01", 1), members=(0, 1), nbytes=7)
    with pytest.raises(CoordinatorAborted, match="not like the rank that stood in for it"):
        c2.exchange([bad])
    coord.close()


def test_ranks_of_a_class_charge_their_leaders_host_gaps(clients):
    # With every rank a process, rank 1 (in rank 0's class: the world group makes one class)
    # waits for rank 0's steady gaps of the same iteration and charges those.
    coord, (c0, c1) = clients(2)
    means0, means1 = {("mm", 0): 10.0}, {("mm", 0): 99.0}
    r1, r0 = _in_threads(lambda: c1.share_gaps(3, means1),
                         lambda: (time.sleep(0.2), c0.share_gaps(3, means0))[1])
    assert r0["means"] is None  # the leader charges its own
    assert r1["means"] == means0
    assert c1.share_gaps(2, means1) is None  # an iteration the leader is past: its own


def test_a_rank_waiting_for_gaps_never_deadlocks_its_leader(clients):
    # Rank 0 waits in a collective for rank 1, which waits for rank 0's gaps: rank 1 is
    # released to charge its own, and the collective completes.
    coord, (c0, c1) = clients(2)

    def rank1():
        gaps = c1.share_gaps(0, {})
        return gaps, c1.exchange([_req(1, ("g", 1))])

    r0, r1 = _in_threads(lambda: c0.exchange([_req(0, ("g", 1))]), rank1)
    assert r1[0] is None and r1[1][0].end_ns == r0[0].end_ns  # None: its own gaps
    assert coord.fatal is None


def test_the_calibration_is_measured_once_every_rank_has_asked(clients):
    # A rank still starting up competes with the measurement for the cores (it came out ~30%
    # low so): the lowest rank measures only when all have asked, the others waiting idle.
    coord, (c0, c1) = clients(2)
    events = []

    def measure():
        events.append("measure")
        return {"dispatch_overhead_ns": 1.0}

    def late_rank():
        time.sleep(0.3)
        events.append("rank 1 asks")
        return c1.shared_calibration(measure)

    out = _in_threads(lambda: c0.shared_calibration(measure), late_rank)
    assert events == ["rank 1 asks", "measure"]
    assert out == [{"dispatch_overhead_ns": 1.0}] * 2


def test_the_first_rank_measures_the_calibration_for_all(clients):
    coord, (c0, c1, c2) = clients(3)
    measured = []

    def measure(value):
        def run():
            measured.append(value)
            time.sleep(0.2)
            return {"dispatch_overhead_ns": value}
        return run

    out = _in_threads(lambda: c0.shared_calibration(measure(1.0)),
                      lambda: (time.sleep(0.05), c1.shared_calibration(measure(2.0)))[1],
                      lambda: (time.sleep(0.05), c2.shared_calibration(measure(3.0)))[1])
    assert measured == [1.0]
    assert out == [{"dispatch_overhead_ns": 1.0}] * 3
