"""A self-contained HTML report of one run (`phantom report DIR`).

The page inlines plotly.js once and one figure per section, so it opens offline and can be
mailed as a single file. Sections: key numbers; iteration time per rank (compute, exposed
communication, idle); one iteration's streams per rank; memory over time with the peak and
what was live at it; network link utilisation; top ops and top collectives. A report made
without recording (`phantom run --report`) lacks the recorded sections and says so.
"""
from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

GIB = 1024**3
MIB = 1024**2
CATEGORY_COLORS = {"parameters": "#4C78A8", "gradients": "#F58518", "optimizer_state": "#54A24B",
                   "activations": "#E45756", "other": "#9D9D9D"}
BREAKDOWN_COLORS = {"compute": "#4C78A8", "exposed communication": "#E45756",
                    "waiting for peers": "#F2A7A7", "idle / host-bound": "#D0D0D0"}
CLASS_COLORS = {"gemm": "#4C78A8", "attention": "#72B7B2", "elementwise": "#F58518",
                "reduction": "#EECA3B", "norm": "#B279A2", "softmax": "#FF9DA6",
                "optimizer": "#54A24B", "copy": "#9D755D", "random": "#BAB0AC", "loss": "#D67195",
                "embedding": "#79706E", "conv": "#88D27A", "transfer": "#9D755D",
                "comm": "#E45756", "comm_wait": "#F2A7A7", "other": "#C7C7C7"}


class ReportError(Exception):
    pass


# -- loading -----------------------------------------------------------------------------------
def load_run(path: str | Path) -> dict[str, Any]:
    """A run's report: `path` is a run directory (its report.json) or a report JSON file."""
    p = Path(path)
    f = p / "report.json" if p.is_dir() else p
    try:
        report = json.loads(f.read_text())
    except FileNotFoundError:
        raise ReportError(f"no report at {f} (make one with `phantom run --out DIR ...`)") from None
    except ValueError as e:
        raise ReportError(f"{f}: not a JSON report: {e}") from None
    if not str(report.get("schema", "")).startswith("phantom.run/"):
        raise ReportError(f"{f}: not a phantom run report (schema {report.get('schema')!r})")
    if not report.get("ranks"):  # a plain --report file: one rank, itself
        rank = (report.get("distributed") or {}).get("rank", 0)
        report["ranks"] = [dict(report, rank=rank)]
    report.setdefault("network", None)
    report["_source"] = str(p)
    return report


# -- helpers -----------------------------------------------------------------------------------
def _esc(x: Any) -> str:
    return html.escape(str(x))


def _fmt_bytes(n: float | None) -> str:
    if n is None:
        return "n/a"
    if n >= GIB:
        return f"{n / GIB:.2f} GiB"
    if n >= MIB:
        return f"{n / MIB:.1f} MiB"
    return f"{n / 1024:.1f} KiB" if n >= 1024 else f"{int(n)} B"


def _fmt_ms(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f} ms"


def _run_label(report: dict[str, Any]) -> str:
    cmd = report.get("command") or {}
    target = cmd.get("script") or (f"-m {cmd['module']}" if cmd.get("module") else "?")
    return " ".join([Path(target).name if cmd.get("script") else target, *cmd.get("args", [])])


def _world(report: dict[str, Any]) -> int:
    d = report.get("distributed")
    return d["world_size"] if d else 1


def figure_html(fig: Any, name: str, height: int, top: int = 40, legend_y: float = 1.02) -> str:
    """A plotly figure as a `div.plot` named `name` (the pages inline plotly.js once)."""
    fig.update_layout(height=height, margin=dict(l=60, r=20, t=top, b=40),
                      template="plotly_white", font=dict(size=12),
                      legend=dict(orientation="h", yanchor="bottom", y=legend_y, x=0))
    div = fig.to_html(full_html=False, include_plotlyjs=False, div_id=f"plot-{name}",
                      config={"displaylogo": False, "responsive": True})
    return f'<div class="plot" data-plot="{name}">{div}</div>'


