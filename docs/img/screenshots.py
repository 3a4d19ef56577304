"""Regenerate the report screenshots in docs/reports.md (needs playwright, pillow and Chromium):

    phantom run --nproc-per-node 2 --gpu H200 --out /tmp/fsdp examples/dist_train.py \
        --parallel fsdp --preset gpt2-124m --seq-len 256 --batch-size 4 --steps 4 --warmup 1
    phantom report /tmp/fsdp
    python docs/img/screenshots.py /tmp/fsdp/report.html docs/img/report-fsdp-2rank
"""
import shutil
import sys
from pathlib import Path

from playwright.sync_api import sync_playwright

SECTIONS = {"overview": ["summary", "breakdown"], "timeline": ["timeline"], "memory": ["memory"],
            "network": ["network"]}


def main(page_path: str, prefix: str) -> None:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(Path(page_path).resolve().as_uri())
        page.wait_for_timeout(1000)
        for name, ids in SECTIONS.items():
            boxes = [page.locator(f"section#{i}").bounding_box() for i in ids]
            top = min(b["y"] for b in boxes)
            bottom = max(b["y"] + b["height"] for b in boxes)
            out = f"{prefix}-{name}.png"
            page.screenshot(path=out, full_page=True,
                            clip={"x": 0, "y": top - 8, "width": 1280, "height": bottom - top + 16})
            print("wrote", out)
        browser.close()


if __name__ == "__main__":
    main(*sys.argv[1:3])
