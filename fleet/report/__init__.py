"""`fleet report`: findings built from the store (build), drawn (charts), rendered and
written (render)."""

from fleet.report.build import Report, ReportOptions, build_report
from fleet.report.render import FORMATS, render, write_report

__all__ = ["FORMATS", "Report", "ReportOptions", "build_report", "render", "write_report"]