def _table(headers: list[str], rows: list[list[Any]], cls: str = "") -> str:
    head = "".join(f"<th>{_esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{_esc(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def note(text: str) -> str:
    return f'<p class="note">{_esc(text)}</p>'


# -- figures -----------------------------------------------------------------------------------
def breakdown_figure(runs: list[tuple[str, dict]]) -> Any | None:
    """Steady-state iteration time per rank (and per run, when comparing), stacked."""
    import plotly.graph_objects as go

    labels, parts = [], {k: [] for k in BREAKDOWN_COLORS}
    for run_name, report in runs:
        for r in report["ranks"]:
            b = (r.get("breakdown") or {}).get("steady_state")
            if not b or b.get("time_ms") is None:
                continue
            labels.append(f"{run_name}rank {r['rank']}")
            wait = b.get("exposed_comm_wait_ms") or 0.0
            parts["compute"].append(b["compute_ms"])
            parts["exposed communication"].append(b["exposed_comm_ms"] - wait)
            parts["waiting for peers"].append(wait)
            parts["idle / host-bound"].append(b["idle_ms"])
    if not labels:
        return None
    fig = go.Figure()
    for name, values in parts.items():
        fig.add_trace(go.Bar(y=labels, x=values, name=name, orientation="h",
                             marker_color=BREAKDOWN_COLORS[name],
                             hovertemplate="%{y}: %{x:.2f} ms<extra>" + name + "</extra>"))
    fig.update_layout(barmode="stack", xaxis_title="ms per iteration (steady state)",
                      yaxis=dict(autorange="reversed"), legend_traceorder="normal")
    return fig


def iterations_figure(report: dict) -> Any | None:
    """Every iteration's time per rank (the breakdown's windows)."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for r in report["ranks"]:
        its = (r.get("breakdown") or {}).get("iterations") or []
        if its:
            fig.add_trace(go.Scatter(x=list(range(len(its))), y=[i["time_ms"] for i in its],
                                     mode="lines+markers", name=f"rank {r['rank']}"))
    if not fig.data:
        return None
    # Log scale: the first iteration (allocations, start-up) is often many times the others.
    fig.update_layout(xaxis_title="iteration", yaxis_title="ms (log scale)", yaxis_type="log",
                      xaxis=dict(dtick=1))
    return fig


def timeline_figure(report: dict, max_ranks: int = 8) -> Any | None:
    """One iteration (the last finished one) per rank: each stream's kernels by class."""
    import plotly.graph_objects as go

    rows: list[str] = []
    by_class: dict[str, tuple[list, list, list, list]] = {}
    iteration = None
    for r in report["ranks"][:max_ranks]:
        ov = r.get("timeline_overview")
        if not ov:
            continue
        iteration = ov["iteration"]
        for track in ov["tracks"]:
            label = f"rank {r['rank']} · {track['name']}"
            rows.append(label)
            for s, e, cls in track["spans"]:
                ys, bases, widths, texts = by_class.setdefault(cls, ([], [], [], []))
                ys.append(label)
                bases.append(s)
                widths.append(max(e - s, 1e-4))
                texts.append(f"{cls}: {e - s:.3f} ms at {s:.3f} ms")
    if not rows:
        return None
    fig = go.Figure()
    for cls, (ys, bases, widths, texts) in sorted(by_class.items()):
        fig.add_trace(go.Bar(y=ys, x=widths, base=bases, orientation="h", name=cls,
                             marker_color=CLASS_COLORS.get(cls, "#888"), marker_line_width=0,
                             hovertext=texts, hoverinfo="text"))
    fig.update_layout(barmode="overlay", bargap=0.25, xaxis_title=f"ms into iteration {iteration}",
                      yaxis=dict(categoryorder="array", categoryarray=rows, autorange="reversed"))
    return fig


def memory_figure(report: dict, max_ranks: int = 8) -> Any | None:
    """Allocated (band: min..max per time bucket) and reserved memory over time; the peak marked."""
    import plotly.graph_objects as go

    fig = go.Figure()
    palette = ["#4C78A8", "#F58518", "#54A24B", "#E45756", "#72B7B2", "#B279A2", "#EECA3B", "#9D755D"]
    for i, r in enumerate(report["ranks"][:max_ranks]):
        mem = r.get("memory") or {}
        ot = mem.get("over_time")
        if not ot or not ot["rows"]:
            continue
        color = palette[i % len(palette)]
        t = [row[0] for row in ot["rows"]]
        # Steps, not slopes: between two samples memory stayed where the first left it.
        fig.add_trace(go.Scatter(x=t, y=[row[2] / GIB for row in ot["rows"]], mode="lines",
                                 line=dict(color=color, shape="hv"),
                                 name=f"rank {r['rank']} allocated"))
        fig.add_trace(go.Scatter(x=t, y=[row[3] / GIB for row in ot["rows"]], mode="lines",
                                 line=dict(color=color, dash="dot", shape="hv"),
                                 name=f"rank {r['rank']} reserved"))
        peak = mem.get("at_peak")
        if peak:
            fig.add_trace(go.Scatter(x=[peak["host_time_ms"]], y=[peak["bytes"] / GIB],
                                     mode="markers+text", marker=dict(size=11, color=color,
                                                                      symbol="diamond"),
                                     text=[f"rank {r['rank']} peak {_fmt_bytes(peak['bytes'])}"],
                                     textposition="top left" if i % 2 == 0 else "bottom right",
                                     showlegend=False,
                                     name=f"rank {r['rank']} peak"))
    if not fig.data:
        return None
    fig.update_layout(xaxis_title="simulated host time (ms)", yaxis_title="GiB")
    return fig


def peak_figure(runs: list[tuple[str, dict]]) -> Any | None:
    """What was live at the allocated peak, by category, per rank (and run)."""
    import plotly.graph_objects as go

    labels: list[str] = []
    values: dict[str, list[float]] = {c: [] for c in CATEGORY_COLORS}
    for run_name, report in runs:
        for r in report["ranks"]:
            peak = (r.get("memory") or {}).get("at_peak")
            if not peak:
                continue
            labels.append(f"{run_name}rank {r['rank']}")
            for c in CATEGORY_COLORS:
                values[c].append(peak["by_category"].get(c, 0) / GIB)
    if not labels:
        return None
    fig = go.Figure()
    for c, v in values.items():
        fig.add_trace(go.Bar(y=labels, x=v, name=c.replace("_", " "), orientation="h",
                             marker_color=CATEGORY_COLORS[c],
                             hovertemplate="%{y}: %{x:.3f} GiB<extra>" + c + "</extra>"))
    fig.update_layout(barmode="stack", xaxis_title="GiB live at the allocated peak",
                      yaxis=dict(autorange="reversed"))
    return fig


def network_figures(report: dict, max_links: int = 24) -> tuple[Any | None, Any | None]:
    """Average utilisation and busy share per link; utilisation over time (heatmap)."""
    import plotly.graph_objects as go

    net = report.get("network")
    if not net or not net.get("links"):
        return None, None
    links = net["links"][:max_links]
    names = [f"{l['name']} ({l['kind']})" for l in links]
    bars = go.Figure()
    bars.add_trace(go.Bar(x=names, y=[100 * l["utilization"] for l in links],
                          name="average utilisation %", marker_color="#4C78A8"))
    bars.add_trace(go.Bar(x=names, y=[100 * l["busy_fraction"] for l in links],
                          name="busy (any traffic) %", marker_color="#F58518"))
    bars.update_layout(barmode="group", yaxis_title="% of the run")
    w = net["bucket_ms"]
    n = max(len(l["utilization_over_time"]) for l in links)
    z = [[100 * u for u in l["utilization_over_time"]] + [0.0] * (n - len(l["utilization_over_time"]))
         for l in links]
    heat = go.Figure(go.Heatmap(z=z, x=[(i + 0.5) * w for i in range(n)], y=names,
                                colorscale="Viridis", zmin=0,
                                colorbar=dict(title="util %")))
    heat.update_layout(xaxis_title="simulated time (ms)", yaxis=dict(autorange="reversed"))
    return bars, heat


def top_ops_figure(report: dict, n: int = 15) -> Any | None:
    import plotly.graph_objects as go

    ops = report.get("top_ops") or []
    if not ops:
        return None
    ops = ops[:n]
    fig = go.Figure(go.Bar(y=[o["op"] for o in ops], x=[o["gpu_ms"] for o in ops],
                           orientation="h", marker_color="#4C78A8",
                           hovertemplate="%{y}: %{x:.2f} ms<extra></extra>"))
    fig.update_layout(xaxis_title="GPU ms (whole run, rank 0)", yaxis=dict(autorange="reversed"))
    return fig


# -- page --------------------------------------------------------------------------------------
CSS = """
body { font-family: -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif; margin: 0;
       color: #222; background: #fafafa; }
header { background: #1f2937; color: #fff; padding: 18px 28px; }
header h1 { margin: 0 0 4px 0; font-size: 22px; }
header .sub { color: #cbd5e1; font-size: 13px; }
main { padding: 12px 28px 40px 28px; max-width: 1400px; }
section { background: #fff; border: 1px solid #e5e7eb; border-radius: 6px; padding: 12px 18px;
          margin: 16px 0; }
h2 { font-size: 17px; margin: 6px 0 8px 0; }
.cards { display: flex; flex-wrap: wrap; gap: 12px; }
.card { border: 1px solid #e5e7eb; border-radius: 6px; padding: 8px 14px; min-width: 150px; }
.card .v { font-size: 20px; font-weight: 600; }
.card .k { font-size: 12px; color: #666; }
table { border-collapse: collapse; font-size: 12.5px; margin: 6px 0; }
th, td { border-bottom: 1px solid #eee; padding: 3px 10px; text-align: left; }
th { background: #f3f4f6; }
.note { color: #666; font-size: 12.5px; }
.cols { display: grid; grid-template-columns: 1fr 1fr; gap: 16px; }
.plot { min-height: 120px; }
"""


def page(title: str, subtitle: str, sections: list[str], extra_css: str = "") -> str:
    """A self-contained page: the report's style (and `extra_css`), plotly.js once, the sections."""
    from plotly.offline import get_plotlyjs

    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{_esc(title)}</title>"
            f"<style>{CSS}{extra_css}</style><script>{get_plotlyjs()}</script></head><body>"
            f"<header><h1>{_esc(title)}</h1><div class='sub'>{_esc(subtitle)}</div></header>"
            f"<main>{''.join(sections)}</main></body></html>")


