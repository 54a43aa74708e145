"""Recording rules: iostat -x equivalents per instance and device, and the helpers the
throttling alerts build on."""

from __future__ import annotations

from fioscope_mixin import names as n
from fioscope_mixin.rule import ON, Record, params


def _rate(metric: str) -> str:
    return "rate(%s{%%(diskSelector)s}[%%(rateWindow)s])" % metric


def _per_request(numerator: str, count: str) -> str:
    # iostat prints 0.00 when there was no request: clamp the divisor instead of dividing by 0
    return f"{numerator} / clamp_min({count}, 1e-9)"


# One rule per counter, recorded first; every column, helper and ceiling below derives from these
# recorded series (a group runs its rules in order, so they are this cycle's values): each counter's
# rate is computed once per cycle, not once per column that uses it (the cost of a fleet).
R, W, D, F = n.DISK_READ_IOPS, n.DISK_WRITE_IOPS, n.DISK_DISCARD_IOPS, n.DISK_FLUSH_IOPS
RB, WB = n.DISK_READ_BYTES_PER_SECOND, n.DISK_WRITE_BYTES_PER_SECOND
RRQM, WRQM = n.DISK_READ_MERGES_PER_SECOND, n.DISK_WRITE_MERGES_PER_SECOND
R_TIME, W_TIME, D_TIME = n.DISK_READ_TIME_SECONDS_RATE, n.DISK_WRITE_TIME_SECONDS_RATE, n.DISK_DISCARD_TIME_SECONDS_RATE

COUNTER_RATES = [
    Record(R, _rate("node_disk_reads_completed_total"), "r/s"),
    Record(W, _rate("node_disk_writes_completed_total"), "w/s"),
    Record(D, _rate("node_disk_discards_completed_total"), "d/s"),
    Record(F, _rate("node_disk_flush_requests_total"), "f/s"),
    Record(RB, _rate("node_disk_read_bytes_total"), "rkB/s x 1024"),
    Record(WB, _rate("node_disk_written_bytes_total"), "wkB/s x 1024"),
    Record(RRQM, _rate("node_disk_reads_merged_total"), "rrqm/s"),
    Record(WRQM, _rate("node_disk_writes_merged_total"), "wrqm/s"),
    # time spent on requests per second: the await columns and fioscope:disk_await_seconds divide these
    Record(R_TIME, _rate("node_disk_read_time_seconds_total")),
    Record(W_TIME, _rate("node_disk_write_time_seconds_total")),
    Record(D_TIME, _rate("node_disk_discard_time_seconds_total")),
]

DISK = COUNTER_RATES + [
    Record(n.DISK_READ_AWAIT_SECONDS, _per_request(R_TIME, R), "r_await / 1000"),
    Record(n.DISK_WRITE_AWAIT_SECONDS, _per_request(W_TIME, W), "w_await / 1000"),
    Record(n.DISK_QUEUE_SIZE, _rate("node_disk_io_time_weighted_seconds_total"), "aqu-sz"),
    Record(n.DISK_UTIL_RATIO, _rate("node_disk_io_time_seconds_total"), "%util / 100"),
]
# iostat columns only the dashboards show: their own group, from the counter rates above (no alert waits on them)
COLUMNS = [
    Record(n.DISK_DISCARD_BYTES_PER_SECOND, _rate("node_disk_discarded_sectors_total") + " * 512", "dkB/s x 1024"),
    Record(n.DISK_READ_MERGES_RATIO, _per_request(RRQM, f"({RRQM} + {R})"), "%rrqm / 100"),
    Record(n.DISK_WRITE_MERGES_RATIO, _per_request(WRQM, f"({WRQM} + {W})"), "%wrqm / 100"),
    Record(n.DISK_DISCARD_AWAIT_SECONDS, _per_request(D_TIME, D), "d_await / 1000"),
    Record(n.DISK_FLUSH_AWAIT_SECONDS, _per_request(_rate("node_disk_flush_requests_time_seconds_total"), F), "f_await / 1000"),
    Record(n.DISK_READ_REQUEST_SIZE_BYTES, _per_request(RB, R), "rareq-sz x 1024"),
    Record(n.DISK_WRITE_REQUEST_SIZE_BYTES, _per_request(WB, W), "wareq-sz x 1024"),
]

