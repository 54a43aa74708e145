"""Collector of fio results: fresh metric families from a Store snapshot on every scrape.

Exposition (one job ``etcd-wal`` that wrote and fdatasync'ed)::

    # TYPE fio_iops gauge
    fio_iops{ddir="write",device="vda",hostname="",jobname="etcd-wal",target="etcd"} 5490.96
    (every per-job series carries target, device, hostname and jobname; below only jobname is shown)
    # TYPE fio_bandwidth_bytes_per_second gauge
    fio_bandwidth_bytes_per_second{ddir="write",jobname="etcd-wal"} 1.2629216e+07
    # TYPE fio_run_io_bytes gauge
    fio_run_io_bytes{ddir="write",jobname="etcd-wal"} 4.1929e+06
    # TYPE fio_run_latency_seconds summary
    fio_run_latency_seconds{ddir="sync",jobname="etcd-wal",quantile="0.99",stage="lat"} 0.000252928
    fio_run_latency_seconds_sum{ddir="sync",jobname="etcd-wal",stage="lat"} 0.2495
    fio_run_latency_seconds_count{ddir="sync",jobname="etcd-wal",stage="lat"} 1823
    # TYPE fio_latency_seconds histogram
    fio_latency_seconds_bucket{ddir="sync",jobname="etcd-wal",le="0.0005",stage="lat"} 1823
    fio_latency_seconds_sum{...} / fio_latency_seconds_count{...}
    # TYPE fio_run_running gauge
    fio_run_running{jobname="etcd-wal"} 0
    fio_run_start_timestamp_seconds{jobname="etcd-wal"} / fio_run_end_timestamp_seconds{...}
    fio_run_duration_seconds{jobname="etcd-wal"} 0.332
    fio_runs_total{jobname="etcd-wal"} 1
    fio_run_failures_total{jobname="etcd-wal"} 0
    fio_run_info{bs="2300",fio_version="fio-3.33",iodepth="1",ioengine="sync",jobname="etcd-wal",numjobs="1",rw="write",target="/srv/t"} 1
    fio_promised_iops{jobname="cloud-sla"} 1000          (only where the target declares limits)
    fio_sla_latency_seconds{jobname="cloud-sla"} 0.03    (only where the target declares an SLA)

Rendering: ``collect()`` builds fresh families for every job, as any client_python
collector. ``/metrics`` uses ``render()``, which builds fresh families only for jobs
that changed since the previous scrape and reuses the text of the others: 100 jobs
with histograms are ~25k samples, which client_python's encoder needs ~0.5 s for.
"""

from __future__ import annotations

import functools
import logging
import threading
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from ..state import HistKey, HistogramState, JobKey, JobState
from ..store import Store
from .exposition import RenderCache, ZeroOnce

log = logging.getLogger("fioscope.collector")


@functools.cache
def _le(bounds: tuple[float, ...]) -> tuple[list[str], list[str]]:
    """The le values of ``bounds`` as the exposition writes them, and as label text (made once per set of bounds)."""
    values = [repr(b) for b in bounds] + ["+Inf"]
    return values, [f'le="{le}"' for le in values]


# where the series was measured (docs/contracts.md section 1): on every per-job series
_ID = ["target", "device", "hostname", "jobname"]
_INFO_LABELS = [*_ID, "rw", "bs", "iodepth", "numjobs", "ioengine", "fio_version"]

# (name, type, help, labels): the order of families in the exposition
FAMILIES = [
    ("fio_iops", "gauge",
     "I/O operations per second of the last finished run, or over the last status interval while the job runs.", [*_ID, "ddir"]),
    ("fio_bandwidth_bytes_per_second", "gauge",
     "Bandwidth of the last finished run, or over the last status interval while the job runs.", [*_ID, "ddir"]),
    ("fio_run_io_bytes", "gauge", "Bytes transferred by the last (or running) run.", [*_ID, "ddir"]),
    ("fio_run_latency_seconds", "summary",
     "fio's own latency percentiles of the last (or running) run; _count is fio's N, _sum is mean x N.", [*_ID, "ddir", "stage"]),
    ("fio_latency_seconds", "histogram",
     "Latency of every I/O of every run since the results were first published (from fio json+ bins).", [*_ID, "ddir", "stage"]),
    ("fio_run_running", "gauge", "1 while fio runs this job.", _ID),
    ("fio_run_start_timestamp_seconds", "gauge", "Unix time the last (or running) run started.", _ID),
    ("fio_run_end_timestamp_seconds", "gauge", "Unix time the last run ended.", _ID),
    ("fio_run_duration_seconds", "gauge", "fio's job_runtime of the last finished run.", _ID),
    ("fio_runs", "counter", "Finished runs (successful or not) since the results were first published.", _ID),
    ("fio_run_failures", "counter", "Runs in which fio failed (error exit, job error, no report, interrupted).", _ID),
    ("fio_run_info", "gauge", "Parameters of the last finished run.", _INFO_LABELS),
    ("fio_promised_iops", "gauge", "IOPS the target's declared limits promise for this job's block size and read/write mix.", _ID),
    ("fio_sla_latency_seconds", "gauge", "Latency SLA declared for the job's target.", _ID),
]
_CLASSES = {"gauge": GaugeMetricFamily, "counter": CounterMetricFamily, "summary": SummaryMetricFamily, "histogram": HistogramMetricFamily}


