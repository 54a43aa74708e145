"""Recording rules: iostat -x equivalents per instance and device, and the helpers the
throttling alerts build on."""

from __future__ import annotations

from fioscope_mixin import columns
from fioscope_mixin import names as n
from fioscope_mixin.rule import MAXIMA_RANGE, ON, Record, params


def _rate(column: str) -> str:
    """The rate of the node_exporter counter behind iostat's ``column`` (fioscope_mixin.columns: r/s -> reads completed,
    r_await -> time reading, ...)."""
    return "rate(%s{%%(diskSelector)s}[%%(rateWindow)s])" % columns.SERIES[column]


def _per_request(numerator: str, count: str) -> str:
    # iostat prints 0.00 when there was no request: clamp the divisor instead of dividing by 0
    return f"{numerator} / clamp_min({count}, 1e-9)"


# One rule per counter, recorded first; every column, helper and ceiling below derives from these
# recorded series (a group runs its rules in order, so they are this cycle's values): each counter's
# rate is computed once per cycle, not once per column that uses it (the cost of a fleet).
# (each named by the column table: fioscope_mixin.columns.RECORD)
R, W, D, F = (columns.RECORD[c] for c in ("r/s", "w/s", "d/s", "f/s"))
RB, WB = columns.RECORD["rkB/s"], columns.RECORD["wkB/s"]
RRQM, WRQM = columns.RECORD["rrqm/s"], columns.RECORD["wrqm/s"]
R_TIME, W_TIME, D_TIME = (f"fioscope:disk_{d}_time_seconds:rate" for d in ("read", "write", "discard"))

COUNTER_RATES = [
    Record(R, _rate("r/s"), "r/s"),
    Record(W, _rate("w/s"), "w/s"),
    Record(D, _rate("d/s"), "d/s"),
    # time spent on requests per second: the await columns and fioscope:disk_await_seconds divide these
    Record(R_TIME, _rate("r_await")),
    Record(W_TIME, _rate("w_await")),
    Record(D_TIME, _rate("d_await")),
]

DISK = COUNTER_RATES + [
    Record(columns.RECORD["r_await"], _per_request(R_TIME, R), "r_await / 1000"),
    Record(columns.RECORD["w_await"], _per_request(W_TIME, W), "w_await / 1000"),
]
# the byte rates, and util and aqu-sz, read no other record: groups of their own beside the iostat group
BYTE_RATES = [
    Record(RB, _rate("rkB/s"), "rkB/s x 1024"),
    Record(WB, _rate("wkB/s"), "wkB/s x 1024"),
    Record(n.DISK_BYTES_PER_SECOND, f"{RB} + {WB}", "rkB/s + wkB/s x 1024"),
]
UTIL_QUEUE = [
    Record(columns.RECORD["aqu-sz"], _rate("aqu-sz"), "aqu-sz"),
    Record(columns.RECORD["util"], _rate("util"), "%util / 100"),
]
# iostat columns only the dashboards show: groups of their own, from the counter rates above and the counters only
# they read (no alert waits on them; a group's evaluation is its rules' sum: at 2,000 hosts the iostat group of every
# counter took 1.7 s, 2.2 s at worst)
COLUMNS = [
    Record(F, _rate("f/s"), "f/s"),
    Record(columns.RECORD["dkB/s"], _rate("dkB/s") + f" * {columns.SECTOR_BYTES}", "dkB/s x 1024"),
    Record(columns.RECORD["d_await"], _per_request(D_TIME, D), "d_await / 1000"),
    Record(columns.RECORD["f_await"], _per_request(_rate("f_await"), F), "f_await / 1000"),
    Record(n.DISK_READ_REQUEST_SIZE_BYTES, _per_request(RB, R), "rareq-sz x 1024"),
    Record(n.DISK_WRITE_REQUEST_SIZE_BYTES, _per_request(WB, W), "wareq-sz x 1024"),
]
MERGES = [
    Record(RRQM, _rate("rrqm/s"), "rrqm/s"),
    Record(WRQM, _rate("wrqm/s"), "wrqm/s"),
    Record(n.DISK_READ_MERGES_RATIO, _per_request(RRQM, f"({RRQM} + {R})"), "%rrqm / 100"),
    Record(n.DISK_WRITE_MERGES_RATIO, _per_request(WRQM, f"({WRQM} + {W})"), "%wrqm / 100"),
]

# CPU time per mode, summed over the CPUs once, and its total over the modes once: each avg-cpu ratio divides one
# mode's host series by the total's (a host's 8 mode series re-summed by each of 6 ratios were most of the group's cost)
CPU_MODES = n.CPU_MODE_SECONDS_RATE
CPU = [
    Record(CPU_MODES, "sum by (%%(clusterLabels)shost, instance, job, mode) (rate(%s{%%(nodeSelector)s}[%%(rateWindow)s]))" % columns.CPU_SERIES),
    Record(n.CPU_SECONDS_RATE, f"sum by (%(clusterLabels)shost, instance, job) ({CPU_MODES})"),
] + [
    # iostat's groups: its %system counts hard and soft interrupts too (fioscope_mixin.columns)
    Record(f"fioscope:cpu_{name}_ratio",
           f"sum by (%(clusterLabels)shost, instance, job) ({CPU_MODES}{{{columns.cpu_mode_matcher(name)}}}) / {n.CPU_SECONDS_RATE}",
           f"%{name} / 100")
    for name in columns.CPU_MODES
]


def _irate(column: str) -> str:
    """Per scrape, as ``_rate``."""
    return "irate(%s{%%(diskSelector)s}[%%(rateWindow)s])" % columns.SERIES[column]


def _or_zero(series: str, like: str) -> str:
    """``series``, or 0 where the kernel does not export it (discards: 4.18+, flushes: 5.5+)."""
    return f"({series} or {like} * 0)"


# the tree below: a device whose slaves (fioscope_disk_parent_info) show a ceiling is not the layer that pages
LAYER_BELOW = ("max by (%%(clusterLabels)shost, device) (\n  fioscope_disk_parent_info{%%(fioSelector)s}\n"
               "  * on (%%(clusterLabels)shost, parent) group_left ()\n"
               "  label_replace(max by (%%(clusterLabels)shost, device) (fioscope:disk_ceiling{window=\"%s\"}), \"parent\", \"$1\", \"device\", \"(.+)\")\n)")

