"""Collector of fio results: fresh metric families from a Store snapshot on every scrape.

Exposition (one job ``etcd-wal`` that wrote and fdatasync'ed)::

    # TYPE fio_iops gauge
    fio_iops{ddir="write",jobname="etcd-wal"} 5490.96
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
"""

from __future__ import annotations

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    SummaryMetricFamily,
)
from prometheus_client.samples import Sample

from ..histogram import BUCKET_BOUNDS
from ..store import Store

_LE = [repr(b) for b in BUCKET_BOUNDS] + ["+Inf"]
_INFO_LABELS = ["jobname", "target", "rw", "bs", "iodepth", "numjobs", "ioengine", "fio_version"]


class FioCollector:
    def __init__(self, store: Store):
        self.store = store

    def collect(self):
        jobs, hists = self.store.snapshot()
        iops = GaugeMetricFamily("fio_iops", "I/O operations per second of the last finished run, or over the last status interval while the job runs.", labels=["jobname", "ddir"])
        bandwidth = GaugeMetricFamily("fio_bandwidth_bytes_per_second", "Bandwidth of the last finished run, or over the last status interval while the job runs.", labels=["jobname", "ddir"])
        io_bytes = GaugeMetricFamily("fio_run_io_bytes", "Bytes transferred by the last (or running) run.", labels=["jobname", "ddir"])
        latency = SummaryMetricFamily("fio_run_latency_seconds", "fio's own latency percentiles of the last (or running) run; _count is fio's N, _sum is mean x N.", labels=["jobname", "ddir", "stage"])
        running = GaugeMetricFamily("fio_run_running", "1 while fio runs this job.", labels=["jobname"])
        start = GaugeMetricFamily("fio_run_start_timestamp_seconds", "Unix time the last (or running) run started.", labels=["jobname"])
        end = GaugeMetricFamily("fio_run_end_timestamp_seconds", "Unix time the last run ended.", labels=["jobname"])
        duration = GaugeMetricFamily("fio_run_duration_seconds", "fio's job_runtime of the last finished run.", labels=["jobname"])
        runs = CounterMetricFamily("fio_runs", "Finished runs (successful or not) since the results were first published.", labels=["jobname"])
        failures = CounterMetricFamily("fio_run_failures", "Runs in which fio failed (error exit, job error, no report).", labels=["jobname"])
        info = GaugeMetricFamily("fio_run_info", "Parameters of the last finished run.", labels=_INFO_LABELS)
        promised = GaugeMetricFamily("fio_promised_iops", "IOPS the target's declared limits promise for this job's block size and read/write mix.", labels=["jobname"])
        sla = GaugeMetricFamily("fio_sla_latency_seconds", "Latency SLA declared for the job's target.", labels=["jobname"])

        for name, state in sorted(jobs.items()):
            running.add_metric([name], 1.0 if state.running else 0.0)
            runs.add_metric([name], state.runs)
            failures.add_metric([name], state.failures)
            if state.start_timestamp:
                start.add_metric([name], state.start_timestamp)
            if state.end_timestamp:
                end.add_metric([name], state.end_timestamp)
            last = state.last
            job = state.live or (last.job if last else None)
            if job is not None:
                for ddir, direction in sorted(job.directions.items()):
                    if ddir != "sync":
                        iops.add_metric([name, ddir], direction.iops)
                        bandwidth.add_metric([name, ddir], direction.bandwidth_bytes)
                        io_bytes.add_metric([name, ddir], direction.io_bytes)
                    for stage, lat in sorted(direction.latencies.items()):
                        quantiles = sorted(lat.percentiles.items(), key=lambda kv: float(kv[0]))
                        _add_summary(latency, [name, ddir, stage], lat.count, lat.sum_seconds, quantiles)
            if last is None:
                continue
            opts = last.job.options
            duration.add_metric([name], last.job.runtime_seconds)
            info.add_metric([name, last.target, opts.get("rw", opts.get("readwrite", "read")), opts.get("bs", "4k"),
                             opts.get("iodepth", "1"), opts.get("numjobs", "1"), opts.get("ioengine", "psync"), last.fio_version], 1.0)
            if last.promised_iops:
                promised.add_metric([name], last.promised_iops)
            if last.sla_latency_seconds:
                sla.add_metric([name], last.sla_latency_seconds)

        histogram = HistogramMetricFamily("fio_latency_seconds", "Latency of every I/O of every run since the results were first published (from fio json+ bins).", labels=["jobname", "ddir", "stage"])
        for (name, ddir, stage), hist in sorted(hists.items()):
            cumulative, buckets = 0, []
            for le, n in zip(_LE, hist.buckets):
                cumulative += n
                buckets.append((le, cumulative))
            histogram.add_metric([name, ddir, stage], buckets, hist.sum_seconds)

        yield from (iops, bandwidth, io_bytes, latency, histogram, running, start, end, duration, runs, failures, info, promised, sla)


def _add_summary(family: SummaryMetricFamily, labels: list[str], count: int, total: float, quantiles) -> None:
    """SummaryMetricFamily.add_metric cannot take quantiles; append the samples ourselves."""
    family.add_metric(labels, count, total)
    keys = family._labelnames
    for q, value in quantiles:
        family.samples.append(Sample(family.name, dict(zip(keys, labels), quantile=q), value, None, None))
