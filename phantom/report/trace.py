"""Chrome trace-event JSON (loads in Perfetto and chrome://tracing) from a run's recordings.

One process per rank (pid = rank), with threads (tracks):
  tid 0            host: kernel launches (op name), NCCL launches, synchronisations
  tid 1            iterations: one span per optimizer step over its GPU window, with the
                   step's compute / exposed-communication / idle split
  tid 100 + S      CUDA stream S: kernels (name, class, shapes, where the time came from)
                   and, on NCCL streams, collectives (bytes, group, algorithm, protocol,
                   achieved bandwidth) with their network phase nested inside
plus a "GPU memory (MiB)" counter (allocated, reserved). A distributed run adds a process
for the network: one utilisation counter per busy link.

Timestamps are simulated microseconds from the start of the rank's recording. Each rank writes
its part as JSON lines (`write_part`); the launcher concatenates the parts into one file
(`merge`), which holds only one rank's events in memory at a time.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator

if TYPE_CHECKING:
    from phantom.report.recorder import Recorder

TRACE_SCHEMA = "phantom.trace/1"
HOST_TID = 0
ITERATION_TID = 1
STREAM_TID_BASE = 100
NETWORK_PID = 1_000_000  # above any rank
MAX_NETWORK_LINKS = 32


def _us(ns: float) -> float:
    return round(ns / 1e3, 3)


def _x(name: str, pid: int, tid: int, start_ns: float, end_ns: float, cat: str,
       args: dict | None = None) -> dict[str, Any]:
    # The duration is the difference of the rounded ends, so that ts + dur is the rounded end
    # and back-to-back kernels stay back to back (rounding both separately can overlap them).
    ts = _us(start_ns)
    ev = {"name": name, "cat": cat, "ph": "X", "pid": pid, "tid": tid, "ts": ts,
          "dur": max(0.0, round(_us(end_ns) - ts, 3))}
    if args:
        ev["args"] = args
    return ev


def _meta(kind: str, pid: int, tid: int | None, **args: Any) -> dict[str, Any]:
    ev: dict[str, Any] = {"name": kind, "ph": "M", "pid": pid, "args": args}
    if tid is not None:
        ev["tid"] = tid
    return ev


def _source_label(source: str) -> str:
    """Where a kernel's time came from: the measured database, or a model."""
    return "database" if source == "db" else "model"


def rank_events(rec: "Recorder", rank: int, gpu_name: str) -> list[dict[str, Any]]:
    """Every trace event of one rank, each track sorted by time (parents before children)."""
    pid = rank
    t = rec.trace
    events: list[dict[str, Any]] = [
        _meta("process_name", pid, None, name=f"rank {rank} ({gpu_name})"),
        _meta("process_sort_index", pid, None, sort_index=rank),
        _meta("thread_name", pid, HOST_TID, name="host"),
        _meta("thread_sort_index", pid, HOST_TID, sort_index=0),
        _meta("thread_name", pid, ITERATION_TID, name="iterations (GPU)"),
        _meta("thread_sort_index", pid, ITERATION_TID, sort_index=1),
    ]
    tracks: dict[int, list[dict[str, Any]]] = {HOST_TID: [], ITERATION_TID: []}
    for name, s, e, cat in t.host:
        tracks[HOST_TID].append(_x(name, pid, HOST_TID, s, e, cat))
    # Iteration windows (GPU time) of the traced iterations, with the host's step on the host.
    for i, it in enumerate(rec.breakdown.iterations):
        if i not in rec.traced_iterations:
            continue
        tracks[ITERATION_TID].append(_x(
            f"iteration {i}", pid, ITERATION_TID, it["start_ms"] * 1e6, it["end_ms"] * 1e6,
            "iteration", {k: round(v, 6) for k, v in it.items()
                          if k in ("compute_ms", "exposed_comm_ms", "exposed_comm_wait_ms",
                                    "idle_ms", "time_ms")}))
    stream_names = dict(rec.breakdown.stream_names)
    for sid, s, e, name, cls, source, shapes in t.kernels:
        args: dict[str, Any] = {"class": cls, "time_source": _source_label(source),
                                "cost_model": source}
        if shapes:
            args["shapes"] = shapes
        tracks.setdefault(STREAM_TID_BASE + sid, []).append(
            _x(name, pid, STREAM_TID_BASE + sid, s, e, "kernel", args))
    for sid, s, e, infos in t.comms:
        tid = STREAM_TID_BASE + sid
        track = tracks.setdefault(tid, [])
        first = infos[0]
        if len(infos) == 1:
            args = {k: v for k, v in first.items() if k not in ("network_start", "network_end")}
            args["wait_us"] = round(max(0.0, first["network_start"] - s) / 1e3, 3)
            args["algbw_GBps"] = round(first["algbw_GBps"], 3)
            args["busbw_GBps"] = round(first["busbw_GBps"], 3)
            track.append(_x(f"nccl:{first['kind']}", pid, tid, s, e, "collective", args))
            ns, ne = max(s, first["network_start"]), min(e, first["network_end"])
            if ne > ns:
                track.append(_x(f"{first['kind']} (network)", pid, tid, ns, ne, "network",
                                {"algorithm": first["algorithm"], "protocol": first["protocol"]}))
        else:
            ops = [{k: (round(v, 3) if isinstance(v, float) else v) for k, v in i.items()}
                   for i in infos]
            track.append(_x(f"nccl:{first['kind']} x{len(infos)}", pid, tid, s, e, "collective",
                            {"ops": ops, "bytes": sum(i["bytes"] for i in infos),
                             "group": first["group"]}))
    for tid in sorted(tracks):
        if tid >= STREAM_TID_BASE:
            sid = tid - STREAM_TID_BASE
            name = stream_names.get(sid) or ("stream 0 (default)" if sid == 0 else f"stream {sid}")
            events.append(_meta("thread_name", pid, tid, name=name))
            events.append(_meta("thread_sort_index", pid, tid, sort_index=tid))
        events.extend(_well_nested(tracks[tid]))
    last = None
    for host_ns, allocated, reserved in sorted(t.memory, key=lambda m: m[0]):
        ev = {"name": "GPU memory (MiB)", "ph": "C", "pid": pid, "ts": _us(host_ns),
              "args": {"allocated": round(allocated / 2**20, 3),
                       "reserved": round(reserved / 2**20, 3)}}
        if last is not None and last["ts"] == ev["ts"]:
            last["args"] = ev["args"]  # several changes at one instant: keep the last
            continue
        events.append(ev)
        last = ev
    return events


