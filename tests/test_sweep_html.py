"""`phantom sweep`'s HTML page: offline, ranked, and its plots render in headless Chromium."""
from __future__ import annotations

import re

from phantom.sweep.html import render_sweep_html
from phantom.sweep.results import GIB, PointResult, SweepOutcome, rank
from test_report_html import _assert_rendered, _plots_shown, browser  # noqa: F401 (fixture)

PLOTS = {"throughput-memory", "axis-effects"}
CAPACITY = 80 * GIB
METRIC = "tokens_per_s_per_gpu"


def _point(pid: str, tp: int, pp: int, status: str = "ok", tok: float | None = None,
           peak_gib: float | None = None, **extra) -> PointResult:
    ms = 8 * 4096 * 1000 / (tok * 8) if tok else None
    return PointResult(
        id=pid, values={"tp": tp, "pp": pp, "dp": 8 // (tp * pp)}, status=status,
        command=f"phantom run --nproc-per-node 8 train.py --tp {tp} --pp {pp} --name 'a b'",
        iteration_ms=ms, iterations=4 if ms else 0, tokens_per_s_per_gpu=tok,
        mfu=tok / 20000 if tok else None,
        peak_reserved_bytes=None if peak_gib is None else int(peak_gib * GIB),
        capacity_bytes=CAPACITY if peak_gib is not None else None, **extra)


def _sweep(points: list[PointResult]) -> dict:
    header = {"name": "toy llama on 8 H100", "source": "the command line",
              "gpu": {"name": "H100", "memory_bytes": CAPACITY}, "world_size": 8, "nnodes": 1,
              "nproc_per_node": 8,
              "axes": [{"name": "tp", "values": [1, 2, 4]}, {"name": "pp", "values": [1, 2]}],
              "derived": [{"name": "dp", "expr": "world_size // (tp * pp)"}],
              "constraints": ["world_size % (tp * pp) == 0"],
              "host_time": {"mode": "counted", "profile": None}}
    outcome = SweepOutcome(header=header, results=rank(points, METRIC), metric=METRIC,
                           skipped=[{"values": {"tp": 8, "pp": 2},
                                     "reason": "not world_size % (tp * pp) == 0"}])
    return outcome.to_json()


def _mixed() -> dict:
    return _sweep([
        _point("a1", 1, 1, tok=9000, peak_gib=70),
        _point("a2", 2, 1, tok=8500, peak_gib=50),
        _point("a3", 4, 1, tok=7000, peak_gib=30),
        _point("a4", 2, 2, tok=7500, peak_gib=55),  # dominated by a2
        _point("s1", 4, 2, status="stopped", tok=3000, peak_gib=20,
               message="iteration 1 took 5000 ms"),
        _point("o1", 1, 2, status="oom", shortfall_bytes=3 * GIB,
               message="CUDA out of memory. Tried to allocate 4.00 GiB."),
        _point("f1", 1, 1, status="failed", message="ValueError: <bad> & broken"),
    ])


def test_sweep_page_shows_both_plots(browser, tmp_path):
    page = render_sweep_html(_mixed(), tmp_path / "sweep.html")
    shown = _plots_shown(browser, page, tmp_path / "sweep.png")
    _assert_rendered(shown, PLOTS)
    # every ok/stopped point, the front, the best and the OOM point are drawn
    assert shown["throughput-memory"]["marks"] >= 7, shown["throughput-memory"]


def test_sweep_page_is_offline_and_lists_points_ranked(tmp_path):
    from plotly.offline import get_plotlyjs

    sweep = _mixed()
    assert sweep["best"] == "a1" and set(sweep["pareto"]) == {"a1", "a2", "a3"}
    text = render_sweep_html(sweep, tmp_path / "sub" / "sweep.html").read_text()
    assert text.count(get_plotlyjs()) == 1  # plotly.js inlined once
    rest = text.replace(get_plotlyjs(), "")
    assert not re.search(r"https?://", rest) and "<script src" not in rest
    for name in PLOTS:
        assert f'data-plot="{name}"' in text

    rows = re.findall(r'<tr class="([^"]*)" data-id="([^"]+)">(.*?)</tr>', text)
    assert [pid for _, pid, _ in rows] == [p["id"] for p in sweep["points"]]
    assert [pid for _, pid, _ in rows] == ["a1", "a2", "a4", "a3", "s1", "o1", "f1"]
    for (classes, pid, cells), point in zip(rows, sweep["points"]):
        texts = re.findall(r"<td[^>]*>(.*?)</td>", cells)
        shown_values = texts[2:2 + len(point["values"])]
        assert shown_values == [str(v) for v in point["values"].values()], pid
        assert point["status"] in classes.split()
    assert "best" in rows[0][0].split() and "front" in rows[0][0].split()
    assert "OOM, short &gt;= 3.0 GiB" in text
    assert 'title="ValueError: &lt;bad&gt; &amp; broken"' in text  # the message as a tooltip
    assert "4 ok · 1 stopped · 1 oom · 1 failed" in text
    assert "1 combination(s) skipped" in text and "tp=8 pp=2" in text
    # the best command, one option per line, still one shell command
    assert "phantom run \\\n    --nproc-per-node 8 train.py \\\n    --tp 1" in text
    assert "--name &#x27;a b&#x27;" in text


def test_sweep_page_with_no_finished_point(tmp_path):
    sweep = _sweep([_point("o1", 1, 1, status="oom", shortfall_bytes=2 * GIB),
                    _point("o2", 2, 1, status="oom", shortfall_bytes=GIB),
                    _point("o3", 1, 2, status="oom", shortfall_bytes=None)])
    assert sweep["best"] is None and sweep["pareto"] == []
    text = render_sweep_html(sweep, tmp_path / "sweep.html").read_text()
    assert "No point finished" in text
    assert 'data-plot="throughput-memory"' in text  # the OOM points and the capacity still show
    assert 'data-plot="axis-effects"' not in text
    assert "No parameter takes more than one value among the finished points" in text
    assert text.count('data-id="o') == 3


def test_sweep_page_by_iteration_time(browser, tmp_path):
    """Ranked by iteration time (no tokens per iteration): the y axes read 'lower is better'."""
    sweep = _mixed()
    sweep["metric"] = "iteration_ms"
    for p in sweep["points"]:
        p["tokens_per_s_per_gpu"] = None
    page = render_sweep_html(sweep, tmp_path / "sweep.html")
    assert "lower is better" in page.read_text()
    _assert_rendered(_plots_shown(browser, page), PLOTS)