def _families() -> dict[str, Any]:  # the concrete *MetricFamily classes, each with its own add_metric
    return {name: _CLASSES[kind](name, help_text, labels=labels) for name, kind, help_text, labels in FAMILIES}


def job_families(key: JobKey, state: JobState, hists: dict[HistKey, HistogramState]) -> dict[str, Any]:
    """Fresh families holding one job's samples; ``hists`` are this job's histograms only."""
    target, jobname, hostname = key
    ident = [target, state.device, hostname, jobname]
    f = _families()
    f["fio_run_running"].add_metric(ident, 1.0 if state.running else 0.0)
    f["fio_runs"].add_metric(ident, state.runs)
    f["fio_run_failures"].add_metric(ident, state.failures)
    if state.start_timestamp:
        f["fio_run_start_timestamp_seconds"].add_metric(ident, state.start_timestamp)
    if state.end_timestamp:
        f["fio_run_end_timestamp_seconds"].add_metric(ident, state.end_timestamp)
    last = state.last
    job = state.live or (last.job if last else None)
    if job is not None:
        for ddir, direction in sorted(job.directions.items()):
            if ddir != "sync":
                f["fio_iops"].add_metric([*ident, ddir], direction.iops)
                f["fio_bandwidth_bytes_per_second"].add_metric([*ident, ddir], direction.bandwidth_bytes)
                f["fio_run_io_bytes"].add_metric([*ident, ddir], direction.io_bytes)
            for stage, lat in sorted(direction.latencies.items()):
                quantiles = sorted(lat.percentiles.items(), key=lambda kv: float(kv[0]))
                _add_summary(f["fio_run_latency_seconds"], [*ident, ddir, stage], lat.count, lat.sum_seconds, quantiles)
    if last is not None:
        opts = last.job.options
        f["fio_run_duration_seconds"].add_metric(ident, last.job.runtime_seconds)
        f["fio_run_info"].add_metric([*ident, opts.get("rw", opts.get("readwrite", "read")), opts.get("bs", "4k"),
                                      opts.get("iodepth", "1"), opts.get("numjobs", "1"), opts.get("ioengine", "psync"),
                                      last.fio_version], 1.0)
        if last.promised_iops:
            f["fio_promised_iops"].add_metric(ident, last.promised_iops)
        if last.sla_latency_seconds:
            f["fio_sla_latency_seconds"].add_metric(ident, last.sla_latency_seconds)
    for (ddir, stage), hist in sorted(hists.items()):
        cumulative, buckets = 0, []
        for le, n in zip(_le(hist.bounds)[0], hist.buckets):
            cumulative += n
            buckets.append((le, cumulative))
        f["fio_latency_seconds"].add_metric([*ident, ddir, stage], buckets, hist.sum_seconds)
    return f


def _add_summary(family: SummaryMetricFamily, labels: list[str], count: int, total: float, quantiles) -> None:
    """SummaryMetricFamily.add_metric cannot take quantiles; append the samples ourselves."""
    family.add_metric(labels, count, total)
    keys = family._labelnames
    for q, value in quantiles:
        family.samples.append(Sample(family.name, dict(zip(keys, labels), quantile=q), value, None, None))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def sample_lines(family: Metric) -> str:
    """Text-format lines of a family's samples (the 0.0.4 format, as generate_latest writes it)."""
    out = []
    for s in family.samples:
        labels = ",".join(f'{k}="{_escape(str(v))}"' for k, v in sorted(s.labels.items()))
        out.append(f"{s.name}{{{labels}}} {floatToGoString(s.value)}\n" if labels else f"{s.name} {floatToGoString(s.value)}\n")
    return "".join(out)


