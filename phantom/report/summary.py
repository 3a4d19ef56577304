"""Build the run report from a finished simulation, print it, write it as JSON.

The JSON schema is versioned by `SCHEMA` and documented in docs/report-schema.md; add
fields freely, but rename or remove only with a new version.
"""
from __future__ import annotations

import json
import re
import statistics
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from phantom.sim import Simulation
    from phantom.config import RunConfig

SCHEMA = "phantom.run/1"
GIB = 1024**3
TOP_OPS = 15


def _iteration_times_ms(sim: "Simulation") -> list[float]:
    """GPU-completion time between consecutive optimizer steps (the first from t=0)."""
    times, prev = [], 0.0
    for it in sim.iterations:
        times.append((it.gpu_done_ns - prev) / 1e6)
        prev = it.gpu_done_ns
    return times


def _steady_state(times: list[float]) -> list[float]:
    # The first iteration includes setup (model build, first allocations); drop it when
    # there are enough iterations for the rest to speak for themselves.
    return times[1:] if len(times) >= 3 else times


def _busy_fraction(sim: "Simulation", end_ns: float) -> float:
    """GPU busy share over the steady-state iterations (or the whole run without them)."""
    its = sim.iterations
    if len(its) >= 3:
        first, last = its[1], its[-1]
        span = last.gpu_done_ns - first.gpu_done_ns
        return (last.gpu_busy_ns - first.gpu_busy_ns) / span if span > 0 else 0.0
    return sim.timeline.gpu_busy_ns / end_ns if end_ns else 0.0


def build_report(sim: "Simulation", config: "RunConfig", exit_code: int,
                 wall_seconds: float) -> dict[str, Any]:
    times = _iteration_times_ms(sim)
    steady = _steady_state(times)
    end_ns = max(sim.timeline.host_ns, sim.timeline.gpu_idle_ns())
    total_gpu_ns = sum(sim.class_gpu_ns.values()) or 1.0
    alloc = sim.allocator
    top = sorted(sim.op_stats.items(), key=lambda kv: kv[1].gpu_ns, reverse=True)[:TOP_OPS]
    n_iters = len(times)
    first = sim.first_op_wall_ns
    setup_s = (first - sim.wall_start_ns) / 1e9 if first is not None else wall_seconds
    return {
        "schema": SCHEMA,
        "gpu": asdict(sim.gpu),
        "command": {"script": config.script, "module": config.module, "args": config.args},
        "exit_code": exit_code,
        "iterations": {
            "count": n_iters,
            "times_ms": times,
            "median_ms": statistics.median(steady) if steady else None,
            "mean_ms": statistics.fmean(steady) if steady else None,
        },
        "memory": {
            "peak_allocated_bytes": alloc.max_allocated_bytes,
            "peak_reserved_bytes": alloc.max_reserved_bytes,
            "capacity_bytes": sim.gpu.memory_bytes,
            **_recorded_memory(sim),
        },
        "gpu_busy_fraction": _busy_fraction(sim, end_ns),
        "simulated_seconds": end_ns / 1e9,
        "op_classes": {
            cls: {"gpu_ms": ns / 1e6, "share": ns / total_gpu_ns}
            for cls, ns in sorted(sim.class_gpu_ns.items(), key=lambda kv: -kv[1])
        },
        "cost_sources": {src: {"gpu_ms": ns / 1e6, "share": ns / total_gpu_ns}
                         for src, ns in sim.source_gpu_ns.items()},
        "top_ops": [{"op": name, "calls": s.calls, "gpu_ms": s.gpu_ns / 1e6} for name, s in top],
        "cost_database": _cost_database(sim, total_gpu_ns),
        "distributed": _distributed(sim, config),
        "power": _power(sim),
        **_recorded(sim),
        "simulation": {
            "ops_intercepted": sim.ops_intercepted,
            "data_reads": sim.data_reads,
            "first_data_read": sim.first_data_read,
            "stopped": sim.stopped,
            "stopped_above_ms": sim.stopped_above_ms,
            "wall_seconds": wall_seconds,
            "setup_wall_seconds": setup_s,
            # Interception throughput, from the first simulated op on (excludes imports).
            "ops_per_wall_second": sim.ops_intercepted / (wall_seconds - setup_s)
            if wall_seconds > setup_s else None,
            "wall_seconds_per_iteration": wall_seconds / n_iters if n_iters else None,
            # every host ns of a multi-GPU run's rank is charged at the slowest rank's pace
            "rank_spread": sim.gpu.host_rank_spread if sim.options.rank_spread is None else sim.options.rank_spread,
            "rank_pace": sim.host.rank_pace,
            "host_time": sim.host.report(),
        },
    }


