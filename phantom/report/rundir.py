"""The run directory (`phantom run --out DIR`) and the trace file (`--trace PATH`).

    DIR/report.json       rank 0's run report (schema in docs/report-schema.md) plus `ranks`
                          (every rank's breakdown, memory, collectives...), `network` (link
                          utilisation) and `run` (what the directory holds)
    DIR/trace.json        the Chrome/Perfetto trace, all traced ranks (pid = rank)
    DIR/config.json       the run's configuration and command line
    DIR/logs/rank<N>.log  each rank's stdout and stderr
    DIR/ranks/rank<N>.json  each rank's full report

Each rank process writes its own report and trace part (`write_rank_outputs`, from the
bootstrap); the launcher, after every rank has exited, assembles the rest (`finish_run`).
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from phantom.report import trace as trace_mod

if TYPE_CHECKING:
    from phantom.config import RunConfig
    from phantom.report.recorder import Recorder

# Fields of a rank's report that are the same on every rank, left out of `ranks[i]`.
_SHARED = ("schema", "gpu", "command", "simulation", "cost_database")


def prepare_run(config: "RunConfig") -> None:
    """Before launch: make the directories the ranks write into (sets `config.parts_dir`)."""
    if not (config.out_dir or config.trace_path):
        return
    if config.out_dir:
        out = Path(config.out_dir)
        (out / "ranks").mkdir(parents=True, exist_ok=True)
        # A directory used before: drop what this run writes anew, so that nothing stale
        # (a trace of more ranks, appended logs) is mistaken for this run's.
        stale = [out / "report.json", out / "report.html", out / "trace.json", out / "config.json",
                 *(out / "ranks").glob("rank*"), *(out / "logs").glob("rank*.log")]
        for f in stale:
            f.unlink(missing_ok=True)
        if not config.log_dir:
            config.log_dir = str(out / "logs")
        Path(config.log_dir).mkdir(parents=True, exist_ok=True)
        config.parts_dir = str(out / "ranks")
    else:
        config.parts_dir = tempfile.mkdtemp(prefix="phantom-trace-")


def write_rank_outputs(config: "RunConfig", rank: int, report: dict[str, Any],
                       recorder: "Recorder | None", gpu_name: str) -> None:
    """In a rank process, at exit: its report, and its trace events if it was traced."""
    parts = Path(config.parts_dir)
    with open(parts / f"rank{rank}.json", "w") as f:
        json.dump(report, f, indent=1)
    if recorder is not None and recorder.rank_traced:
        trace_mod.write_part(parts / f"rank{rank}.trace.jsonl",
                             trace_mod.rank_events(recorder, rank, gpu_name))


def _load(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def finish_run(config: "RunConfig", exit_code: int, link_usage: Any = None,
               argv: list[str] | None = None) -> None:
    """In the launcher, after the run: merge the trace parts and write the run directory."""
    if config.parts_dir is None:
        return
    parts = Path(config.parts_dir)
    ranks = range(config.world_size if config.distributed else 1)
    reports = {r: rep for r in ranks if (rep := _load(parts / f"rank{r}.json")) is not None}
    network = None
    if link_usage is not None:
        span = max((rep.get("simulated_seconds") or 0.0) * 1e9 for rep in reports.values()) \
            if reports else None
        network = link_usage.to_dict(span)
    trace_parts = [parts / f"rank{r}.trace.jsonl" for r in ranks
                   if (parts / f"rank{r}.trace.jsonl").exists()]
    traced = [int(p.name[4:].split(".")[0]) for p in trace_parts]
    trace_files: list[str] = []
    if trace_parts:
        meta = {"phantom": {"schema": trace_mod.TRACE_SCHEMA, "ranks": traced,
                            "world_size": config.world_size, "gpu": config.gpu,
                            "iterations": config.trace_iters, "time_unit": "simulated us"}}
        extra = trace_mod.network_events(network, config.world_size) if network else []
        first = Path(config.out_dir) / "trace.json" if config.out_dir else Path(config.trace_path)
        trace_mod.merge(trace_parts, first, meta, extra)
        trace_files.append(str(first))
        if config.out_dir and config.trace_path:
            shutil.copyfile(first, config.trace_path)
            trace_files.append(config.trace_path)
        if config.out_dir:
            for p in trace_parts:  # merged: the parts would only double the directory's size
                p.unlink()
    if config.out_dir:
        out = Path(config.out_dir)
        _write_config(out, config, argv)
        report = _compose(config, reports, network, exit_code, bool(trace_parts))
        if report is not None:
            with open(out / "report.json", "w") as f:
                json.dump(report, f, indent=1)
                f.write("\n")
    else:
        shutil.rmtree(parts, ignore_errors=True)
    if not config.quiet:
        where = config.out_dir or (trace_files[0] if trace_files else None)
        if where:
            what = "run directory" if config.out_dir else "trace"
            print(f"phantom: {what} written: {where}"
                  + (f" (render it: phantom report {where})" if config.out_dir else ""),
                  file=sys.stderr)


def _write_config(out: Path, config: "RunConfig", argv: list[str] | None) -> None:
    from dataclasses import asdict

    import phantom

    data = {"phantom_version": getattr(phantom, "__version__", None),
            "argv": argv if argv is not None else sys.argv, "cwd": os.getcwd(),
            "config": {k: v for k, v in asdict(config).items() if k != "parts_dir"}}
    with open(out / "config.json", "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")


def _compose(config: "RunConfig", reports: dict[int, dict], network: dict | None,
             exit_code: int, traced: bool) -> dict[str, Any] | None:
    """Rank 0's report (or the lowest rank that wrote one), plus every rank and the network."""
    if not reports:
        return None
    first = reports[min(reports)]
    report = dict(first)
    report["ranks"] = [{"rank": r, **{k: v for k, v in rep.items() if k not in _SHARED}}
                       for r, rep in sorted(reports.items())]
    report["network"] = network
    out = Path(config.out_dir)
    logs = sorted(str(p.relative_to(out)) for p in Path(config.log_dir).glob("rank*.log")) \
        if config.log_dir and Path(config.log_dir).resolve().is_relative_to(out.resolve()) else []
    report["run"] = {
        "exit_code": exit_code,
        "world_size": config.world_size,
        "ranks_reported": sorted(reports),
        "trace": "trace.json" if traced else None,
        "traced_ranks": config.trace_ranks,
        "traced_iterations": config.trace_iters,
        "config": "config.json",
        "logs": logs,
        "rank_reports": [f"ranks/rank{r}.json" for r in sorted(reports)],
    }
    return report
