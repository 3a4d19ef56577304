"""`phantom run --trace/--out`: the Chrome trace-event file, checked against the format."""
from __future__ import annotations

import json

import pytest

from phantom.launcher.args import UsageError, parse_run_args
from phantom.report.trace import ITERATION_TID, NETWORK_PID, STREAM_TID_BASE, iter_tracks, validate
from report_runs import ddp_trace_rank1, fsdp_run, single_run


def _load(path):
    return json.loads(path.read_text())


def _x(trace, **match):
    return [e for e in trace["traceEvents"] if e["ph"] == "X"
            and all(e.get(k) == v for k, v in match.items())]


# -- the validator itself must catch what it claims to ------------------------------------------
def test_validator_rejects_malformed_traces():
    ok = {"name": "k", "ph": "X", "pid": 0, "tid": 1, "ts": 10.0, "dur": 5.0}
    assert validate([ok]) == []
    assert validate([dict(ok, ph="Q")])  # unknown phase
    assert validate([{k: v for k, v in ok.items() if k != "dur"}])  # X without dur
    assert validate([dict(ok, pid="zero")])
    assert validate([dict(ok, ts=-1)])
    # partial overlap on one track: not nested
    assert validate([ok, dict(ok, ts=12.0, dur=10.0)])
    # properly nested and disjoint spans are fine
    assert validate([ok, dict(ok, ts=11.0, dur=2.0), dict(ok, ts=20.0, dur=1.0)]) == []
    # timestamps going back on a track
    assert validate([dict(ok, ts=20.0, dur=1.0), ok])
    # ...but not across tracks
    assert validate([dict(ok, ts=20.0, dur=1.0), dict(ok, tid=2)]) == []
    assert validate([{"name": "b", "ph": "B", "pid": 0, "tid": 0, "ts": 1}])  # unclosed B
    assert validate([{"name": "c", "ph": "C", "pid": 0, "ts": 1, "args": {"v": "x"}}])


def test_back_to_back_kernels_stay_back_to_back_after_rounding():
    """Times are rounded to 1 ns; a kernel must not come out overlapping (and so clipped into)
    the one before it."""
    import random

    from phantom.report.trace import _well_nested, _x

    rng = random.Random(1)
    t, events, durs = 110_588_039.4, [], []
    for _ in range(2000):
        d = rng.uniform(1_000.0, 20_000.0)
        events.append(_x("k", 0, 100, t, t + d, "kernel"))
        durs.append(d / 1e3)
        t += d
    out = _well_nested(events)
    assert validate(out) == []
    assert [e["dur"] for e in out] == pytest.approx(durs, abs=0.0015)


