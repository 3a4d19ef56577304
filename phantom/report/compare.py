"""Two runs side by side (`phantom report A B`), e.g. two parallel layouts of one model.

Key numbers with the change from A to B, the iteration breakdown and the memory at the peak
of both runs' ranks in one figure each, GPU time by op class, and the top collectives of each.
"""
from __future__ import annotations

from typing import Any

from phantom.report import html as h


def _metrics(report: dict[str, Any]) -> dict[str, float | None]:
    ranks = report["ranks"]
    medians = [(r.get("iterations") or {}).get("median_ms") for r in ranks]
    medians = [m for m in medians if m is not None]
    steady = [(r.get("breakdown") or {}).get("steady_state") or {} for r in ranks]

    def worst(key: str) -> float | None:
        vals = [s.get(key) for s in steady if s.get(key) is not None]
        return max(vals) if vals else None

    peaks = [(r.get("memory") or {}).get("peak_allocated_bytes") for r in ranks]
    peaks = [p for p in peaks if p is not None]
    net = report.get("network") or {}
    return {
        "ranks": h._world(report),
        "median iteration ms (slowest rank)": max(medians) if medians else None,
        "compute ms (max over ranks)": worst("compute_ms"),
        "exposed communication ms (max over ranks)": worst("exposed_comm_ms"),
        "idle / host ms (max over ranks)": worst("idle_ms"),
        "peak allocated GiB (max over ranks)": max(peaks) / h.GIB if peaks else None,
        "peak reserved GiB (rank 0)": (report.get("memory") or {}).get("peak_reserved_bytes", 0) / h.GIB,
        "GPU busy % (rank 0)": 100 * (report.get("gpu_busy_fraction") or 0),
        "NCCL kernel ms (rank 0)": (report.get("distributed") or {}).get("nccl_kernel_ms"),
        "network bytes (all links) GB": sum(l["bytes"] for l in net.get("links", [])) / 1e9
        if net.get("links") else None,
    }


def _fmt(v: float | None) -> str:
    if v is None:
        return "n/a"
    return f"{v:,.0f}" if isinstance(v, int) else f"{v:,.3f}"


def _delta(a: float | None, b: float | None) -> str:
    if a is None or b is None:
        return ""
    if a == 0:
        return "" if b == 0 else "new"
    return f"{100 * (b - a) / a:+.1f}%"


def _class_figure(runs: list[tuple[str, dict]]) -> Any | None:
    import plotly.graph_objects as go

    # NCCL kernels ("comm") are left out: their time includes waiting for peers, and the
    # iteration breakdown above shows what of it is exposed.
    classes: list[str] = []
    for _, r in runs:
        for c in r.get("op_classes") or {}:
            if c not in classes and c != "comm":
                classes.append(c)
    if not classes:
        return None
    fig = go.Figure()
    for name, r in runs:
        oc = r.get("op_classes") or {}
        fig.add_trace(go.Bar(x=classes, y=[(oc.get(c) or {}).get("gpu_ms", 0) for c in classes],
                             name=name.strip(" :")))
    fig.update_layout(barmode="group", yaxis_title="GPU ms (rank 0, whole run, NCCL left out)")
    return fig


def render_comparison(a: dict[str, Any], b: dict[str, Any]) -> str:
    """The HTML page comparing run A with run B."""
    name_a, name_b = "A: ", "B: "
    runs = [(name_a, a), (name_b, b)]
    ma, mb = _metrics(a), _metrics(b)
    rows = [[k, _fmt(ma[k]), _fmt(mb[k]), "" if k == "ranks" else _delta(ma[k], mb[k])] for k in ma]
    intro = (f"<p><b>A</b>: {h._esc(h._run_label(a))} ({h._esc(a['_source'])})<br>"
             f"<b>B</b>: {h._esc(h._run_label(b))} ({h._esc(b['_source'])})</p>")
    sections = [h.section("Key numbers", intro + h._table(["", "A", "B", "B vs A"], rows,
                                                            "compare"), "summary")]
    missing = h.note("Not recorded in at least one run: run both with `phantom run --out DIR`.")
    n_ranks = len(a["ranks"]) + len(b["ranks"])
    fig = h.breakdown_figure(runs)
    sections.append(h.section(
        "Iteration time per rank",
        h.figure_html(fig, "breakdown", 120 + 40 * n_ranks) if fig is not None else missing,
        "breakdown"))
    fig = h.peak_figure(runs)
    sections.append(h.section(
        "Memory live at the peak",
        h.figure_html(fig, "memory-at-peak", 120 + 40 * n_ranks) if fig is not None else missing,
        "memory"))
    fig = _class_figure(runs)
    if fig is not None:
        sections.append(h.section("GPU time by op class", h.figure_html(fig, "op-classes", 360),
                                   "op-classes"))
    cols = "".join(f"<div><h3>{label}</h3>{h._collectives_table(r)}</div>"
                   for label, r in (("A", a), ("B", b)))
    sections.append(h.section("Top collectives", f'<div class="cols">{cols}</div>',
                               "top-collectives"))
    cols = "".join(f"<div><h3>{label}</h3>{h._ops_table(r)}</div>" for label, r in (("A", a), ("B", b)))
    sections.append(h.section("Top ops", f'<div class="cols">{cols}</div>', "top-ops"))
    return h.page("phantom run comparison", f"A: {h._run_label(a)}  vs  B: {h._run_label(b)}",
                  sections)
