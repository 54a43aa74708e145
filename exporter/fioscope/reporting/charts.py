"""Every chart of every report, drawn by matplotlib on the Agg backend (no display needed).

Axes carry engineering units (``EngFormatter``: 2.5 ms, 12 kIOPS, 80 MB/s); time axes are
UTC. A ``Chart`` is a named figure; ``html.write_report`` saves it as PNG and embeds it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import matplotlib

matplotlib.use("Agg")
import matplotlib.dates as mdates
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import EngFormatter, Formatter, FuncFormatter, PercentFormatter

from .results import Point

WIDTH, HEIGHT, DPI = 10.0, 3.4, 96
_UNIX_EPOCH = float(mdates.date2num(dt.datetime(1970, 1, 1, tzinfo=dt.UTC)))  # in matplotlib's date numbers (days)


@dataclass
class Chart:
    name: str  # file stem, unique in a report
    title: str
    figure: Figure


@dataclass
class Line:
    label: str
    times: Sequence[float]  # unix seconds
    values: Sequence[float]


@dataclass
class Window:
    """A shaded span on a time chart: a fio run, a firing alert."""

    label: str
    start: float
    end: float


def plain(text: str) -> str:
    """Text from the input as matplotlib draws it literally: a ``$`` would start mathtext, and mathtext
    that does not parse (a device named ``$\\x$``) fails the whole report."""
    return text.replace("$", r"\$")


def _figure(layout: Literal["constrained"] | None = "constrained") -> tuple[Figure, Axes]:
    fig = Figure(figsize=(WIDTH, HEIGHT), dpi=DPI, layout=layout)
    return fig, fig.add_subplot()


# a time chart's axes at one place on every figure (fractions of it): the charts of a device, stacked on the page, share
# their time axis pixel for pixel (a layout engine fitted each to its own tick labels and legend, so their left edges
# differed); the legend goes right of the axes, never over the data; the run labels go above the axes, under the title
TIME_AXES = {"left": 0.1, "right": 0.835, "bottom": 0.17, "top": 0.78}


def _utc(ts: Sequence[float]) -> list[float]:
    """Unix seconds -> matplotlib date numbers (UTC), by arithmetic: a datetime per point made long charts slow."""
    return [_UNIX_EPOCH + t / 86400.0 for t in ts]


def time_chart(name: str, title: str, lines: list[Line], unit: str, windows: list[Window], percent: bool = False,
               formatter: Formatter | None = None, ylabel: str = "", span: tuple[float, float] | None = None,
               levels: Sequence[tuple[str, float]] = ()) -> Chart:
    """Lines over UTC time, each window shaded and labelled; ``formatter`` overrides the engineering-unit axis;
    ``levels``: (label, value) drawn as dashed horizontal lines (a ceiling the verdict names), named in the legend."""
    fig, ax = _figure(layout=None)
    fig.subplots_adjust(**TIME_AXES)
    for line in lines:
        if line.times:
            ax.plot(_utc(line.times), line.values, label=plain(line.label), linewidth=1.2)
    for i, (label, value) in enumerate(levels):
        ax.axhline(value, color=f"C{i}", linestyle="--", linewidth=1, alpha=0.8, label=plain(label))
    for i, w in enumerate(windows):
        # an edge too: a 2 s run on an hour's axis is narrower than a pixel, and must still show
        ax.axvspan(*_utc([w.start, w.end]), facecolor="tab:orange", alpha=0.2, edgecolor="tab:orange", linewidth=0.8)
        ax.annotate(plain(w.label), xy=(_utc([w.start])[0], 1.0), xycoords=("data", "axes fraction"), xytext=(2, 2 + 9 * (i % 3)),
                    textcoords="offset points", fontsize=7, color="tab:brown", va="bottom", annotation_clip=False)
    ax.yaxis.set_major_formatter(formatter or (PercentFormatter(1.0) if percent else EngFormatter(unit=unit)))
    if ylabel:
        ax.set_ylabel(ylabel)
    locator = mdates.AutoDateLocator(tz=dt.UTC)
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator, tz=dt.UTC))
    ax.set_xlabel("time (UTC)")
    ax.set_title(plain(title), fontsize=10, loc="left", pad=4 + 9 * min(3, len(windows)))  # above the run labels
    ax.set_ylim(bottom=0)
    if span:  # every chart of a report on one time axis, so a run's shading lines up from chart to chart
        ax.set_xlim(*_utc(span))
    ax.grid(alpha=0.3)
    if any(line.times for line in lines):
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0, frameon=False)
    return Chart(name, title, fig)


def uses_bandwidth(bs: str) -> bool:
    """Large blocks are judged by throughput, small ones by IOPS."""
    digits = "".join(c for c in bs if c.isdigit())
    unit = bs.lower().rstrip("b")[-1:] if bs else ""
    scale = {"k": 1024, "m": 2**20, "g": 2**30}.get(unit, 1)
    return bool(digits) and int(digits) * scale >= 64 * 1024


def _throughput(points: Sequence[Point], bandwidth: bool) -> tuple[list[float], list[float]]:
    if bandwidth:
        return [p.bw for p in points], [p.bw_sd for p in points]
    return [p.iops for p in points], [p.iops_sd for p in points]


def response_chart(name: str, title: str, series: list[tuple[str, Sequence[Point]]], bandwidth: bool,
                   marks: Sequence[tuple[str, Point]] = (), latency_target: float | None = None) -> Chart:
    """Throughput against mean and p99 completion latency, one point per queue depth, with error bars."""
    fig, ax = _figure()
    for i, (label, points) in enumerate(series):
        xs, xerr = _throughput(points, bandwidth)
        color = f"C{i}"
        ax.errorbar(xs, [p.lat_mean for p in points], xerr=xerr, yerr=[p.lat_sd for p in points], fmt="o-", color=color,
                    capsize=3, markersize=4, label=plain(f"{label} mean"), gid=f"errorbar-{name}-{i}-mean")
        ax.errorbar(xs, [p.lat_p99 for p in points], xerr=xerr, yerr=[p.p99_sd for p in points], fmt="s--", color=color,
                    capsize=3, markersize=4, alpha=0.7, label=plain(f"{label} p99"), gid=f"errorbar-{name}-{i}-p99")
        for x, p in zip(xs, points):
            ax.annotate(f"qd{p.depth}", (x, p.lat_mean), textcoords="offset points", xytext=(3, -10), fontsize=7, color=color)
    for i, (label, p) in enumerate(marks):
        x = p.bw if bandwidth else p.iops
        ax.axvline(x, color="grey", linestyle=":", linewidth=1)
        ax.annotate(plain(label), (x, 1.0), xycoords=("data", "axes fraction"), xytext=(3, -12 - 10 * i), textcoords="offset points",
                    fontsize=7)
    if latency_target:
        ax.axhline(latency_target, color="tab:red", linestyle="--", linewidth=1, label="latency target")
    ax.set_yscale("log")
    # bytes binary as `fioscope run` prints them (MiB/s); IOPS plain
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v / 2**20:g} MiB/s") if bandwidth else EngFormatter(unit="IOPS"))
    ax.yaxis.set_major_formatter(EngFormatter(unit="s"))
    ax.set_xlabel("bandwidth" if bandwidth else "IOPS")
    ax.set_ylabel("completion latency")
    ax.set_title(plain(title), fontsize=10, loc="left")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    return Chart(name, title, fig)


def count_axis(unit: str) -> FuncFormatter:
    """Axis ticks for counts per second: 0, 350, 1.2k (never 50m)."""
    def fmt(value: float, _pos: object) -> str:
        if abs(value) >= 1e6:
            return f"{value / 1e6:g}M"
        if abs(value) >= 1e4:
            return f"{value / 1e3:g}k"
        return f"{value:g}"
    return FuncFormatter(lambda v, p: f"{fmt(v, p)}{(' ' + unit) if unit and v == 0 else ''}")


def latency_axis() -> FuncFormatter:
    """Axis ticks for latency given in milliseconds (iostat's await)."""
    return FuncFormatter(lambda v, _p: "0" if v == 0 else f"{v * 1000:g} µs" if v < 1 else f"{v:g} ms")
