"""A report as HTML, Markdown or JSON.

Every value a template prints passes through an escaper that the environment applies by
itself, so a host or GPU name holding markup is shown as text whatever the template
does: HTML autoescaping in the HTML; in Markdown, `finalize` escapes Markdown's own
characters and turns `<`, `>` and `&` into entities (Markdown viewers render raw HTML).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import sys
from importlib.resources import files
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from fleet.errors import InputError
from fleet.report.build import Report
from fleet.version import __version__
from fleet.words import counted

FORMATS = ("html", "md", "json")
_MARKDOWN = str.maketrans({"\\": "\\\\", "|": "\\|", "*": "\\*", "_": "\\_", "`": "\\`",
                           "[": "\\[", "]": "\\]", "<": "&lt;", ">": "&gt;", "&": "&amp;",
                           "#": "\\#", "\n": " ", "\r": " "})


def markdown_text(value: Any) -> str:
    """`value` as Markdown text, its markup characters escaped; "" for None."""
    return "" if value is None else str(value).translate(_MARKDOWN)


def _pct(value: float | None, digits: int = 1) -> str:
    return "" if value is None else f"{value * 100:.{digits}f}%"


def _fixed(value: float | None, digits: int = 1) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def _sig(value: float | None) -> str:
    return "" if value is None else f"{value:.2g}"


def _when(value: dt.datetime | None) -> str:
    return "" if value is None else value.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def _environment(fmt: str) -> Environment:
    templates = str(files("fleet.report") / "templates")
    if fmt == "html":
        env = Environment(loader=FileSystemLoader(templates), autoescape=True,
                          undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    else:
        env = Environment(loader=FileSystemLoader(templates), autoescape=False,
                          undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                          finalize=markdown_text)
    env.filters.update(pct=_pct, fixed=_fixed, sig=_sig, when=_when, counted=counted)
    return env


def plain(value: Any) -> Any:
    """JSON-ready data: dataclasses as their fields plus their properties (the evidence
    sentences, gaps, costs), times in ISO 8601, non-finite floats as null."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        data = {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
        for name, member in vars(type(value)).items():
            if isinstance(member, property) and not name.startswith("_"):
                data[name] = plain(getattr(value, name))
        return data
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def render(report: Report, fmt: str) -> str:
    """The report in `fmt` (html, md or json); ValueError for another format."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown report format {fmt!r}: choose one of {', '.join(FORMATS)}")
    if fmt == "json":
        data = plain(report)
        data.pop("options", None)
        data["settings"] = plain(report.options)
        data["findings"] = report.counts()
        data["format"] = "fleet-report/1"
        data["fleet_version"] = __version__
        return json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    template = _environment(fmt).get_template(f"report.{fmt}.j2")
    return template.render(r=report, version=__version__)


def write_report(report: Report, fmt: str, output: str) -> str:
    """Write to `output` ("-" for stdout); returns where it went."""
    text = render(report, fmt)
    if output == "-":
        sys.stdout.write(text)
        return "standard output"
    path = Path(output)
    if path.is_dir():
        raise InputError(f"--output {output}: is a directory; give a file name such as "
                         f"{path / ('fleet-report.' + fmt)}")
    try:
        if path.exists() and not path.is_file():  # /dev/null, a pipe: write straight in
            path.write_text(text, encoding="utf-8")
            return str(path)
        # Written beside and renamed, so a reader never sees half a report.
        partial = path.with_name(f".{path.name}.partial")
        try:
            partial.write_text(text, encoding="utf-8")
            partial.replace(path)
        finally:
            partial.unlink(missing_ok=True)
    except OSError as exc:
        raise InputError(f"--output {output}: cannot write the report ({exc.strerror})"
                         ) from None
    return str(path)
