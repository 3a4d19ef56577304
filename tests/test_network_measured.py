"""Measured collective tables: matching, interpolation, and their use by the simulator."""
from __future__ import annotations

import pytest

from phantom.network import CollectiveOp, NetworkSimulator, load_cluster
from phantom.network.measured import MeasuredTable

TABLE = {"header": {"gpu": "NVIDIA H200", "ranks": 2},
         "times_us": {"all_reduce": [[1000, 10.0], [100000, 100.0], [10000000, 1000.0]]}}


def test_log_log_interpolation_and_ends():
    t = MeasuredTable(TABLE, "t.json")
    assert t.time_ns("all_reduce", 10000) == pytest.approx(31_622.8, rel=1e-3)  # sqrt(10) x 10 us
    assert t.time_ns("all_reduce", 10) == 10_000.0          # below the grid: the smallest time
    assert t.time_ns("all_reduce", 2e7) == 2_000_000.0      # above: bandwidth-bound, linear


def test_table_applies_only_to_its_gpu_rank_count_and_single_node():
    t = MeasuredTable(TABLE, "t.json")
    op2 = CollectiveOp("all_reduce", (0, 1), 100000)
    assert t.matches(load_cluster(None, nproc_per_node=2, gpu="H200"), op2)
    assert not t.matches(load_cluster(None, nproc_per_node=2, gpu="H100"), op2)
    assert not t.matches(load_cluster(None, nproc_per_node=4, gpu="H200"),
                         CollectiveOp("all_reduce", (0, 1, 2, 3), 100000))
    assert not t.matches(load_cluster(None, nproc_per_node=2, gpu="H200"),
                         CollectiveOp("broadcast", (0, 1), 100000, root=0))


def test_simulator_uses_the_measured_time_on_an_idle_network():
    cluster = load_cluster(None, nproc_per_node=2, gpu="H200")
    sim = NetworkSimulator(cluster, measured=[MeasuredTable(TABLE, "t.json")])
    assert sim.estimate(CollectiveOp("all_reduce", (0, 1), 100000)).duration_ns == pytest.approx(100_000)
    plain = NetworkSimulator(cluster, measured=[])
    assert plain.estimate(CollectiveOp("all_reduce", (0, 1), 100000)).duration_ns != pytest.approx(100_000)


def test_contention_still_comes_from_the_flow_model():
    cluster = load_cluster(None, nproc_per_node=2, gpu="H200")
    sim = NetworkSimulator(cluster, measured=[MeasuredTable(TABLE, "t.json")])
    op = CollectiveOp("all_reduce", (0, 1), 10_000_000)
    alone = sim.estimate(op).duration_ns
    first = sim.schedule(op, 0.0)
    second = sim.schedule(op, 0.0)  # same links, same time: slower than alone
    assert first.duration_ns == pytest.approx(alone)
    assert second.duration_ns > 1.5 * alone
