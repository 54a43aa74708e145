"""The one parser per unit: durations and sizes, as every config file, flag and report reads them.

Durations take Prometheus's own format (``1d``, ``1h30m``, ``500ms``, ``2w``, ``1y``) and, for
thresholds, one decimal number with one unit (``0.3ms``, ``1.5s``, ``250us``) or a bare number of
seconds. Sizes take fio's suffixes: ``Ki``/``Mi``/... are always powers of 1024; a bare ``k``/``M``
is 1024 for fio's own options (its ``kb_base=1024`` default) and 1000 where a caller says so
(declared cloud limits, "125 MB/s").
"""

from __future__ import annotations

import math
import re

__all__ = ["UnitError", "parse_duration", "format_duration", "parse_size"]


class UnitError(ValueError):
    """A value that is not a duration or a size; the message quotes it and shows an example."""


_DURATION_UNITS = {"y": 365 * 86400, "w": 7 * 86400, "d": 86400, "h": 3600, "m": 60, "s": 1, "ms": 1e-3, "us": 1e-6, "µs": 1e-6}
# Prometheus: integer terms, largest unit first, each at most once (model.ParseDuration)
_PROMETHEUS = re.compile(r"(?:(\d+)y)?(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?(?:(\d+)ms)?")
_PROMETHEUS_UNITS = ("y", "w", "d", "h", "m", "s", "ms")
_DECIMAL = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(?:e([+-]?\d{1,3}))?\s*(y|w|d|h|m|s|ms|us|µs)?")
# a duration beyond this is a typo, not a plan (and would overflow datetime arithmetic)
MAX_DURATION_SECONDS = 100 * 365 * 86400


def parse_duration(value: object, *, positive: bool = False, prometheus: bool = False) -> float:
    """``"1h30m"``, ``"1d"``, ``"10ms"``, ``"0.3ms"``, ``90`` -> seconds (finite, >= 0; > 0 where ``positive``).

    ``prometheus``: only Prometheus's own text form (it goes into PromQL or a rule's ``for:``).
    """
    if prometheus and not _is_prometheus(value):
        raise UnitError(f"{value!r} is not a Prometheus duration (e.g. 30s, 1h30m, 500ms)")
    if isinstance(value, bool):
        raise UnitError(f"{value!r} is not a duration (e.g. 30s, 1h30m, 10ms)")
    if isinstance(value, (int, float)):
        seconds = _float(value)
    else:
        text = str(value).strip()
        seconds = _duration_text(text)
    if not math.isfinite(seconds) or seconds < 0 or seconds > MAX_DURATION_SECONDS:
        raise UnitError(f"{value!r} is not a duration between 0 and 100y")
    if positive and seconds <= 0:
        raise UnitError(f"{value!r} must be more than 0")
    return seconds


def _is_prometheus(value: object) -> bool:
    m = _PROMETHEUS.fullmatch(value) if isinstance(value, str) else None
    return value == "0s" or bool(m and any(m.groups()))


def _duration_text(text: str) -> float:
    m = _PROMETHEUS.fullmatch(text)
    if text and m and any(m.groups()):
        return float(sum(int(n) * _DURATION_UNITS[u] for n, u in zip(m.groups(), _PROMETHEUS_UNITS) if n))
    m = _DECIMAL.fullmatch(text)
    if not m:
        raise UnitError(f"{text!r} is not a duration (e.g. 30s, 1h30m, 10ms)")
    number = float(m.group(1) + (f"e{m.group(2)}" if m.group(2) else ""))
    return number * _DURATION_UNITS[m.group(3) or "s"]


def _float(number: int | float) -> float:
    """A YAML/JSON number as float; an integer too large for one (400 digits) is infinite, refused by the range check."""
    try:
        return float(number)
    except OverflowError:
        return math.inf


def format_duration(seconds: float) -> str:
    """Seconds as a Prometheus duration (``90`` -> ``1m30s``, ``0.25`` -> ``250ms``), for generated rules."""
    if not math.isfinite(seconds) or seconds < 0:
        raise UnitError(f"{seconds!r} is not a duration")
    millis = round(seconds * 1000)
    if millis == 0:
        return "0s"
    out = ""
    for unit in _PROMETHEUS_UNITS:
        size = round(_DURATION_UNITS[unit] * 1000)
        count, millis = divmod(millis, size)
        if count:
            out += f"{count}{unit}"
    return out


_SIZE = re.compile(r"(\d+(?:\.\d*)?|\.\d+)\s*(?:([kmgtp])(i)?)?(?:b|/s|b/s)?", re.IGNORECASE)
_POWERS = {"k": 1, "m": 2, "g": 3, "t": 4, "p": 5}
# a size beyond this is a typo (an exabyte), not a disk
MAX_SIZE = float(2**60)


def parse_size(value: object, *, kilo: int = 1024) -> float:
    """``"4k"``, ``"1MiB"``, ``"125MB/s"``, ``2300`` -> bytes (finite, >= 0).

    ``Ki``/``Mi``/... are 1024-based; a bare ``k``/``M``/... is ``kilo``-based (1024 as fio reads
    its own options, 1000 for declared limits).
    """
    if kilo not in (1000, 1024):
        raise ValueError("kilo is 1000 or 1024")
    if isinstance(value, bool):
        raise UnitError(f"{value!r} is not a size (e.g. 4k, 1MiB, 125MB/s)")
    if isinstance(value, (int, float)):
        size = _float(value)
    else:
        m = _SIZE.fullmatch(str(value).strip())
        if not m:
            raise UnitError(f"{value!r} is not a size (e.g. 4k, 1MiB, 125MB/s)")
        prefix, binary = m.group(2), m.group(3)
        base = 1024 if binary else kilo
        size = float(m.group(1)) * (base ** _POWERS[prefix.lower()] if prefix else 1)
    if not math.isfinite(size) or size < 0 or size > MAX_SIZE:
        raise UnitError(f"{value!r} is not a size between 0 and 1EiB")
    return size
