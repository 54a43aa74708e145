"""One writer of each verdict's words: throttled, its cause, not throttled (issue 54 item 3).

The headline a customer reads first (``headline``: one short sentence per device, what, since when, why, at which
ceiling, then the evidence), the verdict table's throttling line (``throttled_row``, ``not_throttled_row``) and
report.json's ``devices[].verdict`` (the headline's text) all take their words from here.
"""

from __future__ import annotations

import datetime as dt

from . import humanize

THROTTLED, NOT_THROTTLED = "throttled", "not throttled"
# the cause the rules named, as the headline's "why" where it is the throttle's own; any other named cause is said as
# "slow because of" its label (cause_episodes.LABELS)
BY = {"provider_cap": "by its provider"}


def clock(ts: float) -> str:
    """03:39 (UTC): the minute a person reads in a headline; the evidence gives the seconds."""
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%H:%M")


def fmt_time(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def hhmmss(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%H:%M:%S")


def spans_text(spans: list[tuple[float, float]]) -> str:
    """The spans in words, "from 14:46:01 to 14:47:16 and ..."; a span within one second (an alert that began as its
    load ended, counted for that load) reads "at 14:47:16"."""
    return " and ".join(f"at {hhmmss(a)}" if hhmmss(a) == hhmmss(b) else f"from {hhmmss(a)} to {hhmmss(b)}"
                        for a, b in spans[:3]) + (" and later" if len(spans) > 3 else "")


def cap(reads: float, writes: float) -> str:
    """The ceiling per direction, as read off the chart: "~700 reads/s + ~300 writes/s"."""
    return " + ".join(f"~{humanize.approx(v)} {what}/s" for v, what in ((reads, "reads"), (writes, "writes")) if v >= 1) or "~0 IO/s"


def headline(device: str, ok: bool | None, evidence: str, *, throttled: list[tuple[float, float]] | None = None,
             until: float = 0.0, reads: float = 0.0, writes: float = 0.0, cause: dict | None = None,
             slow_since: float | None = None) -> str:
    """The device's headline: one short sentence, then its evidence. ``throttled``: when the throttling alert held (the
    sentence says "since" where the last span reaches ``until``, the window's end less one sample); ``reads``/``writes``:
    the ceiling per direction; ``cause``: the dominant named cause (``CauseFindings.dominant``), first seen at ``slow_since``."""
    if ok is None and not throttled:
        return f"{device}: {evidence}"  # no data
    if throttled:
        held = sum(b - a for a, b in throttled)
        when = (f"has been {THROTTLED} {{by}}since {clock(throttled[0][0])} UTC" if throttled[-1][1] >= until
                else f"was {THROTTLED} {{by}}for {humanize.span(held)} from {clock(throttled[0][0])} UTC")
        by = BY.get(cause["key"], "") if cause else ""
        sentence = f"{device} {when.format(by=by + ' ' if by else '')} at {cap(reads, writes)}"
        if cause and not by:
            sentence += f", slow because of {cause['label']}"
    else:
        sentence = f"{device} is {NOT_THROTTLED}"
        if cause:
            sentence += f"; slow because of {cause['label']}" + (f" since {clock(slow_since)} UTC" if slow_since is not None else "")
    return f"{sentence}. {evidence}"


def inconclusive(device: str, reason: str, more: int) -> str:
    return f"{device}: inconclusive — the load failed: {reason}" + (f" (and {more} more)" if more else "")


def throttled_row(label: str, ceiling: float, windows: list[tuple[float, float]], declared: str) -> str:
    """The verdict table's throttling line of a throttled device: the IOPS ceiling, the alert's windows, its declared limit."""
    return (f"{label}: {THROTTLED.upper()} — IOPS flat at a ceiling of {humanize.count(ceiling)}/s "
            f"({', '.join(f'{fmt_time(a)}–{hhmmss(b)}' for a, b in windows[:4])} UTC); declared limit: {declared or 'none declared'}")


def not_throttled_row(label: str, declared: str) -> str:
    return f"{label}: {NOT_THROTTLED} (no throttling signature in the window)" + (f"; declared limit: {declared}" if declared else "")