# CPU time per mode, summed over the CPUs once; the avg-cpu ratios divide it (rather than each recomputing the total)
CPU_MODES = n.CPU_MODE_SECONDS_RATE
_CPU_TOTAL = f"sum by (%(clusterLabels)shost, instance, job) ({CPU_MODES})"
CPU = [Record(CPU_MODES, "sum by (%(clusterLabels)shost, instance, job, mode) (rate(node_cpu_seconds_total{%(nodeSelector)s}[%(rateWindow)s]))")] + [
    Record(record, f"sum by (%(clusterLabels)shost, instance, job) ({CPU_MODES}{{{mode}}}) / {_CPU_TOTAL}", f"%{name} / 100")
    for name, record, mode in [("user", n.CPU_USER_RATIO, 'mode="user"'), ("nice", n.CPU_NICE_RATIO, 'mode="nice"'),
                               # iostat's %system counts hard and soft interrupts too
                               ("system", n.CPU_SYSTEM_RATIO, 'mode=~"system|irq|softirq"'), ("iowait", n.CPU_IOWAIT_RATIO, 'mode="iowait"'),
                               ("steal", n.CPU_STEAL_RATIO, 'mode="steal"'), ("idle", n.CPU_IDLE_RATIO, 'mode="idle"')]
]


def _irate(metric: str) -> str:
    return "irate(%s{%%(diskSelector)s}[%%(rateWindow)s])" % metric


def _or_zero(series: str, like: str) -> str:
    """``series``, or 0 where the kernel does not export it (discards: 4.18+, flushes: 5.5+)."""
    return f"({series} or {like} * 0)"


# the tree below: a device whose slaves (fioscope_disk_parent_info) show a ceiling is not the layer that pages
LAYER_BELOW = ("max by (%%(clusterLabels)shost, device) (\n  fioscope_disk_parent_info{%%(fioSelector)s}\n"
               "  * on (%%(clusterLabels)shost, parent) group_left ()\n"
               "  label_replace(max by (%%(clusterLabels)shost, device) (fioscope:disk_ceiling{window=\"%s\"}), \"parent\", \"$1\", \"device\", \"(.+)\")\n)")

HELPERS = [
    Record(n.DISK_IOPS, f"{R} + {W} + {_or_zero(D, R)}", "r/s + w/s + d/s"),
    Record(n.DISK_BYTES_PER_SECOND, f"{RB} + {WB}", "rkB/s + wkB/s x 1024"),
    # per-scrape rates: the flatness tests need the raw steps, not a 1m average
    Record(n.DISK_READ_IOPS_IRATE, _irate("node_disk_reads_completed_total")),
    Record(n.DISK_WRITE_IOPS_IRATE, _irate("node_disk_writes_completed_total")),
    Record(n.DISK_IOPS_IRATE, "fioscope:disk_read_iops:irate + fioscope:disk_write_iops:irate + "
           + _or_zero(_irate("node_disk_discards_completed_total"), "fioscope:disk_read_iops:irate")),
    Record(n.DISK_READ_BYTES_PER_SECOND_IRATE, _irate("node_disk_read_bytes_total")),
    Record(n.DISK_WRITE_BYTES_PER_SECOND_IRATE, _irate("node_disk_written_bytes_total")),
    Record(n.DISK_BYTES_PER_SECOND_IRATE,
           "fioscope:disk_read_bytes_per_second:irate + fioscope:disk_write_bytes_per_second:irate"),
    # mean time per request over all directions; absent while the device is idle
    Record(n.DISK_AWAIT_SECONDS, f"({R_TIME} + {W_TIME} + {_or_zero(D_TIME, R_TIME)}) / (fioscope:disk_iops > 0)",
           "await / 1000"),
    # per-scrape util: the rate-window util lags a load's start and end
    Record(n.DISK_UTIL_RATIO_IRATE, _irate("node_disk_io_time_seconds_total")),
]

# the device's own normal, from 1m averages recorded once a minute (a 6h quantile over every
# 15 s sample of every device would dominate the rule cost of a fleet). Unsaturated means every scrape the
# average draws on: the await is a rate-window average, so right after a deep-queue load it still holds that
# load's await while util has already dropped (a baseline taken then hides the next throttling).
BASELINE = [
    Record(n.DISK_AWAIT_UNSATURATED_SECONDS,
           "avg_over_time(fioscope:disk_await_seconds[%(baselineInterval)s])\n"
           "and " + ON + " max_over_time(fioscope:disk_util_ratio:irate[%(baselineUtilLookback)s]) < %(unsaturatedUtil)s"),
    Record(n.DISK_AWAIT_BASELINE_SECONDS,
           "quantile_over_time(0.5, fioscope:disk_await_unsaturated_seconds[%(baselineWindow)s])"),
]