def section(title: str, body: str, name: str) -> str:
    return f'<section id="{name}"><h2>{_esc(title)}</h2>{body}</section>'


def _cards(report: dict) -> str:
    it = report.get("iterations") or {}
    ranks = report["ranks"]
    peaks = [(r.get("memory") or {}).get("peak_allocated_bytes") or 0 for r in ranks]
    medians = [(r.get("iterations") or {}).get("median_ms") for r in ranks]
    medians = [m for m in medians if m is not None]
    cards = [
        ("median iteration", _fmt_ms(max(medians) if medians else it.get("median_ms"))
         + (" (slowest rank)" if len(medians) > 1 else "")),
        ("iterations", it.get("count", "n/a")),
        ("peak allocated (max over ranks)", _fmt_bytes(max(peaks) if peaks else None)),
        ("peak reserved", _fmt_bytes((report.get("memory") or {}).get("peak_reserved_bytes"))),
        ("GPU busy (rank 0)", f"{100 * (report.get('gpu_busy_fraction') or 0):.1f}%"),
        ("simulated", f"{report.get('simulated_seconds', 0):.3f} s"),
        ("ranks", _world(report)),
        ("exit code", report.get("exit_code")),
    ]
    return '<div class="cards">' + "".join(
        f'<div class="card"><div class="v">{_esc(v)}</div><div class="k">{_esc(k)}</div></div>'
        for k, v in cards) + "</div>"


