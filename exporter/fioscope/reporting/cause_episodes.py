"""Why a disk was slow, per device and per episode (issue 29), as the report tells it.

The cause is the mixin's (``fioscope_mixin.cause``: ``fioscope:disk_slow_cause{cause=...}``, exactly one per slow
device): live as the stack's rule evaluation recorded it, offline as the temporary Prometheus recorded it from the same
rules over the capture (``offline.pipeline.backfilled``). Here its samples become episodes (start, end, cause, the evidence figures);
a slow stretch (await well above the device's normal) that no cause names is an episode whose cause is not decided, and
the report says which evidence its source lacks. Plain words only: no alert or metric names reach the page.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from fioscope_mixin import names as n
from fioscope_mixin.cause import CAUSES
from fioscope_mixin.columns import IN_FLIGHT_SERIES

from . import humanize
from .prometheus_api import Prometheus, Series, spans
from .prometheus_api import where_device as _key

# the mixin's words, made to follow "slow because of" where they do not already
LABELS = {**dict(CAUSES), "stall": "a stall (requests in flight, almost none completing)",
          "writeback_cliff": "a write-back cliff (the write rate collapsed once a cache filled)"}
ORDER = [c for c, _ in CAUSES]
# the causes whose alerts wait durations.cause before they page (the others' records hold over a window already): an
# episode of one of them shorter than that (one evaluation at the end of a busy stretch) is listed, never the device's cause
HELD = {"noisy_neighbour", "wait_above_disk", "writeback_cliff"}
# evidence a cause needs that a source may lack (an iostat capture has neither): the series, what its absence leaves open
EVIDENCE = [(IN_FLIGHT_SERIES, "the requests in flight (a stall)"),
            ("node_pressure_cpu_waiting_seconds_total", "the CPU pressure (a wait above the disk; CPU steal is read)")]
# report.json's evidence figures of an episode: recorded series, read as recorded (a backfilled series has no staleness
# marker: a range query would repeat its last value for 5 minutes past its end)
RECORDED = {"await_seconds": n.DISK_AWAIT_SECONDS, "normal_await_seconds": n.DISK_AWAIT_BASELINE_SECONDS, "iops": n.DISK_IOPS,
            "fio_clat_p50_seconds": n.FIO_CLAT_P50_SECONDS}
NORMAL_IOPS = f"avg_over_time({n.DISK_NORMAL_IOPS}{{sel}}[{{lookback}}])"  # the rule's reference load, evaluated


@dataclass
class CauseEpisode:
    host: str
    device: str
    start: float
    end: float
    cause: str | None  # the mixin's cause label; None: slow, but no cause named (not decided)
    brief: bool = False  # shorter than its alert waits: not the device's cause
    figures: dict[str, float] = field(default_factory=dict)  # the median over the episode of each RECORDED, and NORMAL_IOPS

    @property
    def label(self) -> str:
        return LABELS[self.cause] if self.cause else "not decided"

    def evidence(self) -> str:
        """'await 9.4 ms, 6.3x its normal of 1.5 ms, at 1,480 IO/s against the 4,000 IO/s it carried at its normal latency'
        (a wait above the disk: "fio's median completion latency 20 ms against the device's await 200 µs, ...")."""
        f = self.figures
        text = f"await {humanize.latency(f.get('await_seconds'))}"
        if self.cause == "wait_above_disk" and (clat := f.get("fio_clat_p50_seconds")):
            # what waited: fio's completions, far above the device's answer
            text = f"fio's median completion latency {humanize.latency(clat)} against the device's {text}"
        if normal := f.get("normal_await_seconds"):
            # two significant digits, as a chart reads ("870x", not "873.5x")
            text += f", {humanize.approx(f.get('await_seconds', 0.0) / normal)}x its normal of {humanize.latency(normal)}"
        if "iops" in f:
            text += f", at {humanize.count(f['iops'], 'IO/s')}"
            if f.get("normal_iops"):
                text += f" against the {humanize.count(f['normal_iops'], 'IO/s')} it carried at its normal latency"
        if self.cause in ("noisy_neighbour", "wait_above_disk"):
            text += "; no ceiling"
        return text

    def json(self) -> dict:
        return {"start": self.start, "end": self.end, "cause": self.cause, "label": self.label, "brief": self.brief, **self.figures}


@dataclass
class CauseFindings:
    """Every episode of the window; ``missing``: the evidence the source lacked (plain words; empty: it had all)."""

    episodes: list[CauseEpisode] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    demand_tolerance: float = 0.1  # thresholds.cause.demand_tolerance: above (1 + it) x the normal load is more load

    def of(self, host: str, device: str) -> list[CauseEpisode]:
        return [e for e in self.episodes if (e.host, e.device) == (host, device)]

    def dominant(self, host: str, device: str) -> dict | None:
        """The cause that held longest over the device's episodes (report.json's ``devices[].cause``); None: none named."""
        named: dict[str, float] = {}
        for e in self.of(host, device):
            if e.cause and not e.brief:
                named[e.cause] = named.get(e.cause, 0.0) + e.end - e.start
        if not named:
            return None
        cause = max(named, key=lambda c: (named[c], -ORDER.index(c)))
        return {"key": cause, "label": LABELS[cause], "seconds": named[cause],
                "episodes": sum(1 for e in self.of(host, device) if e.cause == cause and not e.brief)}

    def verdict(self, host: str, device: str, ceilings: list[tuple[float, float]] | None = None) -> str:
        """The words the device's verdict line gets: '' when no episode, else the worst named one (or the undecided one).
        ``ceilings``: when the throttling check held; an undecided episode in one is slow at that ceiling, never load."""
        mine = self.of(host, device)
        dominant = self.dominant(host, device)
        if dominant:
            worst = max((e for e in mine if e.cause == dominant["key"] and not e.brief), key=lambda e: e.figures.get("await_seconds", 0.0))
            return f"slow because of {worst.label}: {worst.evidence()}"
        if undecided := [e for e in mine if e.cause is None]:
            e = max(undecided, key=lambda e: e.end - e.start)
            if any(a < e.end and e.start < b for a, b in ceilings or []):
                # a load shorter than the cause needs (a capture's 40 s phase): the throttling check named the ceiling
                return f"slow at the ceiling named above ({e.evidence()}); the cause not decided in so short a load"
            if e.figures.get("iops", 0.0) > (1 + self.demand_tolerance) * e.figures.get("normal_iops", math.inf):
                return f"slow under more load than its normal ({e.evidence()}): load, not a fault"
            why = ("; not in the data: " + ", ".join(self.missing)) if self.missing else ""
            return f"slow ({e.evidence()}), cause not decided{why}"
        return ""


def _median_in(series: Series | None, a: float, b: float) -> float | None:
    values = [v for t, v in zip(series.times, series.values) if a <= t <= b] if series else []
    return statistics.median(values) if values else None


def cause_findings(prom: Prometheus, start: float, end: float, step: float, host_m: str = "", device_m: str = "",
                   lookback: str = "1h", hold: float = 60.0, demand_tolerance: float = 0.1) -> CauseFindings:
    """The window's cause episodes per device from the recorded causes, and the slow stretches no cause names.
    ``host_m``, ``device_m``: label matchers with a leading comma (the report's host; and devices); ``lookback``: the
    rules' ``cause.demand_lookback`` (the load the device carried at its normal latency); ``hold``: ``durations.cause``
    in seconds."""
    sel = "{" + device_m.lstrip(",") + "}"
    figures = {k: {_key(s.labels): s for s in prom.samples(series + sel, start, end)} for k, series in RECORDED.items()}
    figures["normal_iops"] = {_key(s.labels): s for s in prom.range(NORMAL_IOPS.format(sel=sel, lookback=lookback), start, end, step)}
    found = CauseFindings(demand_tolerance=demand_tolerance)
    named: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for s in prom.samples(f"{n.DISK_SLOW_CAUSE}{sel}", start, end):
        cause = s.labels.get("cause", "")
        for a, b in spans(s.times, step):
            found.episodes.append(CauseEpisode(*_key(s.labels), a, b, cause if cause in LABELS else None,
                                               brief=cause in HELD and b - a < hold))
            named.setdefault(_key(s.labels), []).append((a, b))
    for s in prom.samples(f"{n.DISK_SLOW_AWAIT_RATIO}{sel}", start, end):
        for a, b in spans(s.times, step):  # a slow stretch that overlaps no named episode: not decided
            if not any(a <= y and x <= b for x, y in named.get(_key(s.labels), [])):
                found.episodes.append(CauseEpisode(*_key(s.labels), a, b, None))
    for e in found.episodes:
        for k, by_key in figures.items():
            value = _median_in(by_key.get((e.host, e.device)), e.start, e.end)
            if value is not None:
                e.figures[k] = value
    found.episodes.sort(key=lambda e: (e.host, e.device, e.start))
    window = f"{int(end - start) + 1}s"
    found.missing = [what for series, what in EVIDENCE
                     if not prom.instant(f"count(last_over_time({series}{{{host_m.lstrip(',')}}}[{window}]))", end)]
    return found
