"""The sweep's HTML page: one self-contained file that shows which layout is best, and why.

The page inlines plotly.js once (as phantom/report/html.py does), so it opens offline. Sections:
the sweep (cluster, metric, points by status, the best point and its command line); throughput
against peak memory, with the Pareto front, the GPU's capacity and the points that ran out of
memory beyond it; the metric per value of each axis; the ranked table; the skipped combinations.
"""
from __future__ import annotations

import html
import math
import shlex
from pathlib import Path
from typing import Any

from phantom.report.html import figure_html, note, page, section
from phantom.sweep.results import GIB, STATUSES, PointResult

TOKENS = "tokens_per_s_per_gpu"
STATUS_STYLE = {"ok": dict(color="#4C78A8", symbol="circle"),
                "stopped": dict(color="#9D9D9D", symbol="x-open"),
                "oom": dict(color="#E45756", symbol="triangle-up-open")}
FRONT_COLOR = "#F58518"
BEST_COLOR = "#54A24B"
SWEEP_CSS = """
pre.cmd { background: #f3f4f6; border: 1px solid #e5e7eb; border-radius: 4px; padding: 8px 12px;
          font-size: 12.5px; overflow-x: auto; user-select: all; white-space: pre; }
tr.best td { background: #ecfdf5; font-weight: 600; }
tr.front td:first-child::after { content: " \\25C6"; color: #F58518; }
tr.oom td, tr.failed td { color: #888; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td[title] { text-decoration: underline dotted; cursor: help; }
details summary { cursor: pointer; font-size: 13px; }
"""


# -- reading the document ----------------------------------------------------------------------
def _points(sweep: dict[str, Any]) -> list[PointResult]:
    return [PointResult.from_json(p) for p in sweep.get("points") or []]


def _metric_of(p: PointResult, metric: str) -> float | None:
    return p.tokens_per_s_per_gpu if metric == TOKENS else p.iteration_ms


def _finished(points: list[PointResult], metric: str) -> list[PointResult]:
    """Points that gave the metric: those that ran to the end, and those stopped early."""
    return [p for p in points if p.status in ("ok", "stopped") and _metric_of(p, metric) is not None]


def _parameters(sweep: dict[str, Any], points: list[PointResult]) -> list[str]:
    """The axes, then the derived parameters, then any other value the points carry."""
    names = [a["name"] for a in sweep.get("axes") or []]
    names += [d["name"] for d in sweep.get("derived") or [] if d["name"] not in names]
    for p in points:
        names += [k for k in p.values if k not in names]
    return names


def _capacity(sweep: dict[str, Any], p: PointResult | None = None) -> int | None:
    if p is not None and p.capacity_bytes:
        return p.capacity_bytes
    return (sweep.get("gpu") or {}).get("memory_bytes")


# -- formatting --------------------------------------------------------------------------------
def _esc(x: Any) -> str:
    return html.escape(str(x))


def _gib(n: float | None) -> str:
    return "-" if n is None else f"{n / GIB:.1f}"