def _power(sim: "Simulation") -> dict[str, Any]:
    """The power limit and what it cost the compute kernels (engine/power.py)."""
    gov = sim.timeline.governor
    return {"limit_w": sim.gpu.tdp_watts, "modelled": gov is not None,
            "compute_clock_scale": gov.mean_scale() if gov else None,
            "stretched_ms": gov.stretched_ns / 1e6 if gov else None,
            "gemm_db_clock_share": gov.model.gemm_db_clock_share if gov else None}


def _recorded_memory(sim: "Simulation") -> dict[str, Any]:
    """What was live at the allocated peak, by category, and memory over time (recorded runs;
    None otherwise)."""
    rec = sim.recorder
    if rec is None:
        return {"at_peak": None, "over_time": None}
    return {"at_peak": rec.memory.breakdown(sim.allocator.max_allocated_bytes),
            "over_time": rec.memory_over_time.to_dict()}


def _recorded(sim: "Simulation") -> dict[str, Any]:
    """Fields only a recording run fills (phantom run --out/--trace); None otherwise."""
    rec = sim.recorder
    if rec is None:
        return {"breakdown": None, "timeline_overview": None, "top_collectives": None,
                "trace": None}
    return {
        "breakdown": rec.breakdown.summary(),
        "timeline_overview": rec.breakdown.overview,
        "top_collectives": rec.top_collectives() if sim.comm is not None else [],
        "trace": {"rank_traced": rec.rank_traced,
                  "iterations": sorted(rec.traced_iterations) if rec.rank_traced else []},
    }


def _cost_database(sim: "Simulation", total_gpu_ns: float) -> dict[str, Any]:
    """Share of simulated GPU time from measured database rows vs the fallback model."""
    from phantom.cost.dbmodel import DB_SOURCE

    model = sim.cost_model
    db_ns = sim.source_gpu_ns.get(DB_SOURCE, 0.0)
    return {
        "paths": list(getattr(model, "db_paths", [])),
        "hit_share": db_ns / total_gpu_ns,
        "fallback_share": 1.0 - db_ns / total_gpu_ns if sim.source_gpu_ns else 0.0,
        "borrowed_from": getattr(getattr(model, "borrowed_from", None), "name", None),
        "top_misses": model.top_misses(10) if hasattr(model, "top_misses") else [],
    }


def print_summary(report: dict[str, Any], file: TextIO) -> None:
    it, mem, sim = report["iterations"], report["memory"], report["simulation"]
    median = f"{it['median_ms']:.2f} ms" if it["median_ms"] is not None else "n/a (no optimizer step)"
    lines = [
        "",
        f"phantom summary ({report['gpu']['name']}, {report['gpu']['memory_bytes'] / GIB:.1f} GiB)",
        f"  iterations         {it['count']}   median {median}",
        f"  peak memory        {mem['peak_allocated_bytes'] / GIB:.2f} GiB allocated, "
        f"{mem['peak_reserved_bytes'] / GIB:.2f} GiB reserved",
        f"  GPU busy           {100 * report['gpu_busy_fraction']:.1f}% "
        f"(steady-state iterations); {report['simulated_seconds']:.3f} s simulated in all",
        "  GPU time by class  " + ", ".join(
            f"{cls} {100 * v['share']:.1f}%" for cls, v in list(report["op_classes"].items())[:8]),
        "  top ops            " + ", ".join(
            f"{o['op']} {o['gpu_ms']:.1f} ms" for o in report["top_ops"][:5]),
        _db_line(report.get("cost_database")),
        _power_line(report.get("power")),
        f"  simulator          {sim['ops_intercepted']:,} ops in {sim['wall_seconds']:.1f} s wall "
        f"({(sim['ops_per_wall_second'] or 0):,.0f} ops/s)",
        _host_line(sim),
    ]
    reads = _data_read_line(sim)
    if reads:
        lines.append(reads)
    print("\n".join(lines), file=file, flush=True)