def _breakdown_table(report: dict) -> str:
    rows = []
    for r in report["ranks"]:
        b = (r.get("breakdown") or {}).get("steady_state")
        if b and b.get("time_ms"):
            t = b["time_ms"]

            def cell(v: float) -> str:
                return f"{v:.2f} ({100 * v / t:.0f}%)"

            rows.append([r["rank"], f"{t:.2f}", cell(b["compute_ms"]), cell(b["exposed_comm_ms"]),
                         cell(b.get("exposed_comm_wait_ms") or 0.0), cell(b["idle_ms"])])
    return _table(["rank", "iteration ms", "compute ms", "exposed comm ms",
                   "of which waiting for peers", "idle / host ms"], rows)


def _peak_table(report: dict) -> str:
    rows = []
    for r in report["ranks"]:
        peak = (r.get("memory") or {}).get("at_peak")
        if peak:
            rows.append([r["rank"], _fmt_bytes(peak["bytes"]), peak["iteration"],
                         *[_fmt_bytes(peak["by_category"].get(c, 0)) for c in CATEGORY_COLORS]])
    table = _table(["rank", "peak", "in iteration", *[c.replace("_", " ") for c in CATEGORY_COLORS]],
                   rows)
    first = next((r for r in report["ranks"] if (r.get("memory") or {}).get("at_peak")), None)
    if first is not None:
        largest = first["memory"]["at_peak"]["largest"]
        table += f"<p class='note'>Largest allocations live at rank {first['rank']}'s peak:</p>"
        table += _table(["allocated by", "size", "category"],
                        [[a["op"], _fmt_bytes(a["bytes"]), a["category"].replace("_", " ")]
                         for a in largest])
    return table