HELPERS = [
    Record(n.DISK_IOPS, f"{R} + {W} + {_or_zero(D, R)}", "r/s + w/s + d/s"),
    # mean time per request over all directions; absent while the device is idle
    Record(n.DISK_AWAIT_SECONDS, f"({R_TIME} + {W_TIME} + {_or_zero(D_TIME, R_TIME)}) / (fioscope:disk_iops > 0)",
           "await / 1000"),
]
# per-scrape rates: the flatness tests need the raw steps, not a 1m average. They read only the counters: a group of
# their own, evaluated beside the iostat group (a fleet's groups run in parallel; one group of both took 1.16 s at
# 500 hosts at worst)
IRATES = [
    Record(n.DISK_READ_IOPS_IRATE, _irate("r/s")),
    Record(n.DISK_WRITE_IOPS_IRATE, _irate("w/s")),
    Record(n.DISK_IOPS_IRATE, "fioscope:disk_read_iops:irate + fioscope:disk_write_iops:irate + "
           + _or_zero(_irate("d/s"), n.DISK_READ_IOPS_IRATE)),
    Record(n.DISK_READ_BYTES_PER_SECOND_IRATE, _irate("rkB/s")),
    Record(n.DISK_WRITE_BYTES_PER_SECOND_IRATE, _irate("wkB/s")),
    Record(n.DISK_BYTES_PER_SECOND_IRATE,
           "fioscope:disk_read_bytes_per_second:irate + fioscope:disk_write_bytes_per_second:irate"),
]
# per-scrape util: the rate-window util lags a load's start and end (first in the envelope's group, which gates on it)
UTIL_IRATE = Record(n.DISK_UTIL_RATIO_IRATE, _irate("util"))

# the step-down's rates' maxima, recorded once a minute over the last two: a 15-minute peak over these reads 15 samples
# a device, not 60 (the step-down's six peaks and the stall's one were 45 % of every sample the rules read at 2,000
# hosts; the write-back cliff's 10-minute peak of the write rate reads them too). Two minutes, so that the windows
# overlap by one: a scrape its group recorded late (a slow evaluation) is still in the next maximum. A peak is seen up
# to a minute late, and leaves the lookback up to two minutes late.
PEAK_INTERVAL = "1m"
MAXIMA = {R: n.DISK_READ_IOPS_MAX2M, W: n.DISK_WRITE_IOPS_MAX2M, n.DISK_IOPS: n.DISK_IOPS_MAX2M,
          RB: n.DISK_READ_BYTES_PER_SECOND_MAX2M, WB: n.DISK_WRITE_BYTES_PER_SECOND_MAX2M,
          n.DISK_BYTES_PER_SECOND: n.DISK_BYTES_PER_SECOND_MAX2M}
MAXIMA_RECORDS = [Record(maximum, f"max_over_time({rate}[{MAXIMA_RANGE}])") for rate, maximum in MAXIMA.items()]


def lookback_peak(rate: str, lookback: str = "%(stepDownLookback)s") -> str:
    """The rate's peak over ``lookback`` (the step-down's; at least MAXIMA_RANGE), from its recorded maxima."""
    return f"max_over_time({MAXIMA[rate]}[{lookback}])"


# Stalled: requests in flight (the in-flight gauge, averaged over the stall window) and (almost) none completing: fewer
# than max_iops a second, or so few that each waits request_seconds by Little's law (in flight / completions); or await
# in seconds while the IOPS collapsed. Not util or aqu-sz: the kernel updates busy time only when a request starts or
# completes, so both under-report a stall (util 25 % with 32 in flight).
# None completing needs requests in flight at every scrape of the window, as the cause's stall: a deep-queue load's
# first scrape has its queue in flight and a few completions counted (a rate of 0.5/s: a critical page at each such
# start; in CI a Prometheus restart then left it unresolved, hiding the cap's alert). A collapse needs some in flight
# (or completing) at the newest scrape only: its await in seconds is counted from completions, never a start. Neither
# holds for a device idle now: a deep-queue load that has just ended still averages many in flight over the window
# while a rate window shorter than it already counts no completions (the e2e stack's 20 s: each such end read as a stall).
# Nor in a scrape gap: its window holds its scrapes, one missed at most (stallWindowSamples).
IN_FLIGHT = "avg_over_time(%s{%%(diskSelector)s}[%%(stallWindow)s])" % columns.IN_FLIGHT_SERIES
STALLED = Record(n.DISK_STALLED_IN_FLIGHT, (
    f"{IN_FLIGHT} >= %(stall_min_in_flight)s\n"
    f"and {ON} count_over_time({columns.IN_FLIGHT_SERIES}{{%(diskSelector)s}}[%(stallScrapesRange)s]) >= %(stallWindowSamples)s\n"
    f"and {ON} (\n"
    "  (\n"
    f"    min_over_time({columns.IN_FLIGHT_SERIES}{{%(diskSelector)s}}[%(stallWindow)s]) >= %(stall_min_in_flight)s\n"
    f"    and {ON} (fioscope:disk_iops < %(stall_max_iops)s or {IN_FLIGHT} / fioscope:disk_iops >= %(stall_request_seconds)s)\n"
    "  )\n"
    "  or (\n"
    f"    ({columns.IN_FLIGHT_SERIES}{{%(diskSelector)s}} >= %(stall_min_in_flight)s or fioscope:disk_iops >= %(stall_max_iops)s)\n"
    f"    and {ON} fioscope:disk_await_seconds >= %(stall_await_seconds)s\n"
    f"    and {ON} (\n"
    f"      fioscope:disk_iops <= %(stall_collapse_ratio)s * {lookback_peak(n.DISK_IOPS)}\n"
    # once stalled, stalled while the await stays in seconds (the collapse leaves the lookback's peak after a while)
    f"      or max_over_time({n.DISK_STALLED_IN_FLIGHT}[%(stepDownLookback)s])\n"
    "    )\n"
    "  )\n"
    ")"))

# the device's own normal, from 1m averages recorded once a minute (a 6h quantile over every
# 15 s sample of every device would dominate the rule cost of a fleet). Unsaturated means every scrape the
# average draws on: the await is a rate-window average, so right after a deep-queue load it still holds that
# load's await while util has already dropped (a baseline taken then hides the next throttling). The newest scrape's
# util from the counter itself: this group runs on its own schedule, and where it evaluates after a scrape but before
# the envelope group has recorded that scrape's util, a load's first scrape (its await already in the rate-window
# average) passed as unsaturated: a few such normals at 5-10x the true one and a fresh device's median flips. And the
# minute averaged is the one before the last (offset baselineInterval), judged by every scrape up to now: a load that
# began within it has a first scrape only partly loaded (util under the bound, its await already the load's), which
# no test of that minute's own scrapes tells from a light minute, but its next scrapes are busy (at 15 s scrapes all
# three capped lab disks of one run took a normal of 2.6-10 ms for 0.2 ms so).
UNSATURATED = ("\nand " + ON + " max_over_time(fioscope:disk_util_ratio:irate[%(baselineUtilLookback)s]) < %(unsaturatedUtil)s"
               "\nand " + ON + " " + _irate("util") + " < %(unsaturatedUtil)s")


