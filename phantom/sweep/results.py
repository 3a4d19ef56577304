"""A sweep's results: one `PointResult` per point, read from its run report, ranked.

The ranking metric is tokens/s per GPU when the spec says how many tokens an iteration trains
(`tokens_per_iteration`), else the iteration time (then the points must train the same batch
for the order to mean anything: the constraints keep the global batch fixed). Points that ran
out of memory, stopped early or failed rank after the ones that finished, in that order.

`sweep_json` is the document `phantom sweep` writes as sweep.json (schema "phantom.sweep/1"):

    {"schema": "phantom.sweep/1", "name": ..., "source": spec file or "the command line",
     "gpu": {"name", "memory_bytes"}, "world_size", "nnodes", "nproc_per_node",
     "metric": "tokens_per_s_per_gpu" | "iteration_ms",
     "axes": [{"name", "values"}], "derived": [{"name", "expr"}], "constraints": [...],
     "host_time": {"mode", "profile"}, "skipped": [{"values", "reason"}],
     "points": [PointResult as a dict, best first], "best": point id or null,
     "pareto": [point ids on the throughput / peak-memory front]}
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from phantom.sweep.spec import value_text

GIB = 1024**3
SCHEMA = "phantom.sweep/1"
# Order of the statuses in the ranking, and what each means in the table.
STATUSES = {"ok": "ran to its end", "stopped": "stopped early: clearly slower than the best",
            "oom": "out of memory", "failed": "the script failed"}
# torch's (and phantom's allocator's) message: sizes as c10's format_size writes them
OOM_RE = re.compile(r"CUDA out of memory\. Tried to allocate ([\d.]+) (bytes|KiB|MiB|GiB|TiB)\. .*?"
                    r"of which ([\d.]+) (bytes|KiB|MiB|GiB|TiB) is free")
UNITS = {"bytes": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "TiB": 1024**4}


@dataclass
class PointResult:
    """What one point gave."""

    id: str
    """Short name of the point (a hash of its values), its directory under points/."""
    values: dict[str, Any]
    """The axes' and derived parameters' values."""
    status: str
    """ok, stopped, oom or failed (STATUSES)."""
    command: str
    """The `phantom run` command line that runs this point."""
    key: str = ""
    """Cache key: the command, environment, config files, host profile and phantom's code."""
    iteration_ms: float | None = None
    """Median simulated iteration time over the iterations after the first; for a stopped
    point, at least this (and its tokens/s at most what is shown)."""
    iterations: int = 0
    tokens_per_s_per_gpu: float | None = None
    mfu: float | None = None
    """Model FLOPs utilisation (0-1) as the script printed it, where the spec gives a pattern."""
    peak_allocated_bytes: int | None = None
    peak_reserved_bytes: int | None = None
    capacity_bytes: int | None = None
    shortfall_bytes: int | None = None
    """Out of memory: at least this much more memory was needed (the failed allocation less
    what was free)."""
    message: str | None = None
    """Why a point stopped or failed: the last lines of its error."""
    wall_s: float = 0.0
    """Seconds the point's simulation took on this machine."""
    cached: bool = False
    """Read from an earlier sweep's results instead of run."""

    @property
    def headroom_bytes(self) -> int | None:
        if self.capacity_bytes is None or self.peak_reserved_bytes is None or self.status == "oom":
            return None
        return self.capacity_bytes - self.peak_reserved_bytes

    def label(self) -> str:
        return " ".join(f"{k}={value_text(v)}" for k, v in self.values.items())

    def to_json(self) -> dict[str, Any]:
        return asdict(self) | {"headroom_bytes": self.headroom_bytes}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PointResult:
        data = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**data)


def result_from_report(point_id: str, values: dict[str, Any], command: str, report: dict | None,
                       stdout: str, stderr: str, exit_code: int, tokens_per_iteration: float | None,
                       world_size: int, mfu_pattern: str | None, tflops_pattern: str | None = None,
                       peak_tflops: float = 0.0) -> PointResult:
    """A point's result from its run report (None when the run wrote none) and output."""
    r = PointResult(id=point_id, values=values, command=command, status="ok")
    if report is not None:
        _read_report(r, report)
    shortfalls = [_shortfall(m) for m in OOM_RE.finditer(stderr + stdout)] if exit_code else []
    if shortfalls:
        r.status, r.shortfall_bytes = "oom", max(shortfalls)
        r.message = OOM_RE.search(stderr + stdout).group(0)
    elif exit_code != 0 and r.status != "stopped":
        r.status, r.message = "failed", _last_lines(stderr or stdout)
    elif r.status == "ok" and r.iteration_ms is None:
        r.status = "failed"
        r.message = ("no iteration finished: phantom counts iterations at optimizer steps "
                     "(docs/simulation.md), and this run made none")
    if r.iteration_ms and tokens_per_iteration:
        r.tokens_per_s_per_gpu = tokens_per_iteration / (r.iteration_ms / 1e3) / world_size
    if mfu_pattern and (value := _last_number(mfu_pattern, stdout)) is not None:
        r.mfu = value / 100
    elif tflops_pattern and peak_tflops and (value := _last_number(tflops_pattern, stdout)) is not None:
        r.mfu = value / peak_tflops
    return r