def _well_nested(track: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Sort a track by start (longer first at equal start, so parents precede children) and
    clip any span that would end after its enclosing span: trace viewers need complete
    events on one track to nest. Spans on one CUDA stream never overlap by construction; on
    the host track two threads of the script (DDP's autograd thread) can interleave."""
    track.sort(key=lambda ev: (ev["ts"], -ev["dur"]))
    stack: list[float] = []  # end times of the open spans
    half_ns = 5e-4  # times are rounded to 1 ns: closer than this is equal, not an overlap
    for ev in track:
        start = ev["ts"]
        while stack and start >= stack[-1] - half_ns:
            stack.pop()
        end = start + ev["dur"]
        if stack and end > stack[-1] + half_ns:
            ev["dur"] = max(0.0, round(stack[-1] - start, 3))
            end = stack[-1]
        stack.append(end)
    return track


def network_events(usage: dict[str, Any], world_size: int) -> list[dict[str, Any]]:
    """Counters of link utilisation (%, per time bucket) for the busiest links."""
    pid = NETWORK_PID
    events = [_meta("process_name", pid, None, name="network"),
              _meta("process_sort_index", pid, None, sort_index=world_size + 1)]
    w = usage["bucket_ms"] * 1e6
    for link in usage["links"][:MAX_NETWORK_LINKS]:
        name = f"link {link['name']} ({link['kind']}) %"
        prev = None
        series = link["utilization_over_time"]
        for i, u in enumerate(series):
            v = round(100 * u, 2)
            if v == prev:
                continue
            events.append({"name": name, "ph": "C", "pid": pid, "ts": _us(i * w), "args": {"util": v}})
            prev = v
        if series and prev != 0:
            events.append({"name": name, "ph": "C", "pid": pid, "ts": _us(len(series) * w),
                           "args": {"util": 0}})
    return events


def write_part(path: Path | str, events: Iterable[dict[str, Any]]) -> None:
    with open(path, "w") as f:
        for ev in events:
            f.write(json.dumps(ev, separators=(",", ":")))
            f.write("\n")


def merge(parts: list[Path], out: Path | str, metadata: dict[str, Any],
          extra: Iterable[dict[str, Any]] = ()) -> int:
    """Concatenate rank parts (JSON lines) into one trace file; returns the event count."""
    n = 0
    with open(out, "w") as f:
        f.write('{"displayTimeUnit":"ns","otherData":')
        f.write(json.dumps(metadata, separators=(",", ":")))
        f.write(',"traceEvents":[\n')
        for part in parts:
            with open(part) as src:
                for line in src:
                    line = line.strip()
                    if line:
                        f.write(",\n" if n else "")
                        f.write(line)
                        n += 1
        for ev in extra:
            f.write(",\n" if n else "")
            f.write(json.dumps(ev, separators=(",", ":")))
            n += 1
        f.write("\n]}\n")
    return n


# -- validation (tests, and `phantom report --check-trace`) -----------------------------------
PHASES = {"X", "B", "E", "C", "M", "i", "I", "s", "t", "f"}
_EPS_US = 1e-3  # 1 ns: timestamps are written with 3 decimals of a microsecond


def validate(trace: dict[str, Any] | list) -> list[str]:
    """Problems with a trace against the trace-event format; empty when it is well formed.

    Checks: every event has a known `ph`, a `name`, an integer `pid`, a `tid` where the phase
    needs one, a numeric non-negative `ts` (not for metadata) and `dur` for complete events;
    B/E pairs match per track; complete events on one track nest (a span that starts inside
    another ends inside it); timestamps never decrease along a track in file order.
    """
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    errors: list[str] = []
    last_ts: dict[tuple, float] = {}
    stacks: dict[tuple, list[float]] = {}
    begins: dict[tuple, list[str]] = {}
    for i, ev in enumerate(events):
        where = f"event {i} ({ev.get('name')!r})"
        ph = ev.get("ph")
        if ph not in PHASES:
            errors.append(f"{where}: unknown ph {ph!r}")
            continue
        if not isinstance(ev.get("name"), str):
            errors.append(f"{where}: no name")
        if not isinstance(ev.get("pid"), int):
            errors.append(f"{where}: pid must be an integer")
        if ph == "M":
            if not isinstance(ev.get("args"), dict):
                errors.append(f"{where}: metadata without args")
            continue
        ts = ev.get("ts")
        if not isinstance(ts, (int, float)) or ts < 0:
            errors.append(f"{where}: bad ts {ts!r}")
            continue
        if ph in ("X", "B", "E", "i", "I") and "tid" not in ev and ph != "I":
            errors.append(f"{where}: no tid")
        if "args" in ev and not isinstance(ev["args"], dict):
            errors.append(f"{where}: args must be an object")
        if ph == "C":
            key = (ev.get("pid"), "counter", ev.get("name"))
            if not ev.get("args") or not all(isinstance(v, (int, float)) for v in ev["args"].values()):
                errors.append(f"{where}: counter needs numeric args")
        else:
            key = (ev.get("pid"), ev.get("tid"))
        if ts + _EPS_US < last_ts.get(key, float("-inf")):
            errors.append(f"{where}: ts {ts} before the previous event's {last_ts[key]} on {key}")
        last_ts[key] = ts
        if ph == "X":
            dur = ev.get("dur")
            if not isinstance(dur, (int, float)) or dur < 0:
                errors.append(f"{where}: complete event needs dur >= 0, got {dur!r}")
                continue
            stack = stacks.setdefault(key, [])
            while stack and ts >= stack[-1] - _EPS_US:
                stack.pop()
            if stack and ts + dur > stack[-1] + _EPS_US:
                errors.append(f"{where}: [{ts}, {ts + dur}] overlaps its enclosing span "
                              f"(ends {stack[-1]}) on {key} without nesting")
            stack.append(ts + dur)
        elif ph == "B":
            begins.setdefault(key, []).append(ev["name"])
        elif ph == "E":
            open_ = begins.get(key)
            if not open_:
                errors.append(f"{where}: E without B on {key}")
            else:
                open_.pop()
    for key, open_ in begins.items():
        if open_:
            errors.append(f"{key}: B events never ended: {open_}")
    return errors


def iter_tracks(trace: dict[str, Any]) -> Iterator[tuple[tuple, list[dict[str, Any]]]]:
    """Each track's non-metadata events in file order (for tests and tools): a thread's key is
    (pid, tid), a counter's (pid, "counter", name)."""
    tracks: dict[tuple, list] = {}
    for ev in trace["traceEvents"]:
        ph = ev.get("ph")
        if ph == "C":
            tracks.setdefault((ev.get("pid"), "counter", ev.get("name")), []).append(ev)
        elif ph != "M":
            tracks.setdefault((ev.get("pid"), ev.get("tid")), []).append(ev)
    yield from tracks.items()