# p99 of fio's fdatasync histogram per result over fsync_histogram_window: a rate over an hour of buckets is
# costly at fleet scale and moves slowly, so it is recorded in its own, slower group (one series per result,
# not one per bucket); the alert reads it
FSYNC_P99 = n.FIO_FSYNC_LATENCY_SECONDS_P99
FIO_HISTOGRAM = [Record(FSYNC_P99, "histogram_quantile(0.99, sum by (%(fioResult)s, le) "
                        '(rate(fio_latency_seconds_bucket{%(fioSelector)s,ddir="sync",stage="lat"}[%(fsyncHistogramWindow)s])))')]


def slow(await_series: str) -> str:
    """Await at least the floor and far above the device's normal (any await while no normal is known yet)."""
    return (f"({await_series} >= %(throttle_await_min_seconds)s)\n"
            f"and {ON} (\n"
            f"  {await_series} >= {ON} %(throttle_await_baseline_factor)s * fioscope:disk_await_baseline_seconds\n"
            f"  or ({await_series} unless {ON} fioscope:disk_await_baseline_seconds)\n"
            ")")


def flat(rate: str, window: str, floor: str) -> str:
    """Per-scrape rate over ``window``: busy and flat (stddev/mean small): pinned at a ceiling."""
    avg = f"avg_over_time({rate}[{window}])"
    return f"{avg} >= {floor}\nand {ON} stddev_over_time({rate}[{window}]) / {avg} <= %(throttle_flatness_max_cv)s"


# The awaits the ceilings test, recorded once each (six dimensions in two windows share three of them)
SLOW_SATURATED = n.DISK_SLOW_SATURATED_AWAIT_SECONDS
AWAITS = [("read", "fioscope:disk_read_await_seconds"), ("write", "fioscope:disk_write_await_seconds"), ("all", "fioscope:disk_await_seconds")]
SLOW_AWAITS = [
    Record(SLOW_SATURATED, f"{slow(series)}\nand {ON} fioscope:disk_util_ratio >= %(throttle_util_min_ratio)s\n"
                           f"and {ON} fioscope:disk_queue_size >= %(throttle_queue_min)s", labels=(("ddir", ddir),))
    for ddir, series in AWAITS
]
# (dimension, unit, per-scrape rate, ddir of its await, floor, dimensions that explain it better)
DIMENSIONS = [
    ("reads", "/s", n.DISK_READ_IOPS_IRATE, "read", "%(throttle_min_iops)s", ()),
    ("writes", "/s", n.DISK_WRITE_IOPS_IRATE, "write", "%(throttle_min_iops)s", ()),
    ("read throughput", "B/s", n.DISK_READ_BYTES_PER_SECOND_IRATE, "read", "%(throttle_min_bytes_per_second)s", ("reads",)),
    ("write throughput", "B/s", n.DISK_WRITE_BYTES_PER_SECOND_IRATE, "write", "%(throttle_min_bytes_per_second)s", ("writes",)),
    ("IOPS", "/s", n.DISK_IOPS_IRATE, "all", "%(throttle_min_iops)s", ("reads", "writes", "read throughput", "write throughput")),
    ("throughput", "B/s", n.DISK_BYTES_PER_SECOND_IRATE, "all", "%(throttle_min_bytes_per_second)s",
     ("reads", "writes", "read throughput", "write throughput", "IOPS")),
]
# short: the window while fio loads the device (and for the step-down); long: any workload
WINDOWS = [("short", "%(fioWindow)s"), ("long", "%(window)s")]


def ceiling(window_name: str, window: str, dimension: str, unit: str, rate: str, ddir: str, floor: str,
            better: tuple[str, ...]) -> Record:
    """The inferred ceiling: the mean rate of a dimension that sits flat while the device is saturated and slow."""
    expr = f'{flat(rate, window, floor)}\nand {ON} {SLOW_SATURATED}{{ddir="{ddir}"}}'
    if better:
        expr += f'\nunless {ON} fioscope:disk_ceiling{{window="{window_name}",dimension=~"{"|".join(better)}"}}'
    return Record(n.DISK_CEILING, expr, labels=(("window", window_name), ("dimension", dimension), ("unit", unit)))