def _collectives_table(report: dict) -> str:
    r0 = report["ranks"][0]
    rows = [[c["kind"], c["group"], _fmt_bytes(c["bytes"]), c["calls"], f"{c['network_ms']:.3f}",
             f"{c['wait_ms']:.3f}", f"{c['algbw_GBps']:.1f}", f"{c['busbw_GBps']:.1f}",
             ", ".join(f"{k} x{v}" for k, v in c["algorithms"].items())]
            for c in (r0.get("top_collectives") or [])]
    if not rows:
        return note("No collectives (a single-process run, or none recorded).")
    return (f"<p class='note'>Rank {r0['rank']}; grouped by kind, group and size. Network ms: "
            "time on the network; wait ms: time its NCCL kernel waited for peers first.</p>"
            + _table(["collective", "group", "size", "calls", "network ms", "wait ms",
                      "algbw GB/s", "busbw GB/s", "algorithm/protocol"], rows))


def _links_table(net: dict, n: int = 16) -> str:
    rows = [[l["name"], l["kind"], f"{l['capacity_GBps']:.0f}", f"{l['bytes'] / 1e9:.3f}",
             f"{l['busy_ms']:.2f}", f"{100 * l['busy_fraction']:.2f}%", f"{100 * l['utilization']:.2f}%",
             f"{100 * l['bytes'] / (l['capacity_GBps'] * l['busy_ms'] * 1e6):.1f}%"
             if l["busy_ms"] > 0 else "n/a"]
            for l in net["links"][:n]]
    return _table(["link", "kind", "capacity GB/s", "GB moved", "busy ms", "busy", "utilisation",
                   "utilisation when busy"], rows)


