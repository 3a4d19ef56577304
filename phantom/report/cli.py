"""`phantom report`: render a run directory as HTML, or compare two.

    phantom report DIR                 -> DIR/report.html
    phantom report A B [-o OUT.html]   -> comparison (default: compare.html here)
    phantom report --check-trace TRACE.json   validate a trace against the trace-event format
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from phantom.report.html import ReportError, load_run, render, write_html


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="phantom report",
        description="Render a run directory (phantom run --out DIR) or report JSON as a "
                    "self-contained HTML page; with two, compare them side by side.")
    p.add_argument("runs", nargs="*", metavar="RUN", help="run directory or report JSON (one or two)")
    p.add_argument("-o", "--output", metavar="HTML", default=None,
                   help="where to write the page (default: RUN/report.html; compare.html for two)")
    p.add_argument("--check-trace", metavar="TRACE", default=None,
                   help="validate a trace file against the trace-event format and exit")
    return p


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.check_trace:
        from phantom.report.trace import validate

        errors = validate(json.loads(Path(args.check_trace).read_text()))
        for e in errors[:50]:
            print(e, file=sys.stderr)
        print(f"{args.check_trace}: {'ok' if not errors else f'{len(errors)} problem(s)'}")
        return 1 if errors else 0
    if len(args.runs) not in (1, 2):
        _parser().print_usage(sys.stderr)
        print("phantom report: error: give one run (render it) or two (compare them)", file=sys.stderr)
        return 2
    try:
        runs = [load_run(r) for r in args.runs]
    except ReportError as e:
        print(f"phantom report: error: {e}", file=sys.stderr)
        return 2
    if len(runs) == 1:
        src = Path(args.runs[0])
        out = Path(args.output) if args.output else (src / "report.html" if src.is_dir()
                                                     else src.with_suffix(".html"))
        write_html(render(runs[0]), out)
    else:
        from phantom.report.compare import render_comparison

        out = Path(args.output or "compare.html")
        write_html(render_comparison(*runs), out)
    print(f"wrote {out}")
    return 0