def _to_lower_layers(loaded: str) -> str:
    """The devices right below those in ``loaded`` (their /sys/block/*/slaves, from fioscope_disk_parent_info)."""
    return ('max by (%%(clusterLabels)shost, device) (label_replace(\n'
            '  max by (%%(clusterLabels)shost, parent) (fioscope_disk_parent_info{%%(fioSelector)s} * on (%%(clusterLabels)shost, device) group_left () %s),\n'
            '  "device", "$1", "parent", "(.+)"))' % loaded)


_FIO_ON_DEVICE = "max by (%(clusterLabels)shost, device) (fio_run_running{%(fioSelector)s} > 0)"
# fio loads the device its target is on and every layer below it (LVM on md on disks: up to 3 layers down)
FIO_LOAD = Record(n.DISK_FIO_LOAD, "\nor ".join(
    [_FIO_ON_DEVICE, _to_lower_layers(_FIO_ON_DEVICE), _to_lower_layers(_to_lower_layers(_FIO_ON_DEVICE)),
     _to_lower_layers(_to_lower_layers(_to_lower_layers(_FIO_ON_DEVICE)))]))

CEILINGS = [FIO_LOAD] + SLOW_AWAITS + [ceiling(name, window, *dim) for name, window in WINDOWS for dim in DIMENSIONS] + [
    # rate now against its peak in the lookback: burst credits spent, a lower ceiling reached
    Record(n.DISK_STEP_DOWN_RATIO,
           "max_over_time(fioscope:disk_iops[%(stepDownLookback)s]) / clamp_min(fioscope:disk_iops, 1e-9) >= %(throttle_step_down_ratio)s\n"
           "or max_over_time(fioscope:disk_bytes_per_second[%(stepDownLookback)s]) / clamp_min(fioscope:disk_bytes_per_second, 1e-9)"
           " >= %(throttle_step_down_ratio)s"),
] + [Record(n.DISK_CEILING_BELOW, LAYER_BELOW % name, labels=(("window", name),)) for name, _ in WINDOWS]

LIMIT_KEYS = [  # disk_limits key: (series, how the declared limit reads)
    ("iops", n.DISK_IOPS, "{:g} IOPS"),
    ("read_iops", n.DISK_READ_IOPS, "{:g} reads/s"),
    ("write_iops", n.DISK_WRITE_IOPS, "{:g} writes/s"),
    ("bandwidth_bytes", n.DISK_BYTES_PER_SECOND, "{:g} MiB/s"),
    ("read_bandwidth_bytes", n.DISK_READ_BYTES_PER_SECOND, "{:g} MiB/s reads"),
    ("write_bandwidth_bytes", n.DISK_WRITE_BYTES_PER_SECOND, "{:g} MiB/s writes"),
]


def declared_limits(s: dict) -> list[Record]:
    """Where the load sits against each limit declared in thresholds.disk_limits (ratio, 1 = at the limit)."""
    records = []
    for device, limits in sorted((s["thresholds"]["disk_limits"] or {}).items()):
        for key, series, text in LIMIT_KEYS:
            value = (limits or {}).get(key)
            if value:
                shown = value / 1048576 if "bandwidth" in key else value
                records.append(Record(n.DISK_DECLARED_LIMIT_RATIO, f'{series}{{device="{device}"}} / {value:g}',
                                      labels=(("limit", text.format(shown)),)))
    return records


def recording_rules(s: dict) -> dict:
    p = params(s)
    # a group runs its rules in order, so rules that build on each other share one; groups run in parallel and
    # read each other's latest values (at most an interval old): the throttle tests read the iostat group's series,
    # which keeps each group's evaluation short at fleet scale (bench/bench_fleet.py)
    groups = [
        {"name": "fioscope-iostat", "rules": [r.render(p) for r in DISK + HELPERS]},
        {"name": "fioscope-iostat-columns", "rules": [r.render(p) for r in COLUMNS]},
        {"name": "fioscope-throttle", "rules": [r.render(p) for r in CEILINGS + declared_limits(s)]},
        # avg-cpu reads no disk series: its own group, evaluated beside the disk rules (a fleet's groups run in parallel)
        {"name": "fioscope-cpu", "rules": [r.render(p) for r in CPU]},
        {"name": "fioscope-disk-baseline", "interval": p["baselineInterval"], "rules": [r.render(p) for r in BASELINE]},
        {"name": "fioscope-fio-histogram", "interval": p["fsyncHistogramInterval"], "rules": [r.render(p) for r in FIO_HISTOGRAM]},
    ]
    return {"groups": groups}