def _direction_unsaturated(time_rate: str, iops: str) -> str:
    """A direction's mean await over the interval, weighted by its requests; absent in a minute without any (its
    await column reads 0 then, which must not become a normal), and in a minute whose busy time did not move (a few
    sub-millisecond requests under the counter's millisecond: a normal of 0 s makes every await look slow)."""
    return (f"(avg_over_time({time_rate}[%(baselineInterval)s] offset %(baselineInterval)s) > 0)"
            f" / (avg_over_time({iops}[%(baselineInterval)s] offset %(baselineInterval)s) > 0)"
            + UNSATURATED)


def _median(unsaturated: str) -> str:
    return f"quantile_over_time(0.5, {unsaturated}[%(baselineWindow)s])"


BASELINE = [
    Record(n.DISK_AWAIT_UNSATURATED_SECONDS,
           "avg_over_time(fioscope:disk_await_seconds[%(baselineInterval)s] offset %(baselineInterval)s) > 0" + UNSATURATED),
    Record(n.DISK_READ_AWAIT_UNSATURATED_SECONDS, _direction_unsaturated(R_TIME, R)),
    Record(n.DISK_WRITE_AWAIT_UNSATURATED_SECONDS, _direction_unsaturated(W_TIME, W)),
]
# the normals, each in a group of its own (group name, record): once the window is full each reads every device's
# baseline_window of minutes (at 2,000 hosts 0.7 s a median on a 2-core VM, three in one group over 2 s under load)
BASELINE_MEDIANS = [
    ("fioscope-disk-baseline-median", Record(n.DISK_AWAIT_BASELINE_SECONDS, _median(n.DISK_AWAIT_UNSATURATED_SECONDS))),
    ("fioscope-disk-baseline-read-median", Record(n.DISK_READ_AWAIT_BASELINE_SECONDS, _median(n.DISK_READ_AWAIT_UNSATURATED_SECONDS))),
    ("fioscope-disk-baseline-write-median", Record(n.DISK_WRITE_AWAIT_BASELINE_SECONDS, _median(n.DISK_WRITE_AWAIT_UNSATURATED_SECONDS))),
]


# p99 of fio's fdatasync histogram per result over fsync_histogram_window: a rate over an hour of buckets is
# costly at fleet scale and moves slowly, so it is recorded in its own, slower group (one series per result,
# not one per bucket); the alert and the fio dashboard read it. The classic buckets (`le`), or on Prometheus 3 with
# stack.convert_classic_histograms_to_nhcb the one native histogram per result (a selector of the other form matches
# nothing): its cost is the series it reads, 69 buckets a result against one (fioscope.histogram)
FSYNC_P99 = n.FIO_FSYNC_LATENCY_SECONDS_P99
_SYNC_LATENCY = '{%(fioSelector)s,ddir="sync",stage="lat"}[%(fsyncHistogramWindow)s]'
FIO_HISTOGRAM = [Record(FSYNC_P99, f"histogram_quantile(0.99, sum by (%(fioResult)s, le) (rate(fio_latency_seconds_bucket{_SYNC_LATENCY})))\n"
                                   f"or histogram_quantile(0.99, sum by (%(fioResult)s) (rate(fio_latency_seconds{_SYNC_LATENCY})))")]


def slow(await_series: str, baseline: str = n.DISK_AWAIT_BASELINE_SECONDS) -> str:
    """Await far above its own normal (``baseline``: the device's, or the direction's), at any queue depth and
    request size; while there is no normal yet (no history), the absolute floor stands in for it."""
    # (a comparison on (...) keeps only the matched labels: the series itself carries the result)
    return (f"({await_series} and {ON} (\n  {await_series} >= {ON} %(throttle_await_baseline_factor)s * {baseline}\n"
            f"  or ({await_series} >= %(throttle_await_min_seconds)s unless {ON} {baseline})\n))")


# The awaits the envelopes test, recorded once per direction: saturated (util per scrape or over the rate window, at
# least queue_min requests waiting on average) and slow. No absolute floor: a cap at queue depth 32 waits 8 ms where the
# normal is 0.4 ms. Each rule below the saturation record reads a fleet's few saturated devices: tested in each direction's
# slow await, the saturation alone read 3 selectors over every device, the await 3 more (a rule costs the series its
# selectors touch, nearly whatever they keep)
SATURATED_QUEUE = n.DISK_SATURATED_QUEUE_SIZE
SATURATED_AWAIT = n.DISK_SATURATED_AWAIT_SECONDS
SLOW_SATURATED = n.DISK_SLOW_SATURATED_AWAIT_SECONDS
# (ddir, its await, the normal it is judged against: a direction's own, all directions' for the mean)
AWAITS = [("read", n.DISK_READ_AWAIT_SECONDS, n.DISK_READ_AWAIT_BASELINE_SECONDS),
          ("write", n.DISK_WRITE_AWAIT_SECONDS, n.DISK_WRITE_AWAIT_BASELINE_SECONDS),
          ("all", n.DISK_AWAIT_SECONDS, n.DISK_AWAIT_BASELINE_SECONDS)]
SATURATION = [
    Record(SATURATED_QUEUE, f"fioscope:disk_queue_size >= %(throttle_queue_min)s\n"
                            f"and {ON} (fioscope:disk_util_ratio:irate >= %(throttle_util_min_ratio)s or fioscope:disk_util_ratio >= %(throttle_util_min_ratio)s)"),
    *(Record(SATURATED_AWAIT, f"{series} and {ON} {SATURATED_QUEUE}", labels=(("ddir", ddir),)) for ddir, series, _ in AWAITS),
]
SLOW_AWAITS = [Record(SLOW_SATURATED, slow(f'{SATURATED_AWAIT}{{ddir="{ddir}"}}', baseline), labels=(("ddir", ddir),))
               for ddir, _, baseline in AWAITS]