def histogram_lines(key: JobKey, device: str, hists: dict[HistKey, HistogramState]) -> str:
    """The text of one job's ``fio_latency_seconds``, exactly as sample_lines writes it, without Sample objects.

    Histograms are most of /metrics (155 lines each): one label prefix per histogram and
    precomputed ``le`` strings keep the first render after startup at ~1 us per line.
    """
    target, jobname, hostname = key
    ident = f'device="{_escape(device)}",hostname="{_escape(hostname)}",jobname="{_escape(jobname)}"'
    out = []
    for (ddir, stage), hist in sorted(hists.items()):
        head = f'{{ddir="{_escape(ddir)}",{ident},'
        tail = f',stage="{_escape(stage)}",target="{_escape(target)}"}} '
        cumulative = 0
        for le, n in zip(_le(hist.bounds)[1], hist.buckets):
            cumulative += n
            out.append(f"fio_latency_seconds_bucket{head}{le}{tail}{floatToGoString(cumulative)}\n")
        out.append(f"fio_latency_seconds_count{head[:-1]}{tail}{floatToGoString(cumulative)}\n")
        out.append(f"fio_latency_seconds_sum{head[:-1]}{tail}{floatToGoString(hist.sum_seconds)}\n")
    return "".join(out)


def job_texts(key: JobKey, state: JobState, hists: dict[HistKey, HistogramState]) -> dict[str, str]:
    """One job's exposition text per family (what the render cache keeps)."""
    text = {fname: sample_lines(f) for fname, f in job_families(key, state, {}).items()}
    text["fio_latency_seconds"] = histogram_lines(key, state.device, hists)
    return text


class FioCollector:
    def __init__(self, store: Store):
        self.store = store
        self.zero_once = ZeroOnce()  # one for collect() and render(): a series is shown at zero once, whichever asks
        self._cache = RenderCache(job_texts)
        self._lock = threading.Lock()
        # the series bound of /metrics (config max_series): jobs published, in the order they were
        # first published, with their series counts; a job new to it that does not fit is left out
        self._admitted: dict[JobKey, int] = {}
        self._refused: set[JobKey] = set()  # logged and counted once each
        self.refused_jobs_total = 0

    def collect(self):
        jobs, hists = self.store.snapshot()
        merged = _families()
        for key, state in sorted(jobs.items()):
            shown, shown_hists, _ = self.zero_once.view(key, state, hists.get(key, {}))
            for fname, family in job_families(key, shown, shown_hists or {}).items():
                merged[fname].samples.extend(family.samples)
        yield from merged.values()

    @property
    def showed_zero(self) -> bool:
        """The last render showed a series at zero once (its next render differs though the store did not change)."""
        return self._cache.shows_zero

    def render(self) -> str:
        with self._lock:  # concurrent scrapes share one cache
            jobs, hists = self.store.snapshot(unchanged=self._cache.reusable())
            texts = self._cache.texts(jobs, hists, self.zero_once)
            order = self._within_series_limit(jobs)
            parts = []
            for fname, kind, help_text, _ in FAMILIES:
                exposed = fname + "_total" if kind == "counter" else fname  # as generate_latest names counters
                parts.append(f"# HELP {exposed} {help_text}\n# TYPE {exposed} {kind}\n")
                parts.extend(texts[key][fname] for key in order)
            return "".join(parts)

    def _within_series_limit(self, jobs: dict[JobKey, JobState]) -> list[JobKey]:
        """The jobs to publish, sorted: those published before, then new ones while the total stays within max_series.

        A published job keeps its place even if it grows (a new direction or stage: a few series).
        """
        limit = self.store.config.max_series
        for key in [k for k in self._admitted if k not in jobs]:
            del self._admitted[key]
        total = 0
        for key in self._admitted:
            self._admitted[key] = self._cache.series[key]
            total += self._admitted[key]
        refused: list[tuple[JobKey, int]] = []
        for key in sorted(k for k in jobs if k not in self._admitted):
            size = self._cache.series[key]
            if total + size <= limit:
                self._admitted[key] = size
                total += size
                self._refused.discard(key)
            elif key not in self._refused:
                self._refused.add(key)
                refused.append((key, size))
        if refused:  # one line per scrape that refuses, however many jobs (a hostile file may bring thousands)
            self.refused_jobs_total += len(refused)
            (target, jobname, hostname), size = refused[0]
            log.error("%d job(s) not published: /metrics is at %d series of max_series %d (first: job %s, target %s%s, %d series); "
                      "raise max_series in the config or remove result files", len(refused), total, limit, ascii(jobname), ascii(target),
                      f", host {ascii(hostname)}" if hostname else "", size)
        return sorted(self._admitted)
