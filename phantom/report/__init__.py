"""Reports: the end-of-run summary and the JSON results (schema in docs/report-schema.md)."""
from phantom.report.summary import SCHEMA, build_report, print_summary, write_report

__all__ = ["SCHEMA", "build_report", "print_summary", "write_report"]