# The envelope. A device at the boundary of what its caps allow is throttled whichever cap binds: per scrape it
# sits at its IOPS peak of the window, or at its bytes/s peak, or (a scrape that mixes a small-request and a
# large-request phase, or the additive provider formula IOPS = 1 / (1/MaxIOPS + size/MaxBW)) on the line between
# them: iops/peak + bytes/peak >= 1, which the min() of two caps and the additive formula both satisfy. The
# envelope is a property of the rates only: no queue depth or request size enters it.
# (pair ddir, IOPS dimension, bytes dimension, per-scrape IOPS, per-scrape bytes/s)
PAIRS = [
    ("read", "reads", "read throughput", n.DISK_READ_IOPS_IRATE, n.DISK_READ_BYTES_PER_SECOND_IRATE),
    ("write", "writes", "write throughput", n.DISK_WRITE_IOPS_IRATE, n.DISK_WRITE_BYTES_PER_SECOND_IRATE),
    ("all", "IOPS", "throughput", n.DISK_IOPS_IRATE, n.DISK_BYTES_PER_SECOND_IRATE),
]
# The envelope's windows read the per-scrape rates of a busy device only (util per scrape at least unsaturatedUtil, half
# util_min_ratio). Nothing is lost: each envelope test needs all but off_ceiling_share of its window's scrapes at
# util_min_ratio, and a window holds at most window_scrapes (5), so a window that passes holds no scrape under ~0.8 util
# (quantile_over_time's 0.1 of five interpolates the lowest two). An idle or lightly loaded device, most of a fleet, then
# has no series in these windows: the envelope costs what the fleet's busy devices do (every device paid for all
# 60 envelope rules, ~80 % of the iostat group at 500 hosts).
BUSY = {
    n.DISK_READ_IOPS_IRATE: n.DISK_BUSY_READ_IOPS_IRATE,
    n.DISK_WRITE_IOPS_IRATE: n.DISK_BUSY_WRITE_IOPS_IRATE,
    n.DISK_IOPS_IRATE: n.DISK_BUSY_IOPS_IRATE,
    n.DISK_READ_BYTES_PER_SECOND_IRATE: n.DISK_BUSY_READ_BYTES_PER_SECOND_IRATE,
    n.DISK_WRITE_BYTES_PER_SECOND_IRATE: n.DISK_BUSY_WRITE_BYTES_PER_SECOND_IRATE,
    n.DISK_BYTES_PER_SECOND_IRATE: n.DISK_BUSY_BYTES_PER_SECOND_IRATE,
}
# from the counters as scraped, in the envelope's own group (not from the iostat group's per-scrape rates: read from
# another group, a window's newest scrape is there or not depending on which group ran first)
# (the busy scrapes recorded once: tested in each rate, util per scrape was read over every device five more times)
# Only while the target is scraped: a per-scrape rate repeats its last value for up to its range after a failed scrape
# (range functions skip staleness markers), and four repeats of one sample narrowed the held test's spread over the
# lookback (a noisy neighbour after a scrape gap paged as "reads flat"); the counter as an instant vector is stale there
BUSY_UTIL = Record(n.DISK_BUSY_UTIL_RATIO_IRATE, f"{n.DISK_UTIL_RATIO_IRATE} >= %(unsaturatedUtil)s\n"
                                                 f"and {ON} {columns.SERIES['util']}{{%(diskSelector)s}}")
_BUSY = f"and {ON} {n.DISK_BUSY_UTIL_RATIO_IRATE}"
BUSY_RATES = [
    Record(n.DISK_BUSY_READ_IOPS_IRATE, f"{_irate('r/s')} {_BUSY}"),
    Record(n.DISK_BUSY_WRITE_IOPS_IRATE, f"{_irate('w/s')} {_BUSY}"),
    Record(n.DISK_BUSY_IOPS_IRATE, f"{n.DISK_BUSY_READ_IOPS_IRATE} + {n.DISK_BUSY_WRITE_IOPS_IRATE} + "
           + _or_zero(_irate("d/s"), n.DISK_BUSY_READ_IOPS_IRATE)),
    Record(n.DISK_BUSY_READ_BYTES_PER_SECOND_IRATE, f"{_irate('rkB/s')} {_BUSY}"),
    Record(n.DISK_BUSY_WRITE_BYTES_PER_SECOND_IRATE, f"{_irate('wkB/s')} {_BUSY}"),
    Record(n.DISK_BUSY_BYTES_PER_SECOND_IRATE, f"{n.DISK_BUSY_READ_BYTES_PER_SECOND_IRATE} + {n.DISK_BUSY_WRITE_BYTES_PER_SECOND_IRATE}"),
]
# PAIRS with the busy rates: what the envelope, its flatness tests and the ceilings read
BUSY_PAIRS = [(ddir, iops_dim, bytes_dim, BUSY[iops], BUSY[bytes_]) for ddir, iops_dim, bytes_dim, iops, bytes_ in PAIRS]

# Each direction's spread of its busy per-scrape IOPS over peak_lookback, where it is within the band a cap holds (absent
# otherwise): the held test (held_at_level). Once the lookback holds held_spread_windows windows of scrapes, the upper
# over the lower held_quantile (a pause's or a ramp's scrape or two do not count) within held_tolerance; before, every
# scrape of the lookback within a band that widens with the scrapes it holds: within held_start_tolerance from
# window_scrapes scrapes (a window's, and never fewer than four: three scrapes of a neighbour swinging +-25-40 % fall
# within 8 % on one seed in twenty-five, four on one in a hundred), within held_tolerance from two scrapes more (six of such a
# neighbour fall within 11 % on none of 1,400 seeds at each interval; a cap jittering +-5 % spreads 10.5 % at most, which the start's band
# missed on one draw in forty: its page came three windows in, 3.5 minutes, now two scrapes late). The deciles' band
# holds only where the whole range is within it and a saturated scrape's idle share: a cap's saturated scrape (util at
# least util_min_ratio) delivers at least that share of the cap, so its lowest is no further under the band; a
# checkpoint's bursts at the demand's own rate, a few per cent apart a scrape, came within 9.3 % between their deciles
# over 13 scrapes with 27 % between the extremes (checkpoint 14 of the random families paged). Busy scrapes only: the
# lookback holds the load's own scrapes, not the idle minutes before it, and a fleet's idle devices have none to read;
# saturated ones only (SATURATED_RATES).
# (rate label of fioscope:disk_held_flat_mean, the saturated scrapes' rate, its spread): the IOPS, and the bytes/s (an IOPS
# ceiling named while the bytes/s held too and the request size moved: a bandwidth cap whose first window fell inside
# one phase of small requests, its IOPS spread by the scrape that mixed two sizes, paged a scrape late)
SPREADS = [("iops", n.DISK_SATURATED_IOPS_IRATE, n.DISK_IOPS_SPREAD_RATIO),
           ("bytes", n.DISK_SATURATED_BYTES_PER_SECOND_IRATE, n.DISK_BYTES_SPREAD_RATIO)]


# the saturated scrapes' IOPS (and bytes/s), each direction's: a scrape split by an application's pause is busy (util 0.5)
# at half the rate, and two such in five minutes put the spread's lower decile under a cap's band (paused caps paged
# late, twice)
SATURATED_RATES = [Record(saturated, f"{iops if name == 'iops' else bytes_} and {ON} {n.DISK_UTIL_RATIO_IRATE} >= %(throttle_util_min_ratio)s",
                          labels=(("ddir", ddir),))
                   for name, saturated, _ in SPREADS for ddir, _, _, iops, bytes_ in BUSY_PAIRS]


