"""`phantom report`: the HTML page, rendered in headless Chromium, shows its plots."""
from __future__ import annotations

import io
import os
import shutil
from pathlib import Path

import pytest

from conftest import run_phantom
from report_runs import fsdp_run, single_run

SINGLE_PLOTS = {"breakdown", "iterations", "timeline", "memory", "memory-at-peak", "top-ops"}
FSDP_PLOTS = SINGLE_PLOTS | {"links", "links-over-time"}
COMPARE_PLOTS = {"breakdown", "memory-at-peak", "op-classes"}


def _chromium() -> str | None:
    for candidate in (os.environ.get("PHANTOM_CHROMIUM"), "chromium", "chromium-browser",
                      "google-chrome", "google-chrome-stable"):
        if candidate and (path := shutil.which(candidate)):
            return path
    return None


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is in the test extra")
    pytest.importorskip("PIL", reason="pillow is in the test extra")
    exe = _chromium()
    if exe is None:
        pytest.skip("no Chromium found (apt-get install chromium, or set PHANTOM_CHROMIUM)")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, args=["--no-sandbox"])
        yield b
        b.close()


def _plots_shown(browser, page_path: Path, shot: Path | None = None) -> dict[str, dict]:
    """Open the page; for each plot div: its rendered size, how many data marks its SVG has,
    and how varied its pixels are in a screenshot of the page (a blank box has ~0)."""
    from PIL import Image, ImageStat

    page = browser.new_page(viewport={"width": 1300, "height": 900})
    page.goto(page_path.resolve().as_uri())
    page.wait_for_load_state("load")
    page.wait_for_timeout(500)
    boxes = page.evaluate("""() => Array.from(document.querySelectorAll('div.plot')).map(d => {
        const g = d.querySelector('.js-plotly-plot');
        const r = (g || d).getBoundingClientRect();
        const marks = g ? g.querySelectorAll('.plot .trace path, .plot .trace rect, '
                                            + '.plot .point path, .hm image, .heatmaplayer image').length : 0;
        return {name: d.dataset.plot, x: r.left + window.scrollX, y: r.top + window.scrollY,
                w: r.width, h: r.height, marks: marks};
    })""")
    png = page.screenshot(full_page=True)
    page.close()
    if shot is not None:
        shot.write_bytes(png)
    img = Image.open(io.BytesIO(png)).convert("L")
    out = {}
    for b in boxes:
        crop = img.crop((int(b["x"]), int(b["y"]), int(b["x"] + b["w"]), int(b["y"] + b["h"])))
        stddev = ImageStat.Stat(crop).stddev[0] if b["w"] > 1 and b["h"] > 1 else 0.0
        dark = sum(crop.histogram()[:200]) / max(1, crop.width * crop.height)
        out[b["name"]] = dict(b, stddev=stddev, ink=dark)
    return out


def _assert_rendered(shown: dict[str, dict], expected: set[str]) -> None:
    assert expected <= set(shown), f"missing plots: {expected - set(shown)}"
    for name in expected:
        s = shown[name]
        assert s["w"] > 300 and s["h"] > 80, (name, s)
        assert s["marks"] > 0, f"plot {name} drew no data: {s}"
        # a rendered plot has axes, labels and coloured data: clearly non-uniform pixels, some
        # of them dark (a blank or failed plot is a uniform box: stddev ~0, no ink)
        assert s["stddev"] > 8 and s["ink"] > 0.003, (name, s)


def test_html_report_of_a_two_rank_fsdp_run_shows_its_plots(browser, tmp_path):
    run = fsdp_run()
    proc = run_phantom(["report", str(run)])
    assert proc.returncode == 0, proc.stderr
    page = run / "report.html"
    text = page.read_text()
    assert "<script src=" not in text and len(text) > 3_000_000  # self-contained: plotly.js inline
    shown = _plots_shown(browser, page, tmp_path / "fsdp.png")
    _assert_rendered(shown, FSDP_PLOTS)
    assert "rank 1" in text and "default_pg [0, 1]" in text


def test_html_check_fails_on_a_page_whose_plots_did_not_render(browser, tmp_path):
    """The check above can fail: the same page without plotly.js draws nothing."""
    from plotly.offline import get_plotlyjs

    run = fsdp_run()
    if not (run / "report.html").exists():
        assert run_phantom(["report", str(run)]).returncode == 0
    broken = tmp_path / "broken.html"
    broken.write_text((run / "report.html").read_text().replace(get_plotlyjs(), ""))
    shown = _plots_shown(browser, broken)
    with pytest.raises(AssertionError):
        _assert_rendered(shown, FSDP_PLOTS)


def test_compare_two_runs_side_by_side(browser, tmp_path):
    single, _ = single_run()
    out = tmp_path / "compare.html"
    proc = run_phantom(["report", str(single), str(fsdp_run()), "-o", str(out)])
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert "phantom run comparison" in text and "train.py" in text and "dist_train.py" in text
    assert "B vs A" in text
    _assert_rendered(_plots_shown(browser, out), COMPARE_PLOTS)


def test_single_rank_report_renders_without_network(browser, tmp_path):
    single, _ = single_run()
    out = tmp_path / "single.html"
    assert run_phantom(["report", str(single), "-o", str(out)]).returncode == 0
    shown = _plots_shown(browser, out)
    _assert_rendered(shown, SINGLE_PLOTS)
    assert "links" not in shown


def test_report_of_a_plain_report_json_and_errors(tmp_path):
    """A --report file (no recording) still renders; a missing run is a clear error."""
    import json

    single, _ = single_run()
    plain = json.loads((single / "report.json").read_text())
    for key in ("breakdown", "timeline_overview", "ranks", "network", "run"):
        plain.pop(key, None)
    plain["memory"]["at_peak"] = plain["memory"]["over_time"] = None
    f = tmp_path / "plain.json"
    f.write_text(json.dumps(plain))
    proc = run_phantom(["report", str(f)])
    assert proc.returncode == 0, proc.stderr
    assert "Not recorded" in (tmp_path / "plain.html").read_text()
    proc = run_phantom(["report", str(tmp_path / "nope")])
    assert proc.returncode == 2 and "no report at" in proc.stderr
