"""Recording rules: iostat -x equivalents per instance and device, and the helpers the
throttling alerts build on."""

from __future__ import annotations

from mixin import Record, params


def _rate(metric: str) -> str:
    return "rate(%s{%%(diskSelector)s}[%%(rateWindow)s])" % metric


def _per_request(numerator: str, count: str) -> str:
    # iostat prints 0.00 when there was no request: clamp the divisor instead of dividing by 0
    return f"{numerator} / clamp_min({count}, 1e-9)"


R, W, D, F = (_rate(f"node_disk_{m}") for m in ("reads_completed_total", "writes_completed_total",
                                                 "discards_completed_total", "flush_requests_total"))
RRQM, WRQM = _rate("node_disk_reads_merged_total"), _rate("node_disk_writes_merged_total")
RB, WB = _rate("node_disk_read_bytes_total"), _rate("node_disk_written_bytes_total")

DISK = [
    Record("fioscope:disk_read_iops", R, "r/s"),
    Record("fioscope:disk_write_iops", W, "w/s"),
    Record("fioscope:disk_discard_iops", D, "d/s"),
    Record("fioscope:disk_flush_iops", F, "f/s"),
    Record("fioscope:disk_read_bytes_per_second", RB, "rkB/s x 1024"),
    Record("fioscope:disk_write_bytes_per_second", WB, "wkB/s x 1024"),
    Record("fioscope:disk_discard_bytes_per_second", _rate("node_disk_discarded_sectors_total") + " * 512", "dkB/s x 1024"),
    Record("fioscope:disk_read_merges_per_second", RRQM, "rrqm/s"),
    Record("fioscope:disk_write_merges_per_second", WRQM, "wrqm/s"),
    Record("fioscope:disk_read_merges_ratio", _per_request(RRQM, f"({RRQM} + {R})"), "%rrqm / 100"),
    Record("fioscope:disk_write_merges_ratio", _per_request(WRQM, f"({WRQM} + {W})"), "%wrqm / 100"),
    Record("fioscope:disk_read_await_seconds", _per_request(_rate("node_disk_read_time_seconds_total"), R), "r_await / 1000"),
    Record("fioscope:disk_write_await_seconds", _per_request(_rate("node_disk_write_time_seconds_total"), W), "w_await / 1000"),
    Record("fioscope:disk_discard_await_seconds", _per_request(_rate("node_disk_discard_time_seconds_total"), D), "d_await / 1000"),
    Record("fioscope:disk_flush_await_seconds", _per_request(_rate("node_disk_flush_requests_time_seconds_total"), F), "f_await / 1000"),
    Record("fioscope:disk_queue_size", _rate("node_disk_io_time_weighted_seconds_total"), "aqu-sz"),
    Record("fioscope:disk_read_request_size_bytes", _per_request(RB, R), "rareq-sz x 1024"),
    Record("fioscope:disk_write_request_size_bytes", _per_request(WB, W), "wareq-sz x 1024"),
    Record("fioscope:disk_util_ratio", _rate("node_disk_io_time_seconds_total"), "%util / 100"),
]

_CPU_TOTAL = "sum by (instance, job) (rate(node_cpu_seconds_total{%(nodeSelector)s}[%(rateWindow)s]))"
CPU = [
    Record(f"fioscope:cpu_{name}_ratio",
           "sum by (instance, job) (rate(node_cpu_seconds_total{%%(nodeSelector)s,%s}[%%(rateWindow)s])) / %s" % (mode, _CPU_TOTAL),
           f"%{name} / 100")
    for name, mode in [("user", 'mode="user"'), ("nice", 'mode="nice"'),
                       # iostat's %system counts hard and soft interrupts too
                       ("system", 'mode=~"system|irq|softirq"'), ("iowait", 'mode="iowait"'),
                       ("steal", 'mode="steal"'), ("idle", 'mode="idle"')]
]


def _irate(metric: str) -> str:
    return "irate(%s{%%(diskSelector)s}[%%(rateWindow)s])" % metric


HELPERS = [
    Record("fioscope:disk_iops", "fioscope:disk_read_iops + fioscope:disk_write_iops + fioscope:disk_discard_iops", "r/s + w/s + d/s"),
    # per-scrape IOPS: the flatness test needs the raw steps, not a 1m average
    Record("fioscope:disk_iops:irate", " + ".join(_irate(f"node_disk_{m}") for m in
                                                  ("reads_completed_total", "writes_completed_total", "discards_completed_total"))),
    # mean time per request over all directions; absent while the device is idle
    Record("fioscope:disk_await_seconds",
           "(" + " + ".join(_rate(f"node_disk_{m}_time_seconds_total") for m in ("read", "write", "discard"))
           + ") / (fioscope:disk_iops > 0)", "await / 1000"),
    # per-scrape util: the rate-window util lags a load's start and end
    Record("fioscope:disk_util_ratio:irate", _irate("node_disk_io_time_seconds_total")),
    # the device's own normal: await over windows in which it was never near saturation
    Record("fioscope:disk_await_unsaturated_seconds",
           "fioscope:disk_await_seconds and on (instance, job, device) "
           "max_over_time(fioscope:disk_util_ratio:irate[%(rateWindow)s]) < %(unsaturatedUtil)s"),
    Record("fioscope:disk_await_baseline_seconds",
           "quantile_over_time(0.5, fioscope:disk_await_unsaturated_seconds[%(baselineWindow)s])"),
]

GROUPS = [("fioscope-iostat", DISK + CPU), ("fioscope-disk-helpers", HELPERS)]


def recording_rules(s: dict) -> dict:
    p = params(s)
    return {"groups": [{"name": name, "rules": [r.render(p) for r in records]} for name, records in GROUPS]}
