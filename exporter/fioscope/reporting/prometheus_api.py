"""The few Prometheus HTTP API calls the diagnosis report makes (``/api/v1/query_range``,
``/api/v1/query``), and the report window from ``--last`` / ``--from`` / ``--to``.

Range queries ask for at most ``MAX_POINTS`` points per series: over a 24 h window the step
grows (here one point per minute) and the report says so.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

from . import ReportError, duration_flag

MAX_POINTS = 1500
MAX_QUERY_STEPS = 10_000  # Prometheus answers at most 11,000 points per series
MIN_STEP = 15.0  # the stack's scrape and evaluation interval
TIMEOUT = 30.0


@dataclass
class Series:
    labels: dict[str, str]
    times: list[float]
    values: list[float]


def spans(times: list[float], step: float) -> list[tuple[float, float]]:
    """Runs of consecutive sample times (a gap of more than 1.5 steps ends a run)."""
    out: list[tuple[float, float]] = []
    for t in times:
        if out and t - out[-1][1] <= 1.5 * step:
            out[-1] = (out[-1][0], t)
        else:
            out.append((t, t))
    return out


def where_device(labels: dict[str, str]) -> tuple[str, str]:
    """(host, device) of a series: the ``host`` label, or the instance of a stack older than the fleet topology."""
    return labels.get("host") or labels.get("instance", ""), labels.get("device", "")


def step_for(start: float, end: float, min_step: float = MIN_STEP) -> float:
    return max(min_step, math.ceil((end - start) / MAX_POINTS))


def redact(url: str) -> str:
    """``url`` without its password (``http://user:***@host/``): what any message may show of it."""
    try:
        parsed = urllib.parse.urlsplit(url)
    except ValueError:
        return "<an unparseable URL>"
    if parsed.password is None and "@" not in parsed.netloc:
        return url
    host = parsed.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit(parsed._replace(netloc=f"{parsed.username or ''}:***@{host}"))


class Prometheus:
    """``http(s)://[user:password@]host:port[/prefix]``: the userinfo becomes basic auth, and is never shown."""

    def __init__(self, url: str, flag: str = "--prometheus.url"):
        try:
            parsed = urllib.parse.urlsplit(url)
            parsed.port  # noqa: B018 - raises ValueError for a port that is not a number
        except ValueError:
            parsed = None
        if parsed is None or parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ReportError(f"{flag} {redact(url)!r}: not an http(s) URL")
        self.auth = ""
        if parsed.username is not None or parsed.password is not None:
            user, password = urllib.parse.unquote(parsed.username or ""), urllib.parse.unquote(parsed.password or "")
            self.auth = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
            parsed = parsed._replace(netloc=parsed.netloc.rpartition("@")[2])
        self.url = urllib.parse.urlunsplit(parsed).rstrip("/")  # no userinfo: safe in every message
        self.flag = flag

    def _get(self, path: str, params: dict[str, str]) -> dict:
        full = urllib.request.Request(f"{self.url}{path}?{urllib.parse.urlencode(params)}",
                                      headers={"Authorization": self.auth} if self.auth else {})
        try:
            with urllib.request.urlopen(full, timeout=TIMEOUT) as resp:
                body = json.load(resp)
        except urllib.error.HTTPError as exc:
            try:
                detail = json.load(exc).get("error", "")
            except ValueError:
                detail = ""
            raise ReportError(f"{self.flag} {self.url}: HTTP {exc.code} for {params.get('query', path)!r}: {detail}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise ReportError(f"{self.flag} {self.url}: cannot reach Prometheus: {getattr(exc, 'reason', exc)}") from None
        except ValueError:
            raise ReportError(f"{self.flag} {self.url}: the answer is not Prometheus JSON") from None
        if body.get("status") != "success":
            raise ReportError(f"{self.flag} {self.url}: query {params.get('query')!r} failed: {body.get('error')}")
        return body["data"]

    def range(self, query: str, start: float, end: float, step: float) -> list[Series]:
        """One series per label set; a window of more steps than Prometheus answers at once is asked in pieces."""
        by_labels: dict[tuple, Series] = {}
        while start <= end:
            piece_end = min(end, start + (MAX_QUERY_STEPS - 1) * step)
            data = self._get("/api/v1/query_range",
                             {"query": query, "start": f"{start:.3f}", "end": f"{piece_end:.3f}", "step": f"{step:g}"})
            for r in data.get("result", []):
                metric = r.get("metric", {})
                series = by_labels.setdefault(tuple(sorted(metric.items())), Series(metric, [], []))
                for t, v in r.get("values", []):
                    series.times.append(float(t))
                    series.values.append(float(v))
            start = piece_end + step
        return list(by_labels.values())

    def samples(self, selector: str, start: float, end: float) -> list[Series]:
        """Every raw sample of ``selector`` in (start, end], at the times it was scraped (a range-vector query)."""
        data = self._get("/api/v1/query", {"query": f"{selector}[{max(1, math.ceil(end - start))}s]", "time": f"{end:.3f}"})
        out = []
        for r in data.get("result", []) if data.get("resultType") == "matrix" else []:
            values = [(float(t), float(v)) for t, v in r.get("values", [])]
            out.append(Series(r.get("metric", {}), [t for t, _ in values], [v for _, v in values]))
        return out

    def instant(self, query: str, at: float) -> list[Series]:
        data = self._get("/api/v1/query", {"query": query, "time": f"{at:.3f}"})
        return [Series(r.get("metric", {}), [float(r["value"][0])], [float(r["value"][1])]) for r in data.get("result", [])
                if data.get("resultType") == "vector"]


def _when(value: str, flag: str) -> float:
    try:
        return float(value)
    except ValueError:
        pass
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        raise ReportError(f"{flag} {value!r}: expected unix seconds or ISO 8601 (2026-05-01T12:00:00Z)") from None
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)).timestamp()


def window(start: str | None, end: str | None, last: str | None, now: float | None = None) -> tuple[float, float]:
    """The report window: ``--from``/``--to`` or ``--last`` (default the last hour)."""
    if last and start:
        raise ReportError("--last and --from exclude each other")
    to = _when(end, "--to") if end else (now or time.time())
    if start:
        frm = _when(start, "--from")
    else:
        frm = to - duration_flag(last or "1h", "--last")
    if frm >= to:
        raise ReportError(f"--from/--to: the window is empty ({frm:.0f} >= {to:.0f})")
    return frm, to