def _ops_table(report: dict) -> str:
    rows = [[o["op"], o["calls"], f"{o['gpu_ms']:.3f}"] for o in (report.get("top_ops") or [])]
    classes = ", ".join(f"{k} {100 * v['share']:.1f}%" for k, v in (report.get("op_classes") or {}).items())
    db = report.get("cost_database") or {}
    src = (f"Kernel times: {100 * db.get('hit_share', 0):.1f}% of GPU time from measured database "
           f"rows, {100 * db.get('fallback_share', 0):.1f}% from the fallback model.") if db else ""
    return _table(["op", "calls", "GPU ms"], rows) + note(f"GPU time by class: {classes}. {src}")


def render(report: dict[str, Any]) -> str:
    """The HTML page of one run."""
    missing = note("Not recorded: run with `phantom run --out DIR` to get this section.")
    sections = [section("Summary", _cards(report), "summary")]

    body = ""
    fig = breakdown_figure([("", report)])
    if fig is not None:
        body += figure_html(fig, "breakdown", 120 + 45 * len(report["ranks"]))
        body += _breakdown_table(report)
        its = iterations_figure(report)
        if its is not None:
            body += figure_html(its, "iterations", 260)
        body += note("Per iteration window (from one optimizer step's GPU completion to the next): "
                      "compute = time any compute kernel runs; exposed communication = NCCL "
                      "kernels running while no compute does (collectives the GPU waits for), "
                      "of which waiting for peers = NCCL kernels that wait for a rank that has "
                      "not reached the collective yet; idle = the rest (the GPU waits for the "
                      "host). "
                      "Steady state leaves out the first iteration when there are 3 or more.")
    sections.append(section("Iteration time per rank", body or missing, "breakdown"))

    fig = timeline_figure(report)
    body = figure_html(fig, "timeline", 140 + 34 * sum(
        len((r.get("timeline_overview") or {}).get("tracks", [])) for r in report["ranks"][:8])) \
        if fig is not None else missing
    if fig is not None:
        body += note("Adjacent kernels of one class are merged; the full detail is in the trace "
                      "(trace.json: open it in ui.perfetto.dev).")
    sections.append(section("Timeline of one iteration", body, "timeline"))

    body = ""
    fig = memory_figure(report)
    if fig is not None:
        body += figure_html(fig, "memory", 380)
    fig = peak_figure([("", report)])
    if fig is not None:
        body += figure_html(fig, "memory-at-peak", 120 + 45 * len(report["ranks"]))
        body += _peak_table(report)
        body += note("Categories: parameters (the optimizer's parameters, and FSDP's unsharded "
                      "copies), gradients (their .grad), optimizer state, activations (everything "
                      "else allocated during the peak's iteration), other (older allocations: "
                      "buffers, workspaces). They add up to the peak exactly.")
    sections.append(section("Memory", body or missing, "memory"))

    bars, heat = network_figures(report)
    if bars is not None:
        net = report["network"]
        body = (figure_html(bars, "links", 340) + figure_html(heat, "links-over-time",
                                                                 140 + 24 * min(24, len(net["links"])))
                + _links_table(net)
                + note(f"{net['collectives']} collectives over {net['span_ms']:.1f} ms simulated "
                        f"(the whole run, set-up included); buckets of {net['bucket_ms']:.3f} ms. "
                        "Utilisation = bytes on the wire / (capacity x time); busy = time with any "
                        "traffic."))
    else:
        body = note("No network traffic recorded (a single-process run, or no --out).")
    sections.append(section("Network links", body, "network"))

    body = ""
    fig = top_ops_figure(report)
    if fig is not None:
        body += figure_html(fig, "top-ops", 420)
    body += _ops_table(report)
    sections.append(section("Top ops", body, "top-ops"))
    sections.append(section("Top collectives", _collectives_table(report), "top-collectives"))
    gpu = (report.get("gpu") or {}).get("name", "?")
    subtitle = (f"{_run_label(report)} · {gpu} x {_world(report)} · "
                f"{report['_source']}")
    return page("phantom run report", subtitle, sections)


def write_html(text: str, path: str | Path) -> None:
    Path(path).write_text(text, encoding="utf-8")