def held_band(name: str, ddir: str, saturated: str) -> list[Record]:
    """The direction's saturated scrapes over the lookback from the band's start, summed up for the spread: their
    median, the time of the first within held_tolerance over it, then (label stat) how many from there, their
    extremes, their quantiles and how many came before it. Records, one subquery each, read at the evaluation's time
    (``@ end()``): a range selector nested in two subqueries read nothing on 2.42 or 3.x, and the spread's eleven
    subqueries in one rule loaded more samples than promtool allows (10,000) at 5 s scrapes."""
    series, labels = f'{saturated}{{ddir="{ddir}"}}', (("ddir", ddir), ("rate", name))
    median = f'{n.DISK_SATURATED_MEDIAN}{{ddir="{ddir}",rate="{name}"}}'
    start = f'{n.DISK_HELD_BAND_START}{{ddir="{ddir}",rate="{name}"}} @ end()'
    since = f"timestamp({series} >= 0) >= ignoring (rate) {start}"
    lookback = f"({series} and {since})[%(peakLookback)s:%(evaluationStep)s]"
    stats = [("samples", f"count_over_time({lookback})"), ("max", f"max_over_time({lookback})"),
             ("min", f"min_over_time({lookback})"), ("upper", f"quantile_over_time(%(heldUpperQuantile)s, {lookback})"),
             ("lower", f"quantile_over_time(%(throttle_held_quantile)s, {lookback})"),
             ("before", f"count_over_time(({series} unless {since})[%(peakLookback)s:%(evaluationStep)s])")]
    return [Record(n.DISK_SATURATED_MEDIAN, f"quantile_over_time(0.5, {series}[%(peakLookback)s])", labels=labels),
            Record(n.DISK_HELD_BAND_START,
                   f"min_over_time(timestamp({series} <= ignoring (rate) (1 + %(throttle_held_tolerance)s) * {median} @ end())"
                   "[%(peakLookback)s:%(evaluationStep)s] @ end())", labels=labels),
            *(Record(n.DISK_HELD_BAND, expr, labels=(*labels, ("stat", stat))) for stat, expr in stats)]


def rate_spread(name: str, ddir: str, spread: str) -> Record:
    # the saturated scrapes from the band's start (held_band): those of a load's start above it (a token bucket's
    # burst) are left out, as many as a short burst spans at most (more: the spread is not held); a level's own scrapes
    # above the band later on stay in, and the range with them (a neighbour's swings)
    def stat(which: str) -> str:
        return f'{n.DISK_HELD_BAND}{{ddir="{ddir}",rate="{name}",stat="{which}"}}'
    each = "ignoring (rate, stat)"
    whole, count = f"{stat('max')} / {each} {stat('min')}", stat("samples")
    return Record(spread, (f"(\n  (\n    {stat('upper')} / {each} {stat('lower')}\n"
                           f"      and {each} {count} >= %(heldSpreadSamples)s\n"
                           f"      and {each} {whole} <= (1 + %(throttle_held_tolerance)s) / %(throttle_util_min_ratio)s\n"
                           "    ) <= 1 + %(throttle_held_tolerance)s\n"
                           f"  or ({whole} and {each} {count} >= %(heldWideSamples)s) <= 1 + %(throttle_held_tolerance)s\n"
                           f"  or ({whole} and {each} {count} >= %(heldStartSamples)s) <= 1 + %(throttle_held_start_tolerance)s\n"
                           f")\nunless {each} {stat('before')} > %(shortBurstScrapes)s"),
                  labels=(("ddir", ddir),))


# each direction's band before its spread (a group evaluates its rules in order)
RATE_SPREADS = [record for name, saturated, spread in SPREADS for ddir, _, _, _, _ in BUSY_PAIRS
                for record in (*held_band(name, ddir, saturated), rate_spread(name, ddir, spread))]
# short: the window while fio loads the device; long: any workload
WINDOWS = [("short", "%(fioWindow)s"), ("long", "%(window)s")]
# the scrapes each window must hold before it decides, counted on a counter as scraped: a per-scrape rate repeats its last
# value for up to its range after a scrape gap (range functions skip staleness markers), and one or two samples, or
# a repeated one, are "flat" by construction
WINDOW_SAMPLES = {"short": "%(fioWindowSamples)s", "long": "%(windowSamples)s"}
# ... over the window and half a scrape (the newest may be in flight when the group evaluates: rule.params)
WINDOW_SCRAPES_RANGE = {"short": "%(fioWindowScrapesRange)s", "long": "%(windowScrapesRange)s"}
IOPS_RATIO, BYTES_RATIO = n.DISK_ENVELOPE_IOPS_RATIO, n.DISK_ENVELOPE_BYTES_RATIO
ENVELOPE = n.DISK_ENVELOPE_RATIO
REQUEST_SIZE = n.DISK_REQUEST_SIZE_BYTES_IRATE


def _sel(ddir: str, window_name: str = "") -> str:
    return f'{{ddir="{ddir}"' + (f',window="{window_name}"' if window_name else "") + "}"


def _size_spread(ddir: str, window: str) -> str:
    """The request size varies in the window (a phase of small and one of large requests)."""
    return (f"max_over_time({REQUEST_SIZE}{_sel(ddir)}[{window}]) >= %(throttle_size_spread_ratio)s * "
            f"min_over_time({REQUEST_SIZE}{_sel(ddir)}[{window}])")


def envelope_records(window_name: str, window: str, ddir: str, iops: str, bytes_: str) -> list[Record]:
    """The window's peaks, and each scrape's place against them (0 where this direction idles on a busy device: the window's
    quantile sees it; absent while the device is not busy, where the util test over the window fails anyway)."""
    labels = (("ddir", ddir), ("window", window_name))
    sel = _sel(ddir, window_name)
    i, b = IOPS_RATIO + sel, BYTES_RATIO + sel
    spread = _size_spread(ddir, window)
    return [
        # the peaks inline: nothing else reads them (recorded, they were 12 series a device)
        Record(IOPS_RATIO, f"{iops} / clamp_min(max_over_time({iops}[{window}]), %(throttle_min_iops)s)", labels=labels),
        Record(BYTES_RATIO, f"{bytes_} / clamp_min(max_over_time({bytes_}[{window}]), %(throttle_min_bytes_per_second)s)", labels=labels),
        # at one peak (max of the two), or on the line between them while the request size varies in the window
        # (with one size, iops/peak = bytes/peak and the line would accept half the peak)
        Record(ENVELOPE, f"clamp_max(\n  ({i} + {b} >= 1) and {ON} ({spread})\n  or ({i} >= {b})\n  or {b},\n1)", labels=labels),
    ]


def _flat(rate: str, window: str, tolerance: str = "%(throttle_ceiling_tolerance)s") -> str:
    """The rate flat at a ceiling: its per-scrape stddev a small share of its mean, or all but a quarter of the scrapes
    within ``tolerance`` of the window's peak (a single ramp or phase-change scrape breaks any tight stddev bound)."""
    return (f"stddev_over_time({rate}[{window}]) <= %(throttle_flatness_max_cv)s * avg_over_time({rate}[{window}])\n"
            f"  or quantile_over_time(%(throttle_flat_off_share)s, {rate}[{window}]) >= (1 - {tolerance}) * max_over_time({rate}[{window}])")


def _named_flat(rate: str, window: str) -> str:
    """Flat enough to be named "flat" (a bandwidth cap whose phase changes dip a scrape or two), where the envelope holds."""
    return _flat(rate, window, "%(throttle_envelope_tolerance)s")