def _num(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def _mfu(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _metric_title(metric: str) -> str:
    if metric == TOKENS:
        return "tokens/s per GPU (higher is better)"
    return "iteration time, ms (lower is better: axis reversed)"


def _status_text(p: PointResult) -> str:
    if p.status == "oom":
        return f"OOM, short >= {_gib(p.shortfall_bytes)} GiB"
    if p.status == "ok" and p.cached:
        return "ok (cached)"
    return p.status


def _hover(p: PointResult) -> str:
    """A point's values and results, for plotly's hover box."""
    lines = [f"<b>{_esc(p.id)}</b> {_esc(p.label())}",
             f"tok/s/GPU {_num(p.tokens_per_s_per_gpu, ',.0f')} · MFU {_mfu(p.mfu)}",
             f"iteration {_num(p.iteration_ms, ',.1f')} ms",
             f"peak reserved {_gib(p.peak_reserved_bytes)} GiB · headroom "
             f"{_gib(p.headroom_bytes)} GiB",
             f"status: {_esc(_status_text(p))}"]
    return "<br>".join(lines)


def copyable_command(command: str) -> str:
    """The command on several lines, one option per line, joined by backslashes: pasted into a
    shell it is the same command."""
    try:
        argv = shlex.split(command)
    except ValueError:
        return command
    lines: list[list[str]] = [[]]
    for arg in argv:
        if arg.startswith("--") and lines[-1]:
            lines.append([])
        lines[-1].append(shlex.quote(arg))
    return " \\\n    ".join(" ".join(line) for line in lines)


# -- figures -----------------------------------------------------------------------------------
def _scatter(points: list[PointResult], metric: str, name: str, **style: Any) -> Any:
    import plotly.graph_objects as go

    return go.Scatter(x=[(p.peak_reserved_bytes or 0) / GIB for p in points],
                      y=[_metric_of(p, metric) for p in points], name=name,
                      hovertext=[_hover(p) for p in points], hoverinfo="text", **style)


def _status_trace(points: list[PointResult], metric: str, status: str) -> Any | None:
    shown = [p for p in points if p.status == status and p.peak_reserved_bytes is not None]
    if not shown:
        return None
    label = {"ok": "finished", "stopped": "stopped early"}[status]
    return _scatter(shown, metric, label, mode="markers",
                    marker=dict(size=9, line=dict(width=1.5), **STATUS_STYLE[status]))


def _front_trace(points: list[PointResult], front: list[str], metric: str) -> Any | None:
    on = sorted((p for p in points if p.id in front and p.peak_reserved_bytes is not None),
                key=lambda p: p.peak_reserved_bytes)
    if not on:
        return None
    return _scatter(on, metric, "Pareto front", mode="lines",
                    line=dict(color=FRONT_COLOR, width=2, dash="dot", shape="hv"))


def _best_trace(best: PointResult | None, metric: str) -> Any | None:
    if best is None or best.peak_reserved_bytes is None or _metric_of(best, metric) is None:
        return None
    return _scatter([best], metric, f"best ({best.id})", mode="markers",
                    marker=dict(size=16, symbol="star", color=BEST_COLOR,
                                line=dict(width=1, color="#222")))


def _oom_trace(sweep: dict[str, Any], points: list[PointResult], y: float) -> Any | None:
    """Points that ran out of memory, beyond the capacity by at least their shortfall."""
    import plotly.graph_objects as go

    oom = [p for p in points if p.status == "oom" and _capacity(sweep, p) is not None]
    if not oom:
        return None
    xs = [(_capacity(sweep, p) + (p.shortfall_bytes or 0)) / GIB for p in oom]
    return go.Scatter(x=xs, y=[y] * len(oom), mode="markers+text", name="out of memory",
                      text=["OOM"] * len(oom), textposition="top center",
                      textfont=dict(color=STATUS_STYLE["oom"]["color"]),
                      marker=dict(size=11, line=dict(width=2), **STATUS_STYLE["oom"]),
                      hovertext=[_hover(p) for p in oom], hoverinfo="text")


def _bottom(values: list[float], metric: str) -> float:
    """The y at the bottom of the plot: no throughput, or (axis reversed) the longest time."""
    if metric == TOKENS or not values:
        return 0.0
    return 1.1 * max(values)


def throughput_memory_figure(sweep: dict[str, Any]) -> Any:
    """Every finished point at its peak reserved memory and metric; the front; the capacity."""
    import plotly.graph_objects as go

    metric = sweep["metric"]
    points = _points(sweep)
    done = _finished(points, metric)
    best = next((p for p in points if p.id == sweep.get("best")), None)
    traces = [_front_trace(done, sweep.get("pareto") or [], metric),
              _status_trace(done, metric, "ok"), _status_trace(done, metric, "stopped"),
              _best_trace(best, metric),
              _oom_trace(sweep, points, _bottom([_metric_of(p, metric) for p in done], metric))]
    fig = go.Figure([t for t in traces if t is not None])
    capacity = _capacity(sweep)
    if capacity:
        fig.add_vline(x=capacity / GIB, line=dict(color="#E45756", dash="dash", width=1.5),
                      annotation_text=f"GPU memory {capacity / GIB:.0f} GiB",
                      annotation_position="top left")
    fig.update_layout(xaxis_title="peak reserved memory per GPU (GiB)",
                      yaxis_title=_metric_title(metric),
                      yaxis=dict(autorange="reversed" if metric != TOKENS else True))
    return fig


def _varied(names: list[str], done: list[PointResult]) -> list[str]:
    return [n for n in names if len({str(p.values.get(n)) for p in done}) > 1]


def _categories(sweep: dict[str, Any], name: str, done: list[PointResult]) -> list[str]:
    """An axis's values in the spec's order; a derived parameter's sorted (numbers as numbers)."""
    present = {str(p.values.get(name)) for p in done}
    for axis in sweep.get("axes") or []:
        if axis["name"] == name:
            return [str(v) for v in axis["values"] if str(v) in present]
    raw = {str(p.values.get(name)): p.values.get(name) for p in done}
    numeric = all(isinstance(v, (int, float)) for v in raw.values())
    return sorted(present, key=lambda s: (raw[s] if numeric else s))


def _best_per_value(done: list[PointResult], name: str) -> list[PointResult]:
    best: dict[str, PointResult] = {}
    for p in done:  # the document lists points best first
        if p.status == "ok":
            best.setdefault(str(p.values.get(name)), p)
    return list(best.values())


def _axis_traces(done: list[PointResult], name: str, metric: str, first: bool) -> list[Any]:
    """One axis's subplot: a box of the finished points per value, stopped points, the best."""
    import plotly.graph_objects as go

    def x(ps: list[PointResult]) -> list[str]:
        return [str(p.values.get(name)) for p in ps]

    def y(ps: list[PointResult]) -> list[float | None]:
        return [_metric_of(p, metric) for p in ps]

    ok = [p for p in done if p.status == "ok"]
    stopped = [p for p in done if p.status == "stopped"]
    best = _best_per_value(done, name)
    common = dict(hoverinfo="text", showlegend=first)
    return [
        go.Box(x=x(ok), y=y(ok), name="finished", legendgroup="ok", boxpoints="all",
               jitter=0.4, pointpos=0, marker=dict(size=6, color=STATUS_STYLE["ok"]["color"]),
               line=dict(color="#9DB4D3"), fillcolor="rgba(76,120,168,0.08)",
               hovertext=[_hover(p) for p in ok], **common),
        go.Scatter(x=x(stopped), y=y(stopped), mode="markers", name="stopped early",
                   legendgroup="stopped", marker=dict(size=9, **STATUS_STYLE["stopped"]),
                   hovertext=[_hover(p) for p in stopped], **common),
        go.Scatter(x=x(best), y=y(best), mode="markers", name="best per value",
                   legendgroup="best", marker=dict(size=13, symbol="star", color=BEST_COLOR,
                                                   line=dict(width=1, color="#222")),
                   hovertext=[_hover(p) for p in best], **common),
    ]


def axis_effects_figure(sweep: dict[str, Any]) -> tuple[Any, int] | None:
    """The metric per value of each parameter that varies among finished points, one subplot
    each; None when none varies. Returns the figure and its number of rows of subplots."""
    from plotly.subplots import make_subplots

    metric = sweep["metric"]
    points = _points(sweep)
    done = _finished(points, metric)
    names = _varied(_parameters(sweep, points), done)
    if not names:
        return None
    cols = min(len(names), 3)
    rows = math.ceil(len(names) / cols)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=names, horizontal_spacing=0.06,
                        vertical_spacing=0.18 if rows > 1 else 0.1)
    for i, name in enumerate(names):
        row, col = divmod(i, cols)
        for trace in _axis_traces(done, name, metric, first=i == 0):
            fig.add_trace(trace, row=row + 1, col=col + 1)
        fig.update_xaxes(type="category", categoryorder="array",
                         categoryarray=_categories(sweep, name, done), row=row + 1, col=col + 1)
    if metric != TOKENS:
        fig.update_yaxes(autorange="reversed")
    fig.update_yaxes(title_text=_metric_title(metric).split(" (")[0], col=1)
    fig.update_layout(boxmode="overlay")
    return fig, rows


# -- sections ----------------------------------------------------------------------------------
def _cards(cards: list[tuple[str, Any]]) -> str:
    return '<div class="cards">' + "".join(
        f'<div class="card"><div class="v">{_esc(v)}</div><div class="k">{_esc(k)}</div></div>'
        for k, v in cards) + "</div>"


def _counts(points: list[PointResult]) -> str:
    return " · ".join(f"{sum(p.status == s for p in points)} {s}" for s in STATUSES)


def _cluster_cards(sweep: dict[str, Any], points: list[PointResult]) -> list[tuple[str, Any]]:
    gpu = sweep.get("gpu") or {}
    host = sweep.get("host_time") or {}
    memory = gpu.get("memory_bytes")
    return [
        ("GPU", f"{gpu.get('name', '?')}" + (f", {memory / GIB:.0f} GiB" if memory else "")),
        ("world size", f"{sweep.get('world_size', '?')} = {sweep.get('nnodes', '?')} nodes x "
                       f"{sweep.get('nproc_per_node', '?')}"),
        ("metric", _metric_title(sweep["metric"]).split(" (")[0]),
        ("host time", host.get("mode", "?") + (f" ({host['profile']})" if host.get("profile")
                                               else "")),
        ("points by status", _counts(points)),
    ]


def _best_cards(best: PointResult) -> list[tuple[str, Any]]:
    return [("best point", f"{best.id}: {best.label()}"),
            ("tokens/s per GPU", _num(best.tokens_per_s_per_gpu, ",.0f")),
            ("MFU", _mfu(best.mfu)), ("iteration", f"{_num(best.iteration_ms, ',.1f')} ms"),
            ("peak reserved", f"{_gib(best.peak_reserved_bytes)} GiB"),
            ("headroom", f"{_gib(best.headroom_bytes)} GiB")]


def _space(sweep: dict[str, Any]) -> str:
    """The axes, derived parameters and constraints, in one line."""
    parts = [f"{a['name']} in {{{', '.join(str(v) for v in a['values'])}}}"
             for a in sweep.get("axes") or []]
    parts += [f"{d['name']} = {d['expr']}" for d in sweep.get("derived") or []]
    parts += [f"where {c}" for c in sweep.get("constraints") or []]
    return "Searched: " + "; ".join(parts) + "." if parts else ""


def _summary(sweep: dict[str, Any], points: list[PointResult]) -> str:
    body = _cards(_cluster_cards(sweep, points))
    best = next((p for p in points if p.id == sweep.get("best")), None)
    if best is None:
        body += note("No point finished: every point ran out of memory, stopped or failed, so "
                      "there is no best layout.")
    else:
        body += "<h2>Best point</h2>" + _cards(_best_cards(best))
        body += f'<pre class="cmd">{_esc(copyable_command(best.command))}</pre>'
    space = _space(sweep)
    return body + (note(space) if space else "")


def _plots(sweep: dict[str, Any], points: list[PointResult]) -> list[str]:
    metric = sweep["metric"]
    done = _finished(points, metric)
    body = figure_html(throughput_memory_figure(sweep), "throughput-memory", 480, top=50,
                       legend_y=1.06)
    body += note("Each marker is a point at its peak reserved memory (the most any rank "
                  "reserved). The dotted line joins the Pareto front: the points no other point "
                  "beats on both the metric and memory. OOM markers sit at the capacity plus "
                  "the least extra memory the point needed.")
    if not done:
        body += note("No point finished: none has a throughput to plot.")
    out = [section("Throughput and memory", body, "throughput-memory")]
    effects = axis_effects_figure(sweep)
    if effects is None:
        body = note("No parameter takes more than one value among the finished points.")
    else:
        fig, rows = effects
        body = figure_html(fig, "axis-effects", 120 + 300 * rows, top=50, legend_y=1.06)
        body += note("Per parameter: every finished point with each value (box), and the best "
                      "one with that value (star).")
    out.append(section("Effect of each parameter", body, "axis-effects"))
    return out


def _row(rank: int, p: PointResult, names: list[str], sweep: dict[str, Any]) -> str:
    classes = [p.status] + (["best"] if p.id == sweep.get("best") else []) + \
        (["front"] if p.id in (sweep.get("pareto") or []) else [])
    cells = [f"<td>{rank}</td>", f"<td><code>{_esc(p.id)}</code></td>"]
    cells += [f"<td>{_esc(p.values.get(n, ''))}</td>" for n in names]
    cells += [f'<td class="num">{v}</td>' for v in (
        _num(p.tokens_per_s_per_gpu, ",.0f"), _mfu(p.mfu), _num(p.iteration_ms, ",.1f"),
        _gib(p.peak_reserved_bytes), _gib(p.headroom_bytes))]
    title = f' title="{_esc(p.message)}"' if p.message and p.status != "ok" else ""
    cells.append(f"<td{title}>{_esc(_status_text(p))}</td>")
    return f'<tr class="{" ".join(classes)}" data-id="{_esc(p.id)}">{"".join(cells)}</tr>'


def _ranked_table(sweep: dict[str, Any], points: list[PointResult]) -> str:
    if not points:
        return note("The sweep ran no point.")
    names = _parameters(sweep, points)
    head = ["#", "id", *names, "tok/s/GPU", "MFU", "iter ms", "peak GiB", "headroom GiB",
            "status"]
    rows = "".join(_row(i, p, names, sweep) for i, p in enumerate(points, 1))
    table = (f'<table class="ranked"><thead><tr>{"".join(f"<th>{_esc(h)}</th>" for h in head)}'
             f"</tr></thead><tbody>{rows}</tbody></table>")
    return table + note("Best first. Highlighted: the best point; \u25C6: on the Pareto front. "
                         "Hover a stopped or failed point's status for its message. "
                         + "; ".join(f"{k}: {v}" for k, v in STATUSES.items()) + ".")


def _skipped(sweep: dict[str, Any]) -> str:
    skipped = sweep.get("skipped") or []
    if not skipped:
        return note("No combination was skipped.")
    rows = "".join(f"<tr><td>{_esc(' '.join(f'{k}={v}' for k, v in s['values'].items()))}</td>"
                   f"<td>{_esc(s['reason'])}</td></tr>" for s in skipped)
    return (f"<details><summary>{len(skipped)} combination(s) skipped by the constraints"
            f"</summary><table><thead><tr><th>values</th><th>reason</th></tr></thead>"
            f"<tbody>{rows}</tbody></table></details>")


# -- page --------------------------------------------------------------------------------------
def render(sweep: dict[str, Any]) -> str:
    """The HTML page of a sweep.json document."""
    points = _points(sweep)
    sections = [section("Sweep", _summary(sweep, points), "summary"),
                *_plots(sweep, points),
                section(f"All {len(points)} points, ranked", _ranked_table(sweep, points),
                         "points"),
                section("Skipped combinations", _skipped(sweep), "skipped")]
    gpu = (sweep.get("gpu") or {}).get("name", "?")
    subtitle = f"{gpu} x {sweep.get('world_size', '?')} · from {sweep.get('source', '?')}"
    return page(f"phantom sweep: {sweep.get('name', '')}", subtitle, sections, extra_css=SWEEP_CSS)


def render_sweep_html(sweep: dict[str, Any], out_path: Path) -> Path:
    """Write the sweep's page to `out_path` (one file, plotly.js inlined); returns the path."""
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render(sweep), encoding="utf-8")
    return out