def _host_line(sim: dict[str, Any]) -> str:
    """How the host time was charged (host.account.HostAccount.report)."""
    host = sim["host_time"]
    pace = (f"; host time x{sim['rank_pace']:.3f}, the slowest rank's pace"
            if sim.get("rank_pace", 1.0) > 1.0 else "")
    if host["mode"] == "off":
        return "  host               off (--host-time off): GPU time only" + pace
    priced = host["priced_host_ns"] + host["api_host_ns"]
    share = host["costs"]["row_share"]
    torch_part = (f"torch's work {priced / 1e6:.1f} ms from the node's table"
                  + (f" ({100 * share:.0f}% from measured rows)" if share is not None else ""))
    if host["mode"] == "counted":
        replay = host["replay"] or {}
        return (f"  host               counted: the script's Python {host['script_host_ns'] / 1e6:.1f} ms "
                f"from {replay.get('file')} ({replay.get('departed', 0)} segments off its sequence), "
                + torch_part + pace)
    machine = host["machine"] or {}
    return (f"  host               measured: the script's Python {host['script_host_ns'] / 1e6:.1f} ms "
            f"(x{host['ratio']:.2f} to the node; this machine {machine.get('source')}), "
            + torch_part + pace)


def _data_read_line(sim: dict[str, Any]) -> str | None:
    """How many device values the script read, and where first: values phantom does not know
    are placeholders, and a loop that stops on one (early stopping on a loss) stops here."""
    if not sim.get("data_reads"):
        return None
    n = sim["data_reads"]
    site = sim.get("first_data_read") or ""
    found = re.match(r'File "(.*)", line (\d+), in .*\n\s*(.*)', site)
    first = f"{found[1]}:{found[2]}: {found[3].strip()}" if found else " ".join(site.split())
    return (f"  data reads         {n:,} device value{'s' if n != 1 else ''} read (first at {first}); "
            "values phantom does not know read as placeholders (README, 'Data-dependent reads')")


def _power_line(power: dict[str, Any] | None) -> str:
    if not power or not power["modelled"]:
        limit = f"{power['limit_w']} W, " if power else ""
        return f"  power limit        {limit}not modelled for this GPU (its draw was never measured)"
    return (f"  power limit        {power['limit_w']} W: compute kernels ran at "
            f"{power['compute_clock_scale']:.3f} of their unthrottled clock on average "
            f"(+{power['stretched_ms']:.1f} ms in all; GEMMs from the burst clock, which the kernel "
            f"database's back-to-back rows are {power['gemm_db_clock_share']:.3f} of)")


def _db_line(db: dict[str, Any] | None) -> str:
    if not db or not db["paths"]:
        return "  kernel database    none for this GPU: every kernel time from the fallback model"
    names = ", ".join(p.rsplit("/", 1)[-1] for p in db["paths"])
    if db.get("borrowed_from"):
        names += f"; the {db['borrowed_from']}'s rows where this GPU has none, memory-bound ones moved by the model"
    return (f"  kernel database    {100 * db['hit_share']:.1f}% of GPU time from measured rows ({names}), "
            f"{100 * db['fallback_share']:.1f}% fallback")


def write_report(report: dict[str, Any], path: str) -> None:
    with open(path, "w") as f:
        json.dump(report, f, indent=2)
        f.write("\n")


def _distributed(sim: "Simulation", config: "RunConfig") -> dict[str, Any] | None:
    """This rank's place in a distributed run and its collectives (None for one process)."""
    comm = sim.comm
    if comm is None:
        return None
    return {"rank": comm.rank, "world_size": comm.world_size, "nnodes": config.nnodes,
            "nproc_per_node": config.nproc_per_node, "cluster": config.cluster or "nvlink-node",
            "collectives": comm.collectives, "nccl_kernel_ms": comm.comm_gpu_ns / 1e6}