AT_ENVELOPE = n.DISK_AT_ENVELOPE_AWAIT_SECONDS
SATURATED_WINDOW = n.DISK_SATURATED_WINDOW_SCRAPES


def saturated_window(window_name: str, window: str) -> Record:
    """The window holds the scrapes its tests need and util is saturated in all but off_ceiling_share of them: once per
    window (every direction's envelope requires it; each tested it again, over every device)."""
    return Record(SATURATED_WINDOW, (
        f"count_over_time({columns.SERIES['r/s']}{{%(diskSelector)s}}[{WINDOW_SCRAPES_RANGE[window_name]}]) >= {WINDOW_SAMPLES[window_name]}\n"
        f"and {ON} quantile_over_time(%(throttle_off_ceiling_share)s, fioscope:disk_util_ratio:irate[{window}]) >= %(throttle_util_min_ratio)s"),
        labels=(("window", window_name),))


def at_envelope_await(window_name: str, window: str, ddir: str, iops: str, bytes_: str) -> Record:
    """The direction's await while it holds its envelope over the window: saturated and slow, and one rate flat at its
    peak or, while request sizes vary, nearly every scrape on the envelope (each scrape against the peaks of its own
    window: a phase of one request size is at its own envelope), in a window of enough scrapes with util saturated
    (fioscope:disk_saturated_window_scrapes). Recorded once; every ceiling of the direction reads it."""
    return Record(AT_ENVELOPE, (
        f'{SLOW_SATURATED}{{ddir="{ddir}"}}\n'
        f'and {ON} {SATURATED_WINDOW}{{window="{window_name}"}}\n'
        f"and {ON} (\n  {_flat(iops, window)}\n  or {_flat(bytes_, window)}\n"
        f"  or (quantile_over_time(%(throttle_off_ceiling_share)s, {ENVELOPE}{_sel(ddir, window_name)}[{window}])"
        f" >= 1 - %(throttle_envelope_tolerance)s\n      and {ON} ({_size_spread(ddir, window)}))\n)"),
        # ddir as a label too (the expression carries it): promtool's duplicate-rules lint tells rules apart by name and labels
        labels=(("ddir", ddir), ("window", window_name)))


HELD_FLAT = n.DISK_HELD_FLAT_MEAN


def held_flat(window_name: str, window: str, ddir: str, iops: str, bytes_: str) -> list[Record]:
    """Each rate's mean over the window where the direction holds its envelope and the rate is flat enough to be named
    "flat" (absent otherwise): computed once, read by the four ceilings of the direction and window."""
    held = f'{AT_ENVELOPE}{{ddir="{ddir}",window="{window_name}"}}'
    return [Record(HELD_FLAT, f"avg_over_time({rate}[{window}])\nand {ON} ({_named_flat(rate, window)})\nand {ON} {held}",
                   labels=(("ddir", ddir), ("window", window_name), ("rate", name)))
            for name, rate in (("iops", iops), ("bytes", bytes_))]


def held_at_level(window_name: str) -> str:
    """Some direction's IOPS flat at a level they hold: held flat (fioscope:disk_held_flat_mean) in the window, and the
    direction's busy per-scrape IOPS over peak_lookback within their band (fioscope:disk_iops_spread_ratio: the 10th and
    90th percentiles once the lookback holds three windows of scrapes, every scrape before). A cap holds its rate within
    its jitter, a few per cent, for as long as it binds; demand noise is flat in one window by chance now and then (a
    noisy neighbour at 800-1,400 reads/s paged on about half its seeds), its percentiles over minutes never. The
    test before, every sample of the window within 2.5 % of the lookback's peak, paged a cap whose rate moves 2-5 % a
    scrape late or not at all, and resolved it minutes into the cap (issue 53). IOPS only: a bandwidth ceiling is named
    where the IOPS swing (request sizes vary), which demand noise of one size never is, and a bandwidth cap's bytes/s dip
    a scrape at each change of request size; but an IOPS ceiling whose bytes/s are held flat and within their band is
    held too (SPREADS). The samples are the busy per-scrape rates (BUSY_PAIRS): the alert that reads this three times an
    interval touches a fleet's few busy devices, not all."""
    return "\n  or ".join(
        f'{HELD_FLAT}{{ddir="{ddir}",window="{window_name}",rate="{rate}"}}\n'
        f'    and {ON} {spread}{{ddir="{ddir}"}}'
        for rate, _, spread in SPREADS for ddir, _, _, _, _ in BUSY_PAIRS)


def ceilings(window_name: str, window: str, ddir: str, iops_dim: str, bytes_dim: str, iops: str, bytes_: str) -> list[Record]:
    """The inferred ceilings of one direction: the IOPS and/or bytes/s the device is held at.

    shape="flat": IOPS flat at their peak (a constant request size, or an IOPS cap): the IOPS ceiling, the mean rate
    (with one size an IOPS and a bandwidth cap look the same: the IOPS are named); bytes/s flat while IOPS swing:
    the bandwidth ceiling. shape="envelope": neither flat but every scrape on the envelope: both caps bind in
    turn, both peaks are named."""
    def flat(rate: str) -> str:  # the held flat mean, without its own labels (the ceiling's are the device's)
        return f'max without (ddir, window, rate) ({HELD_FLAT}{{ddir="{ddir}",window="{window_name}",rate="{rate}"}})'
    flat_i, flat_b = flat("iops"), flat("bytes")
    held = f'{AT_ENVELOPE}{{ddir="{ddir}",window="{window_name}"}}'
    better = ""
    if ddir == "all":  # a total is named only when no direction explains it
        better = (f'\nunless {ON} fioscope:disk_ceiling{{window="{window_name}",'
                  f'dimension=~"reads|writes|read throughput|write throughput"}}')
    floor_i = f"and {ON} max_over_time({iops}[{window}]) >= %(throttle_min_iops)s"
    floor_b = f"and {ON} max_over_time({bytes_}[{window}]) >= %(throttle_min_bytes_per_second)s"
    # the peaks named: over the longer window (a short one may hold one request size and a scrape mixing two)
    peak_window = WINDOWS[-1][1]
    shapes = [  # (value, dimension, unit, shape); a held flat mean implies the held envelope
        (f"{flat_i}\n{floor_i}", iops_dim, "/s", "flat"),
        (f"{flat_b}\nunless {ON} {flat_i}\n{floor_b}", bytes_dim, "B/s", "flat"),
        (f"max_over_time({iops}[{peak_window}])\nunless {ON} {flat_i}\nunless {ON} {flat_b}\n{floor_i}\nand {ON} {held}",
         iops_dim, "/s", "envelope"),
        (f"max_over_time({bytes_}[{peak_window}])\nunless {ON} {flat_i}\nunless {ON} {flat_b}\n{floor_b}\nand {ON} {held}",
         bytes_dim, "B/s", "envelope"),
    ]
    return [Record(n.DISK_CEILING, expr + better,
                   labels=(("window", window_name), ("dimension", dim), ("unit", unit), ("shape", shape)))
            for expr, dim, unit, shape in shapes]


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

