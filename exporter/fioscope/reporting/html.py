"""Writing a report: ``report.html`` (Jinja2, charts embedded as PNG ``data:`` URIs), the PNGs
beside it, optionally ``report.pdf`` (matplotlib's PdfPages). Every file is written into a
temporary directory beside the output and moved into place at the end: a report that fails half-way
leaves no file behind, and a previous report there stays whole.

Everything on the page is escaped (names come from input files: device, host, job names, fio's
``directory``), and chart file names are made safe and unique here, whatever the chart is called.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import io
import os
import re
import shutil
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
from .charts import DPI, Chart, plain
from .reportjson import report_json


@dataclass
class Table:
    columns: list[str]
    rows: list[list[str]]
    marked: set[tuple[int, int]] = field(default_factory=set)  # (row, column) cells to highlight
    failed: set[int] = field(default_factory=set)  # rows shown red (a load phase whose load failed)
    kind: str = ""  # the table's class on the page ("phases": the phase table, laid out to fit the page's width)


@dataclass
class Section:
    title: str
    charts: list[Chart] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    details: bool = False  # folded at the end of the page (<details>): names and figures for a colleague, not the verdict


@dataclass
class Report:
    kind: str  # diagnosis, performance, comparison
    title: str
    summary: list[str] = field(default_factory=list)  # what was looked at, downsampling, sources
    verdicts: list[Verdict] = field(default_factory=list)
    sections: list[Section] = field(default_factory=list)
    json: dict = field(default_factory=dict)  # report.json beside report.html (reportjson.py)


# autoescape always: the one template is HTML (select_autoescape(["html"]) missed it: it is named *.html.j2)
_env = jinja2.Environment(loader=jinja2.PackageLoader("fioscope.reporting", "templates"),
                          autoescape=True, undefined=jinja2.StrictUndefined)
MAX_STEM = 80


def file_stems(names: list[str]) -> list[str]:
    """A safe, unique file stem per chart name: ASCII letters, digits, ``.-_``; a name that had to be changed
    gets a hash of itself (``sd-a`` and ``sd_a`` stay apart), and a repeated one a counter."""
    stems: list[str] = []
    for name in names:
        stem = re.sub(r"[^A-Za-z0-9._-]+", "_", name).lstrip(".")[:MAX_STEM] or "chart"
        if stem != name:
            stem += "-" + hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        unique, n = stem, 1
        while unique in stems:
            n += 1
            unique = f"{stem}-{n}"
        stems.append(unique)
    return stems


def _png(chart: Chart) -> bytes:
    buf = io.BytesIO()
    chart.figure.savefig(buf, format="png", dpi=DPI)
    return buf.getvalue()


def _cover(report: Report) -> Figure:
    """The PDF's first page: the title, what was looked at and the verdicts, as text."""
    fig = Figure(figsize=(8.27, 11.69))
    marks = {True: "PASS", False: "FAIL", None: ""}
    lines = [*report.summary, "", *(f"{marks[v.ok] if v.decided else 'NOT DECIDED':12}{v.text}" for v in report.verdicts)]
    fig.text(0.06, 0.96, plain(report.title), fontsize=13, weight="bold", va="top", wrap=True)
    fig.text(0.06, 0.92, plain("\n".join(textwrap.fill(line, 110) for line in lines)), fontsize=7, va="top", family="monospace")
    return fig


def _write(path: Path, data: bytes) -> None:
    with path.open("wb") as f:
        f.write(data)


def _move_into_place(staged: Path, out: Path) -> None:
    """A new output directory appears whole (one rename); into an existing one each file is replaced
    atomically, report.html last, so the page never points at charts that are not there yet."""
    umask = os.umask(0)
    os.umask(umask)
    staged.chmod(0o777 & ~umask)
    try:
        staged.rename(out)  # out absent (or an empty directory)
        return
    except OSError:
        if not out.is_dir():
            raise
    for path in sorted(staged.iterdir(), key=lambda p: p.name == "report.html"):
        os.replace(path, out / path.name)


def write_report(report: Report, output: str | Path, pdf: bool = False) -> Path:
    """Render ``report`` into ``output``/report.html (+ PNGs, + report.pdf); returns the HTML path."""
    out = Path(output)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        staged = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}."))
    except OSError as exc:
        raise ReportError(f"--output {output}: cannot create: {exc.strerror}") from None
    charts = [c for s in report.sections for c in s.charts]
    for chart, stem in zip(charts, file_stems([c.name for c in charts])):
        chart.name = stem  # the page refers to each chart by its file stem
    images = {}
    try:
        for chart in charts:
            png = _png(chart)
            _write(staged / f"{chart.name}.png", png)
            images[chart.name] = "data:image/png;base64," + base64.b64encode(png).decode()
        html = _env.get_template("report.html.j2").render(
            report=report, images=images, version=__version__,
            generated=dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC"))
        _write(staged / "report.json", report_json(report).encode())
        _write(staged / "report.html", html.encode())
        if pdf:
            buf = io.BytesIO()
            with PdfPages(buf) as pages:
                pages.savefig(_cover(report))
                for chart in charts:
                    pages.savefig(chart.figure)
            _write(staged / "report.pdf", buf.getvalue())
        _move_into_place(staged, out)
    except OSError as exc:
        raise ReportError(f"--output {output}: cannot write: {exc.strerror or exc}") from None
    finally:
        shutil.rmtree(staged, ignore_errors=True)
    return out / "report.html"