def _read_report(r: PointResult, report: dict) -> None:
    times = report["iterations"]["times_ms"]
    steady = sorted(times[1:] if len(times) >= 2 else times)
    if steady:
        mid = len(steady) // 2
        r.iteration_ms = steady[mid] if len(steady) % 2 else (steady[mid - 1] + steady[mid]) / 2
    r.iterations = len(times)
    mem = report["memory"]
    r.peak_allocated_bytes = mem["peak_allocated_bytes"]
    r.peak_reserved_bytes = mem["peak_reserved_bytes"]
    r.capacity_bytes = mem["capacity_bytes"]
    sim = report.get("simulation") or {}
    if sim.get("stopped"):
        # it stopped in an iteration after its first, which took at least stopped_above_ms:
        # the point's time is a lower bound (the first iteration, start-up in it, is not one)
        r.status, r.message = "stopped", sim["stopped"]
        later = times[1:]
        r.iteration_ms = max([sim.get("stopped_above_ms") or 0.0, *later]) or None


def _shortfall(match: re.Match) -> int:
    want = float(match.group(1)) * UNITS[match.group(2)]
    free = float(match.group(3)) * UNITS[match.group(4)]
    return int(max(0.0, want - free))


def _last_number(pattern: str, text: str) -> float | None:
    """The first group of the pattern's last match in `text`, as a number."""
    found = re.findall(pattern, text)
    if not found:
        return None
    last = found[-1][0] if isinstance(found[-1], tuple) else found[-1]
    try:
        return float(str(last).replace(",", ""))
    except ValueError:
        return None


def _last_lines(text: str, n: int = 6) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return "\n".join(lines[-n:])


def rank(results: list[PointResult], metric: str) -> list[PointResult]:
    """Best first: finished points by the metric, then stopped (by what they showed), OOM (by
    shortfall), failed."""
    order = list(STATUSES)

    def key(r: PointResult) -> tuple:
        if r.status == "oom":
            return (order.index("oom"), r.shortfall_bytes or 0, r.id)
        if metric == "tokens_per_s_per_gpu":
            value = -(r.tokens_per_s_per_gpu or 0.0)
        else:
            value = r.iteration_ms if r.iteration_ms is not None else float("inf")
        return (order.index(r.status), value, r.id)

    return sorted(results, key=key)


def pareto(results: list[PointResult], metric: str) -> list[str]:
    """The finished points no other finished point beats on both the metric and peak memory."""
    done = [r for r in results if r.status == "ok" and r.iteration_ms is not None]

    def better(a: PointResult, b: PointResult) -> bool:  # a at least as good as b on both
        if metric == "tokens_per_s_per_gpu":
            speed = (a.tokens_per_s_per_gpu or 0) >= (b.tokens_per_s_per_gpu or 0)
        else:
            speed = a.iteration_ms <= b.iteration_ms
        return speed and (a.peak_reserved_bytes or 0) <= (b.peak_reserved_bytes or 0)

    front = []
    for r in done:
        if not any(o is not r and better(o, r) and not better(r, o) for o in done):
            front.append(r.id)
    return front


@dataclass
class SweepOutcome:
    """Everything a finished sweep reports."""
    header: dict[str, Any]
    """The spec's and the cluster's fields of sweep.json (see the module docstring)."""
    results: list[PointResult]
    """Ranked, best first."""
    metric: str
    skipped: list[dict[str, Any]] = field(default_factory=list)

    @property
    def best(self) -> PointResult | None:
        return self.results[0] if self.results and self.results[0].status == "ok" else None

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, **self.header, "metric": self.metric, "skipped": self.skipped,
                "points": [r.to_json() for r in self.results],
                "best": self.best.id if self.best else None,
                "pareto": pareto(self.results, self.metric)}


# -- the table -------------------------------------------------------------------------------
def _gib(n: int | None) -> str:
    return "-" if n is None else f"{n / GIB:.1f}"


def size_text(n: int | None) -> str:
    """A byte count for a sentence: GiB from 1 GiB up, else MiB."""
    if n is None:
        return "-"
    return f"{n / GIB:.1f} GiB" if n >= GIB else f"{n / 2**20:.0f} MiB"


def table(outcome: SweepOutcome, limit: int | None = None) -> str:
    """The ranked table as text: one row per point, best first."""
    names = list(outcome.results[0].values) if outcome.results else []
    fixed = {n for n in names if len({repr(r.values.get(n)) for r in outcome.results}) == 1}
    names = [n for n in names if n not in fixed]
    head = ["#", *names, "tok/s/GPU", "MFU", "iter ms", "peak GiB", "headroom", "status"]
    rows = []
    shown = outcome.results if limit is None else outcome.results[:limit]
    for i, r in enumerate(shown, 1):
        status = r.status
        if r.status == "oom":
            status = f"OOM, short >= {size_text(r.shortfall_bytes)}"
        elif r.status == "stopped":
            status = "stopped (dominated)"
        elif r.cached:
            status = "ok (cached)"
        below, above = ("<", ">") if r.status == "stopped" else ("", "")
        rows.append([str(i), *(value_text(r.values.get(n, "")) for n in names),
                     "-" if r.tokens_per_s_per_gpu is None else f"{below}{r.tokens_per_s_per_gpu:,.0f}",
                     "-" if r.mfu is None or r.status == "stopped" else f"{100 * r.mfu:.1f}%",
                     "-" if r.iteration_ms is None else f"{above}{r.iteration_ms:,.1f}",
                     _gib(r.peak_reserved_bytes), _gib(r.headroom_bytes), status])
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h)
              for i, h in enumerate(head)]
    lines = [f"the same in every point: {', '.join(f'{n}={value_text(outcome.results[0].values[n])}' for n in sorted(fixed))}"] if fixed and len(outcome.results) > 1 else []
    lines += ["  ".join(h.rjust(w) for h, w in zip(head, widths)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in rows]
    if limit is not None and len(outcome.results) > limit:
        lines.append(f"... {len(outcome.results) - limit} more in sweep.json")
    return "\n".join(lines)