# Provider cap or physical maximum: 1 for a device that is local hardware (its envelope is its own maximum); absent
# for a provider's volume. The class from what the guest reads (docs/device-class.md), first answer wins: the
# per-device override; instance storage named by its model (local on every cloud); a model/vendor naming a remote
# volume, or a network transport: NVMe-oF, iSCSI, FC (the provider's); a machine whose DMI names a cloud (every other device the
# provider's: each instance family brings new models, a list of them is never complete); else a device with a
# model is local hardware and one without (virtio, xvd, loop, nbd, rbd) the provider's. Case-insensitive throughout.
# The model from fioscope's sysfs reader or node_exporter's device info series, whichever is scraped.
PHYSICAL = n.DISK_PHYSICAL_DEVICE
_MODEL = "fioscope_disk_model_info{%(fioSelector)s,"
_REMOTE = "(?i:%(remoteModels)s|%(virtualModels)s)"
_CLOUD = "(?i:%(cloudMachines)s)"
# the machine's identity, from fioscope's own DMI reader or node_exporter's dmi collector (whichever is scraped)
CLOUD_MACHINE = ("\n      or ".join(
    [f'fioscope_machine_info{{%(fioSelector)s,{label}=~"{_CLOUD}"}}'
     for label in ("sys_vendor", "product_name", "chassis_asset_tag", "bios_vendor")]
    + [f'node_dmi_info{{%(nodeSelector)s,{label}=~"{_CLOUD}"}}'
       for label in ("system_vendor", "product_name", "chassis_asset_tag", "bios_vendor")]))


# node_exporter's own view of the device's model (its diskstats collector's info series, from udev): a host that runs
# no fioscope exporter still tells a local NVMe from a provider's volume (the sysfs model fioscope reads is udev's source)
_NODE_MODEL = columns.INFO_SERIES + "{%(nodeSelector)s,"
# a device whose model or vendor, in either exporter's series, names a provider's volume
REMOTE_DEVICE = ("max by (%(clusterLabels)shost, device) (\n"
                 f'      {_MODEL}model=~"{_REMOTE}"}}\n      or {_MODEL}vendor=~"{_REMOTE}"}}\n      or {_NODE_MODEL}model=~"{_REMOTE}"}}\n    )')


def physical_device(s: dict) -> Record:
    per_device = s["thresholds"].get("disk_cap_per_device") or {}
    physical = sorted(d for d, kind in per_device.items() if kind == "physical")
    forced = "|".join(sorted(per_device))
    not_forced = f',device!~"{forced}"' if forced else ""
    expr = ('max by (%(clusterLabels)shost, device) (\n'
            f'  {_MODEL}model=~"(?i:%(localModels)s)"{not_forced}}}\n'
            f'  or {_NODE_MODEL}model=~"(?i:%(localModels)s)"{not_forced}}}\n'
            f'  or (\n    ({_MODEL}model!=""{not_forced}}} or {_NODE_MODEL}model!=""{not_forced}}})\n'
            f'    unless on (%(clusterLabels)shost, device) {REMOTE_DEVICE}\n'
            '    unless on (%(clusterLabels)shost, device) fioscope_disk_bus_info{%(fioSelector)s,transport=~"(?i:%(remoteTransports)s)"}\n'
            f'    unless on (%(clusterLabels)shost) (\n      {CLOUD_MACHINE}\n    )\n  )\n)')
    if physical:
        devices = "|".join(physical)
        expr += ('\nor max by (%(clusterLabels)shost, device) (\n  fioscope_disk_model_info{%(fioSelector)s,device=~"' + devices
                 + '"} * 0 + 1\n  or ' + _NODE_MODEL + 'device=~"' + devices + '"} * 0 + 1\n)')
    return Record(PHYSICAL, expr)


# each direction's average rates (the step-down's): (ddir, IOPS, bytes/s), ddir as in PAIRS
STEP_DOWN_RATES = [("read", R, RB), ("write", W, WB), ("all", n.DISK_IOPS, n.DISK_BYTES_PER_SECOND)]


def ceiling_records() -> list[Record]:
    records = [UTIL_IRATE, BUSY_UTIL, *BUSY_RATES, *SATURATED_RATES, *RATE_SPREADS, *SATURATION, *SLOW_AWAITS]
    records += [Record(REQUEST_SIZE, f"{bytes_} / ({iops} > 0)", labels=(("ddir", ddir),)) for ddir, _, _, iops, bytes_ in BUSY_PAIRS]
    for name, window in WINDOWS:
        records.append(saturated_window(name, window))
        for ddir, _, _, iops, bytes_ in BUSY_PAIRS:
            records += envelope_records(name, window, ddir, iops, bytes_)
            records.append(at_envelope_await(name, window, ddir, iops, bytes_))
            records += held_flat(name, window, ddir, iops, bytes_)
        for pair in BUSY_PAIRS:
            records += ceilings(name, window, *pair)
        records.append(Record(n.DISK_CEILING_COUNT, f'count by (%(clusterLabels)shost, instance, job, device) ({n.DISK_CEILING}{{window="{name}"}})',
                              labels=(("window", name),)))
    records += [Record(n.DISK_CEILING_BELOW, LAYER_BELOW % name, labels=(("window", name),)) for name, _ in WINDOWS]
    return records


# a running fio job's write rate under write_cliff_ratio of its peak in the last writeCliffWindow: a write cache (the page
# cache, the device's) exhausted. Recorded once: its alert and the write-back cliff's cause alerts, evaluated every 5 s,
# read it (each read every fio job's 10 minutes of write rates again; the cause chain tests it inline, cause.py)
FIO_WRITE_BW = 'fio_bandwidth_bytes_per_second{%(fioSelector)s,ddir="write"}'
# a fio result's series joined with its run's (job fioscope): the job is running
FIO_RUNNING = "on (%(fioResult)s) fio_run_running{%(fioSelector)s} == 1"
FIO_WRITE_CLIFF = Record(n.FIO_WRITE_CLIFF_BYTES_PER_SECOND,
                         f"{FIO_WRITE_BW}\n  < %(write_cliff_ratio)s * max_over_time({FIO_WRITE_BW}[%(writeCliffWindow)s])\n"
                         f"and {FIO_RUNNING}")


def guard_records(s: dict) -> list[Record]:
    """What only the alerts and the cause rules read (other groups, which read the latest value of any group): the
    fio load, the device's class and the declared limits. No rule of the iostat or envelope groups reads them, so they
    evaluate beside those rather than after them."""
    return [FIO_LOAD, FIO_WRITE_CLIFF, physical_device(s)] + declared_limits(s)


