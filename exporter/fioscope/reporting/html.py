"""Writing a report: ``report.html`` (Jinja2, charts embedded as PNG ``data:`` URIs), the PNGs
beside it, optionally ``report.pdf`` (matplotlib's PdfPages). Files appear atomically: a report
that fails half-way leaves no empty or partial file behind.
"""

from __future__ import annotations

import base64
import datetime as dt
import io
import os
import tempfile
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import jinja2
from matplotlib.backends.backend_pdf import PdfPages
from matplotlib.figure import Figure

from .. import __version__
from ..verdicts import Verdict  # the one Verdict: `run`'s and the reports' (data-* attributes here)
from . import ReportError
from .charts import DPI, Chart
from .reportjson import report_json


@dataclass
class Table:
    columns: list[str]
    rows: list[list[str]]
    marked: set[tuple[int, int]] = field(default_factory=set)  # (row, column) cells to highlight


@dataclass
class Section:
    title: str
    charts: list[Chart] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)


@dataclass
class Report:
    kind: str  # diagnosis, performance, comparison
    title: str
    summary: list[str] = field(default_factory=list)  # what was looked at, downsampling, sources
    verdicts: list[Verdict] = field(default_factory=list)
    sections: list[Section] = field(default_factory=list)
    json: dict = field(default_factory=dict)  # report.json beside report.html (reportjson.py)


_env = jinja2.Environment(loader=jinja2.PackageLoader("fioscope.reporting", "templates"),
                          autoescape=jinja2.select_autoescape(["html"]), undefined=jinja2.StrictUndefined)


def _png(chart: Chart) -> bytes:
    buf = io.BytesIO()
    chart.figure.savefig(buf, format="png", dpi=DPI)
    return buf.getvalue()


def _cover(report: Report) -> Figure:
    """The PDF's first page: the title, what was looked at and the verdicts, as text."""
    fig = Figure(figsize=(8.27, 11.69))
    lines = [*report.summary, "", *(("PASS  " if v.ok else "FAIL  " if v.ok is False else "      ") + v.text for v in report.verdicts)]
    fig.text(0.06, 0.96, report.title, fontsize=13, weight="bold", va="top", wrap=True)
    fig.text(0.06, 0.92, "\n".join(textwrap.fill(line, 110) for line in lines), fontsize=7, va="top", family="monospace")
    return fig


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    umask = os.umask(0)
    os.umask(umask)
    try:
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_report(report: Report, output: str | Path, pdf: bool = False) -> Path:
    """Render ``report`` into ``output``/report.html (+ PNGs, + report.pdf); returns the HTML path."""
    out = Path(output)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ReportError(f"--output {output}: cannot create: {exc.strerror}") from None
    charts = [c for s in report.sections for c in s.charts]
    images = {}
    try:
        for chart in charts:
            png = _png(chart)
            _atomic_write(out / f"{chart.name}.png", png)
            images[chart.name] = "data:image/png;base64," + base64.b64encode(png).decode()
        html = _env.get_template("report.html.j2").render(
            report=report, images=images, version=__version__,
            generated=dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC"))
        _atomic_write(out / "report.json", report_json(report).encode())
        _atomic_write(out / "report.html", html.encode())
        if pdf:
            buf = io.BytesIO()
            with PdfPages(buf) as pages:
                pages.savefig(_cover(report))
                for chart in charts:
                    pages.savefig(chart.figure)
            _atomic_write(out / "report.pdf", buf.getvalue())
    except OSError as exc:
        raise ReportError(f"--output {output}: cannot write: {exc.strerror or exc}") from None
    return out / "report.html"
