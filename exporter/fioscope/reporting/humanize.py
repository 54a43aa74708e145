"""Numbers as a person reads them in a report, in the units ``fioscope run`` prints.

Bytes are binary (KiB, MiB/s), latency in µs/ms/s, counts never carry a milli prefix
("0.4 IO/s", not "400 mIO/s"). Charts use matplotlib formatters for the same units (``charts.count_axis``); nothing
here imports matplotlib, so the judge (``diagnosis``) words its figures without it.
"""

from __future__ import annotations

import math

from fioscope_mixin.units import format_duration


def count(value: float, unit: str = "") -> str:
    """1,234 / 12.3 / 0.4 (+ unit): thousands separated, no SI prefix below one."""
    if not math.isfinite(value):
        return f"{value} {unit}".strip()
    text = "0" if value == 0 else f"{value:,.0f}" if abs(value) >= 100 else f"{value:.1f}" if abs(value) >= 1 else f"{value:.2f}"
    return f"{text} {unit}".strip()


def approx(value: float) -> str:
    """A figure read off a chart, to two significant digits: ~1,000 for 1,004 (a cap is a round number)."""
    if not math.isfinite(value) or value == 0:
        return count(value)
    return count(round(value, 1 - math.floor(math.log10(abs(value)))))


def latency(seconds: float | None) -> str:
    """µs below a millisecond, ms below a second, else s."""
    if seconds is None or not math.isfinite(seconds):
        return "n/a"
    if seconds == 0:
        return "0"
    if abs(seconds) < 1e-3:
        return f"{seconds * 1e6:.3g} µs"
    if abs(seconds) < 1:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds:.3g} s"


def span(seconds: float) -> str:
    """A length of time in words where it is whole hours or minutes ("5 minutes"), else as a duration ("2m32s")."""
    whole = round(seconds)
    if whole >= 3600 and whole % 3600 == 0:
        hours = whole // 3600
        return f"{hours} hour{'s' if hours != 1 else ''}"
    if whole >= 60 and whole % 60 == 0:
        minutes = whole // 60
        return f"{minutes} minute{'s' if minutes != 1 else ''}"
    return format_duration(whole)


def binary(value: float, unit: str = "B") -> str:
    """Bytes with binary prefixes: 46.1 MiB/s, 4 KiB."""
    for scale, prefix in ((2**40, "Ti"), (2**30, "Gi"), (2**20, "Mi"), (2**10, "Ki")):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def mib_per_s(bytes_per_second: float) -> str:
    return f"{bytes_per_second / 2**20:.1f} MiB/s"