def step_down_records() -> list[Record]:
    """Each direction's step-down, read only by the alerts and the cause rules, as the guards: a group of its own
    (its 15-minute windows over every device are most of the guards' cost; one group of both took 2.0 s at worst
    at 2,000 hosts)."""
    # burst credits spent: IOPS *and* bytes/s fell to a fraction of their peaks (a request size that changes moves
    # one up when the other goes down: never a step-down), value the IOPS ratio. Per direction (ddir), as the ceilings
    # are named: the reads of an independent client falling 4x for a minute are no step-down of a flat write cap. A
    # direction that stopped (under min_iops: idle) fell to no level at all: a load that ended, not a baseline (a
    # capture's layout writes, then reads at a cap, read "burst credits exhausted, IOPS fell 3.7e9x" on the cap's alert)
    # (the IOPS divide only where at least min_iops: the filter is the divisor, one selector fewer over every device)
    return [Record(
        n.DISK_STEP_DOWN_RATIO,
        f"{lookback_peak(iops)} / ({iops} >= %(throttle_min_iops)s) >= %(throttle_step_down_ratio)s\n"
        f"and {ON} {lookback_peak(bytes_)} / clamp_min({bytes_}, 1e-9) >= %(throttle_step_down_ratio)s",
        labels=(("ddir", ddir),)) for ddir, iops, bytes_ in STEP_DOWN_RATES]


# a long queue alone is demand: costly where the await is far above normal with no more throughput than a window before
# (FioscopeDiskQueueExploding's test, over every device: recorded every 15 s, where the alerts' 5 s group repeated it)
COSTLY_QUEUE = Record(n.DISK_COSTLY_QUEUE_SIZE,
                      f"fioscope:disk_queue_size > %(queue_size_exploding)s\nand {ON} " + slow(n.DISK_AWAIT_SECONDS)
                      + f"\nand {ON} avg_over_time(fioscope:disk_iops[%(queueWindow)s])"
                      " <= %(queue_rise_ratio)s * avg_over_time(fioscope:disk_iops[%(queueWindow)s] offset %(queueWindow)s)")


def recent_peak_records() -> list[Record]:
    """Each direction's recent peak, read only by the alerts and the cause rules: a group of its own, as the step-down."""
    # each direction's recent peak, for a device busy within the envelope's window only (a ceiling needs one): its
    # readers (the long throttle alert, the cause ceiling: 18 selectors) then touch a fleet's few busy devices. The
    # peak of a level the device held for peakHold (short_burst and a scrape each side: the lowest rate over it, recorded
    # first for every device not idle): a token bucket's burst at the load's start stood as the peak for the whole
    # lookback and the cap under it paged 5 minutes late (issue 53's burst family); a demand that fell after minutes at
    # its rate still stands. Recorded, not a subquery: one over every device's rates at 5 s loaded 60 points a series
    return [record for ddir, _, _, iops, bytes_ in PAIRS
            for name, rate, idle in (("iops", iops, "%(throttle_min_iops)s"), ("bytes", bytes_, "%(throttle_min_bytes_per_second)s"))
            for record in (
                Record(n.DISK_HELD_LEVEL, f"min_over_time({rate}[%(peakHold)s]) >= {idle}", labels=(("ddir", ddir), ("rate", name))),
                Record(n.DISK_RECENT_PEAK, f'max_over_time({n.DISK_HELD_LEVEL}{{ddir="{ddir}",rate="{name}"}}[%(peakLookback)s])\n'
                                           f"and {ON} max_over_time({n.DISK_BUSY_IOPS_IRATE}[%(window)s])",
                       labels=(("ddir", ddir), ("rate", name))))]


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
    columns_every = {"interval": p["columnsInterval"]} if p["columnsInterval"] else {}
    # a group runs its rules in order, so rules that build on each other share one; groups run in parallel and read
    # each other's latest values, an interval old when the reader runs first. The throttle tests share the envelope
    # group, whose windows are over its own records: read from another group, a window's newest scrape was missing or
    # not (Prometheus does not order groups), which moved a window's peak and flatness by a scrape; the columns and
    # avg-cpu, which no alert waits on, have their own
    groups = [
        {"name": "fioscope-iostat", "rules": [r.render(p) for r in DISK + HELPERS]},
        {"name": "fioscope-iostat-bytes", "rules": [r.render(p) for r in BYTE_RATES]},
        {"name": "fioscope-iostat-util", "rules": [r.render(p) for r in UTIL_QUEUE]},
        {"name": "fioscope-iostat-irate", "rules": [r.render(p) for r in IRATES]},
        # the envelope, its flatness tests and the ceilings: every window it tests is over its own records, from the
        # counters as scraped; the awaits, util and queue it reads from the iostat group are instant values (1m rates)
        {"name": "fioscope-envelope", "rules": [r.render(p) for r in ceiling_records()]},
        # read only by the alerts and the cause groups: beside the iostat group (a fleet's groups run in parallel)
        {"name": "fioscope-disk-guards", "rules": [r.render(p) for r in guard_records(s)]},
        # the stall, read only by the alerts and the cause groups as the guards: the costliest rule over every device
        # (11 selectors; 0.8 s of the guards' 0.9 s at 2,000 hosts), so a group of its own
        {"name": "fioscope-disk-stall", "rules": [STALLED.render(p)]},
        {"name": "fioscope-disk-maxima", "interval": PEAK_INTERVAL, "rules": [r.render(p) for r in MAXIMA_RECORDS]},
        {"name": "fioscope-disk-step-down", "rules": [r.render(p) for r in step_down_records()]},
        {"name": "fioscope-disk-recent-peak", "rules": [r.render(p) for r in recent_peak_records()]},
        {"name": "fioscope-disk-queue", "rules": [COSTLY_QUEUE.render(p)]},
        # the columns and avg-cpu only the dashboards show (and the wait test's steal, a slow input): every
        # thresholds.columns_interval (0s: every evaluation; a sixth of the rules' work, which a fleet's 1m cuts to a quarter)
        {"name": "fioscope-iostat-columns", **columns_every, "rules": [r.render(p) for r in COLUMNS]},
        {"name": "fioscope-iostat-merges", **columns_every, "rules": [r.render(p) for r in MERGES]},
        # avg-cpu reads no disk series: its own group, evaluated beside the disk rules (a fleet's groups run in parallel)
        {"name": "fioscope-cpu", **columns_every, "rules": [r.render(p) for r in CPU]},
        {"name": "fioscope-disk-baseline", "interval": p["baselineInterval"], "rules": [r.render(p) for r in BASELINE]},
        *({"name": name, "interval": p["baselineMedianInterval"], "rules": [median.render(p)]} for name, median in BASELINE_MEDIANS),
        {"name": "fioscope-fio-histogram", "interval": p["fsyncHistogramInterval"], "rules": [r.render(p) for r in FIO_HISTOGRAM]},
    ]
    return {"groups": groups}