# -- single rank ---------------------------------------------------------------------------------
def test_single_rank_trace_is_well_formed_and_complete():
    out, extra = single_run()
    trace = _load(out / "trace.json")
    assert validate(trace) == []
    assert _load(extra) == trace  # --trace PATH next to --out gets the same file
    assert trace["otherData"]["phantom"]["schema"] == "phantom.trace/1"
    names = {(e["pid"], e.get("tid")): e["args"]["name"] for e in trace["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name"}
    assert names[(0, 0)] == "host" and names[(0, STREAM_TID_BASE)] == "stream 0 (default)"
    kernels = _x(trace, pid=0, tid=STREAM_TID_BASE)
    assert len(kernels) > 50
    mm = [k for k in kernels if k["name"] in ("addmm.default", "mm.default")]
    assert mm and all(k["args"]["class"] == "gemm" for k in mm)
    assert {k["args"]["time_source"] for k in kernels} <= {"database", "model"}
    assert any(k["args"].get("shapes") == [[[1024], "float32"], [[256, 1024], "float32"],
                                           [[1024, 1024], "float32"]] for k in mm)
    assert _x(trace, pid=0, tid=0, name="addmm.default")  # its launch on the host track
    counters = [e for e in trace["traceEvents"] if e["ph"] == "C"]
    assert counters and all(set(c["args"]) == {"allocated", "reserved"} for c in counters)
    assert all(c["args"]["allocated"] <= c["args"]["reserved"] for c in counters)


def test_trace_iters_limits_the_trace_to_those_iterations():
    out, _ = single_run()
    trace = _load(out / "trace.json")
    its = _x(trace, pid=0, tid=ITERATION_TID)
    assert [e["name"] for e in its] == ["iteration 1", "iteration 2"]
    start = its[0]["ts"]
    end = its[-1]["ts"] + its[-1]["dur"]
    for e in _x(trace, pid=0, tid=STREAM_TID_BASE):
        # every traced kernel belongs to (was launched in) iterations 1-2; launched ones run
        # within their windows, give or take the one-step overlap of the last kernels
        assert start - 1.0 <= e["ts"] <= end + 1.0
    report = _load(out / "report.json")
    assert report["run"]["traced_iterations"] == [1, 3]
    assert report["trace"]["iterations"] == [1, 2]


# -- two ranks -----------------------------------------------------------------------------------
def test_two_rank_fsdp_trace_is_well_formed_with_collectives_and_network():
    trace = _load(fsdp_run() / "trace.json")
    assert validate(trace) == []
    pids = {e["pid"] for e in trace["traceEvents"]}
    assert pids == {0, 1, NETWORK_PID}
    for rank in (0, 1):
        colls = [e for e in _x(trace, pid=rank) if e.get("cat") == "collective"]
        kinds = {c["args"]["kind"] for c in colls}
        assert {"all_gather", "reduce_scatter"} <= kinds
        big = [c for c in colls if c["args"]["bytes"] > 2**20]
        assert big
        for c in big:
            a = c["args"]
            assert a["group"].startswith("default_pg") and a["ranks"] == 2
            assert a["algorithm"] in ("ring", "tree", "nvls") and a["protocol"] in ("LL", "LL128", "Simple")
            assert a["algbw_GBps"] > 1 and a["busbw_GBps"] > 0
            assert c["tid"] >= STREAM_TID_BASE
        # each single collective's network phase nests inside its NCCL kernel
        net = [e for e in _x(trace, pid=rank) if e.get("cat") == "network"]
        assert len(net) >= len(big)
        nccl_names = [e["args"]["name"] for e in trace["traceEvents"]
                      if e["ph"] == "M" and e["pid"] == rank and e["name"] == "thread_name"]
        assert any(n.startswith("NCCL default_pg") for n in nccl_names)
    link_counters = [e for e in trace["traceEvents"] if e["pid"] == NETWORK_PID and e["ph"] == "C"]
    assert link_counters and any(e["args"]["util"] > 0 for e in link_counters)


def test_trace_ranks_limits_the_trace_and_works_without_out():
    trace = _load(ddp_trace_rank1())
    assert validate(trace) == []
    assert trace["otherData"]["phantom"]["ranks"] == [1]
    assert {e["pid"] for e in trace["traceEvents"] if e["pid"] != NETWORK_PID} == {1}
    all_reduces = [e for e in _x(trace, pid=1) if e.get("cat") == "collective"
                   and e["args"]["kind"] == "all_reduce"]
    assert all_reduces  # DDP's gradient buckets
    # no kernel was clipped to nothing (every kernel costs at least its launch floor)
    assert min(e["dur"] for e in _x(trace, pid=1) if e.get("cat") == "kernel") > 0.5
    # timestamps never decrease along any track, and kernels of a stream never overlap
    for key, events in iter_tracks(trace):
        ts = [e["ts"] for e in events]
        assert ts == sorted(ts), key
        if key[1] != "counter" and key[1] >= STREAM_TID_BASE:
            kernels = [e for e in events if e.get("cat") in ("kernel", "collective")]
            for a, b in zip(kernels, kernels[1:]):
                assert b["ts"] >= a["ts"] + a["dur"] - 1e-3, (key, a, b)


@pytest.mark.parametrize("argv, message", [
    (["--trace-ranks", "0"], "add --trace PATH or --out DIR"),
    (["--trace", "t.json", "--trace-ranks", "x"], "expected ranks like"),
    (["--trace", "t.json", "--trace-ranks", "3"], "outside the run's 0..0"),
    (["--trace", "t.json", "--trace-iters", "4:2"], "non-empty range"),
    (["--trace", "no/such/dir/t.json"], "directory does not exist"),
])
def test_bad_trace_options_are_clear_errors(tmp_path, argv, message):
    s = tmp_path / "s.py"
    s.write_text("")
    with pytest.raises(UsageError, match=message):
        parse_run_args([*argv, str(s)])


def test_trace_option_values():
    from phantom.launcher.args import parse_iters, parse_ranks

    assert parse_ranks("0,2-3") == [0, 2, 3]
    assert parse_iters("3") == [3, 4] and parse_iters("2:") == [2, None] and parse_iters(":2") == [0, 2]
