"""Why a disk is slow: one cause per slow episode of a device (docs/runbook.md "Why is this disk slow").

A slow episode is the device's await well above its own normal (``fioscope:disk_slow_await_ratio``), a stall, or an
application measurably waiting (fio's completion latency far above the device's await, the CPU starved while the
disk idles). Each is named by exactly one cause in ``fioscope:disk_slow_cause{cause=...}`` (value 1); the causes are
recorded in precedence order, each ``unless`` a cause recorded before it in the same evaluation, so two can never
hold for one device at once:

stall > writeback_cliff > instance_limit > provider_cap > device_max > noisy_neighbour > wait_above_disk

A slow await under the application's own higher demand, below any ceiling (a backup, a batch job), is load, not a
fault: it gets no cause. Thresholds: ``thresholds.cause`` in alerts/config.yaml.
"""

from __future__ import annotations

from fioscope_mixin import instance_limit as il
from fioscope_mixin import names as n
from fioscope_mixin.columns import IN_FLIGHT_SERIES
from fioscope_mixin.promql import (
    BY_DEVICE,
    CEILING_AFTER_STEP_DOWN,
    CEILING_AT_PEAK,
    HOST,
    LOCAL,
    ceiling_at_peak,
    ceiling_held,
    device_query,
    device_series,
    disk_value,
)
from fioscope_mixin.recording import FIO_RUNNING, FIO_WRITE_BW, lookback_peak
from fioscope_mixin.rule import ON, Alert, Record, fmt, params

# a node_exporter device series and a host-level series of the same scrape (PSI, avg-cpu) join on these
ON_HOST = "on (%(clusterLabels)sinstance, job)"
# a fio result (job fioscope) and node_exporter's device (job node) share only host and device
ON_DEVICE = "on (%(clusterLabels)shost, device)"

SLOW = n.DISK_SLOW_AWAIT_RATIO
CAUSE = n.DISK_SLOW_CAUSE
CONDITION = n.DISK_CAUSE_CONDITION
# (cause label, what an operator reads) in precedence order: the first that holds names the episode
CAUSES = [
    ("stall", "requests in flight, (almost) none completing"),
    ("writeback_cliff", "the write rate collapsed once a cache filled"),
    ("instance_limit", "the machine's own disk limit, shared by its volumes"),
    ("provider_cap", "the provider's cap on the volume"),
    ("device_max", "the device's own maximum"),
    ("noisy_neighbour", "a noisy neighbour or the shared backend"),
    ("wait_above_disk", "a wait above the disk (CPU, filesystem or application)"),
]


def cause_params(s: dict) -> dict[str, str]:
    """params() and thresholds.cause as ``cause_<key>``."""
    p = params(s) | il.limit_params(s)
    for key, value in s["thresholds"]["cause"].items():
        p[f"cause_{key}"] = fmt(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)
    return p


def _higher(cause: str) -> str:
    """Causes that outrank ``cause``: recorded earlier in this evaluation (the group runs its rules in order)."""
    names = [c for c, _ in CAUSES]
    return "|".join(names[:names.index(cause)])


IN_FLIGHT = IN_FLIGHT_SERIES + "{%(diskSelector)s}"

# below a stall, no other cause while one starts (the last scrape: requests in flight, almost none completing; the
# window's test names it a minute in) or within a window after one (the rate windows still hold its awaits); recorded
# (fioscope:disk_near_stall) with the device's labels: group_left keeps the irate's, not only those it matches on
NEAR_STALL = (f"(\n  {n.DISK_IOPS_IRATE} < {ON} group_left () %(cause_stall_completions_per_request)s * {IN_FLIGHT}\n"
              f"  and {ON} {IN_FLIGHT} >= %(cause_stall_min_in_flight)s\n"
              f"  or max_over_time({CAUSE}{{cause=\"stall\"}}[%(window)s])\n)")


def _unit(expr: str) -> str:
    return f"{BY_DEVICE} (\n{expr}\n) * 0 + 1"


# the device at its provider's ceiling or its own, as the throttling alerts judge it: a ceiling in fio's window while fio
# loads the device, or in the any-workload window, each at the most the device did lately (a plateau under an earlier,
# higher rate is demand, unless burst credits ran out: the step-down; each in the ceiling's own direction); held
# min_samples evaluations within cause.hold (a healthy stream's chance-flat minute flickers), and busy in the last scrape
# (the windows still hold a load that just stopped). fio's window holds two scrapes at 15 s: a neighbour's drifting
# share of a backend is flat in two now and then, under the rate the victim did before the neighbour came (a capture
# on the lab's noisy neighbour named the provider's cap for 15-30 s stretches, which broke the neighbour's episode)
SHORT_AT_PEAK = ceiling_at_peak("short", "%(fioWindow)s", ceiling="max_over_time(%s[%%(cause_hold)s])")
CEILING = (f"(\n  {ceiling_held('short', '%(window)s', '%(windowSamples)s')} and on (%(clusterLabels)shost, device) {n.DISK_FIO_LOAD}\n"
           f"    and {ON} (\n{SHORT_AT_PEAK}\nor {CEILING_AFTER_STEP_DOWN}\n  )\n"
           f"  or {ceiling_held('long')} and {ON} (\n{CEILING_AT_PEAK}\nor {CEILING_AFTER_STEP_DOWN}\n  )\n)\n"
           f"and {ON} {n.DISK_UTIL_RATIO_IRATE} >= %(throttle_util_min_ratio)s")

# requests in flight in every scrape of the window and under a tenth of a completion per second per request in flight:
# util and aqu-sz under-report a stall (the kernel updates busy time only as a request starts or ends), io_now does not
# (group_left: the comparison keeps every label of the in-flight average, not only the ones it matches on)
STALLED = (f"avg_over_time({IN_FLIGHT}[%(window)s]) > {ON} group_left () {n.DISK_IOPS} / %(cause_stall_completions_per_request)s\n"
           f"and {ON} min_over_time({IN_FLIGHT}[%(window)s]) >= %(cause_stall_min_in_flight)s\n"
           f"and {ON} count_over_time({IN_FLIGHT}[%(window)s]) >= %(cause_min_samples)s")

STALL = f"{n.DISK_STALL_IN_FLIGHT}\nor {n.DISK_STALLED_IN_FLIGHT}"

# the application's write rate collapsed: a running fio job's (a page cache that filled: the disk below writes at its
# steady rate all along) while the device is busy, or, on local hardware, the device's own (its write cache filled; on a
# provider's volume the same fall is burst credits spent: a provider cap)
W_PEAK = lookback_peak(n.DISK_WRITE_BYTES_PER_SECOND, "%(writeCliffWindow)s")
W_NORMAL = f"({n.DISK_WRITE_AWAIT_BASELINE_SECONDS} or {n.DISK_AWAIT_BASELINE_SECONDS})"
# (in the chain itself, fio's cliff too: as a condition recorded in another group, the live lab's write-back cliff, whose
# fio rate swings about half its peak, was named a provider cap for one of its evaluations in one of two runs)
WRITEBACK_CLIFF = (f"{n.DISK_UTIL_RATIO_IRATE} >= %(throttle_util_min_ratio)s and {ON_DEVICE} (\n"
                   f"  {FIO_WRITE_BW} < %(write_cliff_ratio)s * max_over_time({FIO_WRITE_BW}[%(writeCliffWindow)s])\n"
                   f"  and {FIO_RUNNING}\n)\n"
                   f"or {n.DISK_WRITE_BYTES_PER_SECOND} < %(write_cliff_ratio)s * {W_PEAK}\n"
                   f"  and {ON} {n.DISK_WRITE_IOPS} >= %(throttle_min_iops)s\n"
                   f"  and {ON} {n.DISK_UTIL_RATIO} >= %(throttle_util_min_ratio)s\n"
                   f"  and {ON} {n.DISK_WRITE_AWAIT_SECONDS} >= {ON} %(cause_slow_await_factor)s * {W_NORMAL}\n"
                   f"  and {LOCAL}")
# ... and a ceiling within writeCliffWindow of fio's cliff (recorded in the guards group; an evaluation late at most),
# the device still writing, is the cliff's: the cache's backlog drains at the device's rate after the writer stopped,
# or while fio's rate swings back over half its peak (the lab's capture, stopped 30 s after its cliff's alert, had its
# drain at the 2 MiB/s cap named a provider cap). The ceiling recorded in this evaluation, as provider_cap reads it:
# the cliff yields to no cap on a scrape one group saw and the other did not
WRITEBACK_DRAIN = (f"{n.DISK_CAUSE_CEILING}\n"
                   f"and {ON} {n.DISK_WRITE_IOPS} >= %(throttle_min_iops)s\n"
                   f"and {ON_DEVICE} max_over_time({n.FIO_WRITE_CLIFF_BYTES_PER_SECOND}[%(writeCliffWindow)s])")

# slow at no more than the load the device carried at its normal latency in the last hour (the mean of its busy minutes
# at normal await): the queue the application keeps is the same, completions fall because each takes longer; and fewer
# completions than then: the same IOPS at a higher await is more demand meeting a ceiling at the level the device
# carried (a capture's overload on a capped volume), named a cap once the ceiling is held, never a neighbour. (IOPS under
# that line are under the asked one too: the load floor filters the IOPS mean only. The IOPS compare on every label:
# both are the device's own records, and a comparison on (...) would keep only those)
NORMAL_IOPS_LOADED = f"({n.DISK_NORMAL_IOPS_MEAN} >= %(throttle_min_iops)s)"
FEWER_COMPLETIONS = f"{n.DISK_IOPS} < (1 - %(cause_demand_tolerance)s) * {NORMAL_IOPS_LOADED}"
DEMAND_HELD = (f"{FEWER_COMPLETIONS}\n"
               f"and {ON} {n.DISK_BYTES_PER_SECOND} <= {ON} (1 + %(cause_demand_tolerance)s) * {n.DISK_NORMAL_BYTES_PER_SECOND_MEAN}\n"
               # loaded throughout the rate window, as the reference minutes are: a load that just began from idle
               # has its rate diluted by the idle scrapes while its queue already waits (a capture's overload
               # read as a neighbour for its first 30 s)
               f"and {ON} min_over_time({n.DISK_IOPS_IRATE}[%(rateWindow)s]) >= %(throttle_min_iops)s")

# the application waits far longer than the device takes (fio's clat against the device's await), or the CPU is starved
# (CPU pressure, steal) while the device serves a light load at its normal latency, in every scrape of the rate window:
# a load's first scrapes after idle ones read as light in the window's averages (the lab's capped disks, starting
# beside a busy CPU, were named so for an evaluation; cause_scenarios.py's k11)
CLAT = f"{ON_DEVICE} group_left () {n.FIO_CLAT_P50_SECONDS}"
CPU_STARVED = f"({n.CPU_PRESSURE_RATIO} >= %(cause_cpu_pressure_ratio)s or {n.CPU_STEAL_RATIO} >= %(cause_steal_ratio)s)"
# fio's route only where the device is not busy enough for a ceiling (the throttling checks' util, in the last scrape:
# the rate window's lags a load that just began at a cap): a queue held above a saturated device (a cgroup's I/O
# throttle in the guest, fio's own queue at a cap) also waits far longer than the device's await, and that is the
# ceiling's story (an offline capture of a capped lab disk, fio asking twice its cap: fio's median 600 ms, r_await
# 130 ms, util 100 %)
# (in the chain itself, not a condition of its own: as a record, the report of a capture's overload on a capped disk
# also named a wait above the disk, which the test inline does not; the offline report's rules read a record that
# stopped for up to two grid steps after, having no staleness markers)
WAIT_ABOVE_DISK = (f"{n.DISK_IOPS}\nand {ON} (\n"
                   f"  %(cause_wait_factor)s * {n.DISK_AWAIT_SECONDS} < {CLAT}\n"
                   f"  and %(cause_wait_min_seconds)s + {n.DISK_AWAIT_SECONDS} < {CLAT}\n"
                   f"  and {ON} {n.DISK_UTIL_RATIO_IRATE} < %(throttle_util_min_ratio)s\n"
                   f"  or min_over_time({n.DISK_IOPS_IRATE}[%(rateWindow)s]) >= %(throttle_min_iops)s\n"
                   f"    and {ON} max_over_time({n.DISK_UTIL_RATIO_IRATE}[%(rateWindow)s]) < %(cause_idle_util_ratio)s\n"
                   f"    unless {ON} {SLOW}\n"
                   f"    and {ON_HOST} {CPU_STARVED}\n)")

# What a cause tests over every device, recorded before the chain in a group of its own (absent where it fails): a rule
# costs the series its selectors touch, so the chain, which runs in order in one group, then reads a fleet's few
# devices that pass. Read an evaluation late at most, as the chain reads the ceilings; the slow episode and the
# precedence stay in the chain, on the same evaluation. Only the noisy neighbour's demand test so far: the write-back
# cliff and the wait tests, recorded so, misnamed live and offline episodes (WRITEBACK_CLIFF, WAIT_ABOVE_DISK)
# (cause, what it tests)
CONDITION_TESTS = [
    # fewer completions than at the normal latency, at no more demand (the chain adds: slow)
    ("noisy_neighbour", DEMAND_HELD),
    # the host's summed rate held while the volume's share of it moved (fioscope_mixin.instance_limit)
    ("instance_limit", il.CONDITION),
]

CONDITIONS = {
    # or the stall FioscopeDiskStalled pages (its collapse: a few completions a second, each waiting seconds): the page
    # and the cause name one episode alike (a collapse's flat trickle read as a ceiling was the provider's cap)
    "stall": STALL,
    "writeback_cliff": f"{WRITEBACK_CLIFF}\nor {WRITEBACK_DRAIN}",
    # the ceiling recorded once (n.DISK_CAUSE_CEILING, just before the causes): the most costly test of the group, which
    # both read
    "instance_limit": il.cause(SLOW, CONDITION),
    # where the provider's counters exist they decide (fioscope_mixin.instance_limit)
    "provider_cap": il.provider_cap(f"{n.DISK_CAUSE_CEILING}\nunless {LOCAL}"),
    "device_max": f"{n.DISK_CAUSE_CEILING}\nand {LOCAL}",
    # the condition is recorded in a group of its own, read as of its last evaluation: its fewer completions checked
    # again against this evaluation's rate, the one the slow test's await comes with (a light load a tenth under its
    # normal, then a capped load's first slow scrape: named a neighbour for one evaluation, the lab's 15 s envelope)
    "noisy_neighbour": f'{SLOW}\nand {ON} {CONDITION}{{cause="noisy_neighbour"}}\nand {ON} {FEWER_COMPLETIONS}',
    "wait_above_disk": WAIT_ABOVE_DISK,
}


def cause_records() -> list[Record]:
    slow = Record(SLOW, (f"{n.DISK_AWAIT_SECONDS} / {n.DISK_AWAIT_BASELINE_SECONDS} >= %(cause_slow_await_factor)s\n"
                         f"and {ON} {n.DISK_IOPS} >= %(throttle_min_iops)s"))
    causes = []
    for cause, _ in CAUSES:
        expr = CONDITIONS[cause]
        if higher := _higher(cause):
            expr = f"({expr})\nunless {ON} {CAUSE}{{cause=~\"{higher}\"}}\nunless {ON} {n.DISK_NEAR_STALL}"
        causes.append(Record(CAUSE, _unit(expr), labels=(("cause", cause),)))
        if cause == "stall":  # recorded once, after the stall it reads: every later cause reads it
            causes.append(Record(n.DISK_NEAR_STALL, _unit(NEAR_STALL)))
    return [slow, Record(n.DISK_CAUSE_CEILING, _unit(CEILING)), *causes]


# the stall and the wait test's inputs (host-level, fio's), read by the chain an evaluation late at most, as the conditions
INPUTS = [
    Record(n.DISK_STALL_IN_FLIGHT, STALLED),
    # PSI "some": the share of time at least one task waited for a CPU, or for I/O (node_exporter's pressure collector)
    Record(n.CPU_PRESSURE_RATIO, "rate(node_pressure_cpu_waiting_seconds_total{%(nodeSelector)s}[%(rateWindow)s])"),
    Record(n.IO_PRESSURE_RATIO, "rate(node_pressure_io_waiting_seconds_total{%(nodeSelector)s}[%(rateWindow)s])"),
    # the median completion latency of the fio jobs running on a device (the slowest direction)
    Record(n.FIO_CLAT_P50_SECONDS, ("max by (%(clusterLabels)shost, device) (\n"
                                    '  fio_run_latency_seconds{%(fioSelector)s,stage="clat",quantile="0.5",ddir=~"read|write"}\n'
                                    f"  and {FIO_RUNNING}\n)")),
]


def condition_records() -> list[Record]:
    return [Record(CONDITION, _unit(test), labels=(("cause", cause),)) for cause, test in CONDITION_TESTS]


# the load the device carried at its normal latency: a minute's averages, once a minute, for minutes loaded throughout (an
# idle minute, or one in which a load started or stopped, would lower the mean: the lab's victim got 163 IO/s recorded
# for the minute its 1,000 IO/s began, and its neighbour's episode at 540 IO/s no longer read as fewer completions)
# in which the device was never slow (the noisy-neighbour test's reference)
NORMAL_DEMAND = [
    Record(rec, f"avg_over_time({series}[%(baselineInterval)s])\n"
                f"and {ON} min_over_time({n.DISK_IOPS}[%(baselineInterval)s]) >= %(throttle_min_iops)s\n"
                f"unless {ON} max_over_time({SLOW}[%(baselineInterval)s])")
    for rec, series in ((n.DISK_NORMAL_IOPS, n.DISK_IOPS), (n.DISK_NORMAL_BYTES_PER_SECOND, n.DISK_BYTES_PER_SECOND))
] + [
    # their means over the lookback, once a minute as they change (every 15 s in the noisy-neighbour test, an hour of
    # minutes of every device cost what a rule over every device does, twice)
    Record(mean, f"avg_over_time({rec}[%(cause_demand_lookback)s])")
    for mean, rec in ((n.DISK_NORMAL_IOPS_MEAN, n.DISK_NORMAL_IOPS), (n.DISK_NORMAL_BYTES_PER_SECOND_MEAN, n.DISK_NORMAL_BYTES_PER_SECOND))
]


def cause_groups(s: dict) -> list[dict]:
    """The cause groups, after the iostat group whose records they read (an interval late at most)."""
    p = cause_params(s)

    def group(name: str, records: list[Record], **interval: str) -> dict:
        return {"name": name, **interval, "rules": [r.render(p) for r in records]}

    # the inputs and the conditions in groups of their own, listed before the chain (the order promtool's tests evaluate
    # them in; Prometheus runs groups in parallel): the stall, PSI and fio's latency; the noisy-neighbour test
    return [group("fioscope-cause-inputs", INPUTS + il.INPUTS),
            group("fioscope-cause-conditions", condition_records()),
            group("fioscope-cause", cause_records()),
            group("fioscope-cause-demand", NORMAL_DEMAND, interval=p["baselineInterval"])]


# ---------------------------------------------------------------------------- alerts
def _of_cause(cause: str, value: str = CAUSE) -> str:
    """``value`` of the devices whose episode is ``cause``, with the cause label."""
    if value == CAUSE:
        return f'{CAUSE}{{cause="{cause}"}}'
    return f'{value} * {ON} group_left (cause) {CAUSE}{{cause="{cause}"}}'


def host_value(metric: str, humanize: str = "humanizePercentage") -> str:
    """A host-level series (avg-cpu, PSI) of the alert's instance, inside an annotation template."""
    series = metric + "{%(clusterMatcher)sinstance='%%s'}"
    return ("{{ with printf \"" + series + "\" %(clusterArg)s$labels.instance | query }}{{ . | first | value | " + humanize
            + " }}{{ else }}unknown{{ end }}")


def fio_clat() -> str:
    """', fio's median completion latency 21ms' where a fio job runs on the alert's device."""
    series = n.FIO_CLAT_P50_SECONDS + "{%(clusterMatcher)shost='%%s',device='%%s'}"
    return ("{{ with printf \"" + series + "\" %(clusterArg)s$labels.host $labels.device | query }}, fio's median completion latency "
            "{{ . | first | value | humanizeDuration }}{{ end }}")


def _dur(metric: str) -> str:
    return disk_value(metric, "humanizeDuration")


def _pct(metric: str) -> str:
    return disk_value(metric, "humanizePercentage")


TIMES = "{{ . | first | value | printf \"%%.1f\" }}x"  # a ratio as "6.3x"
AWAIT, NORMAL, UTIL = _dur(n.DISK_AWAIT_SECONDS), _dur(n.DISK_AWAIT_BASELINE_SECONDS), _pct(n.DISK_UTIL_RATIO)
AWAIT_TEXT = ("await " + AWAIT + device_query(device_series(n.DISK_SLOW_AWAIT_RATIO)) + ", " + TIMES + "{{ else }} against{{ end }}"
              " the device's normal of " + NORMAL)
LOAD_TEXT = "at " + disk_value(n.DISK_IOPS) + " IO/s and " + disk_value(n.DISK_BYTES_PER_SECOND, "humanize1024") + "B/s"
WHERE = "{{ $labels.device }} on " + HOST


def _desc(what: str, evidence: str, advice: str) -> str:
    return f"{WHERE}: slow because of {what}: {evidence}. {advice}"


# a write-back cliff pages on its own only where no other alert pages for it: at a provider's ceiling
# FioscopeDiskThrottled* page, and fio's own write cliff is FioscopeWriteThroughputCliff's (within writeCliffWindow of
# it: the drain after fio stopped is the same episode, paged once)
AT_PROVIDER_CEILING = f"({BY_DEVICE} ({n.DISK_CEILING}) unless {LOCAL})"
FIO_CLIFF = f"max_over_time({n.FIO_WRITE_CLIFF_BYTES_PER_SECOND}[%(writeCliffWindow)s])"
CLIFF = _of_cause("writeback_cliff")
CLIFF_PAGES = f"{CLIFF}\nunless {ON} {AT_PROVIDER_CEILING}\nunless {ON_DEVICE} {FIO_CLIFF}"
CLIFF_PAGED_ELSEWHERE = f"{CLIFF} and {ON} {AT_PROVIDER_CEILING}\nor {CLIFF} and {ON_DEVICE} {FIO_CLIFF}"


# the write rate of the fio jobs running on the alert's device (host and device: fio's series have another instance)
FIO_WRITE_RATE = "fio_bandwidth_bytes_per_second{%(clusterMatcher)sddir='write',host='%%s',device='%%s'}"


def _fio_writing(rate: str) -> str:
    """``rate`` (fio's write rate, or a function of it) summed over the fio jobs running on the device."""
    return f"sum({rate} and on (%(clusterLabels)shost, device, jobname) fio_run_running == 1)"


FIO_WRITING = _fio_writing(FIO_WRITE_RATE)
FIO_WRITING_PEAK = _fio_writing(f"max_over_time({FIO_WRITE_RATE}[%(writeCliffWindow)s])")


def _fio_value(expr: str) -> str:
    return "{{ with printf \"" + expr + "\" %(clusterArg)s$labels.host $labels.device | query }}"


# where a fio job writes to the device, its own rate and peak: the page cache's cliff is fio's (the device may write
# at one steady rate throughout, the flusher's)
FIO_WRITE_TEXT = (_fio_value(FIO_WRITING) + "; the fio job writes at {{ . | first | value | humanize1024 }}B/s"
                  + _fio_value(FIO_WRITING_PEAK) + " (its peak in the last %(writeCliffWindow)s: "
                  "{{ . | first | value | humanize1024 }}B/s){{ end }}{{ end }}")


def cause_alerts() -> list[Alert]:
    """An alert per cause; each summary names its cause, each description gives the evidence."""
    cliff = _desc(
        "a write-back cliff", "the write rate is " + disk_value(n.DISK_WRITE_BYTES_PER_SECOND, "humanize1024")
        + "B/s on the device (its peak in the last %(writeCliffWindow)s: "
        + disk_value(n.DISK_WRITE_BYTES_PER_SECOND, "humanize1024", around="max_over_time(%s[%%(writeCliffWindow)s])")
        + "B/s)" + FIO_WRITE_TEXT + ", and it or the fio job's own write rate fell below %(write_cliff_ratio)s x its peak; "
        "w_await " + _dur(n.DISK_WRITE_AWAIT_SECONDS) + ", util " + UTIL,
        "A cache (the page cache, the device's write cache) absorbed the first writes; the rate now is what the disk "
        "sustains. Size for the sustained rate, not the burst.")
    burst = device_query(device_series(n.DISK_STEP_DOWN_RATIO))
    return [
        # info: FioscopeDiskStalled (critical) pages for the same stall; this one names it as the episode's cause
        Alert(n.ALERT_DISK_CAUSE_STALL, "info", _of_cause("stall", f"({STALL})"), "cause_stall",
              "Disk stalled: requests in flight, almost none completing",
              _desc("a stall", "{{ $value | humanize }} requests in flight on average over %(window)s, "
                    + disk_value(n.DISK_IOPS, 'printf "%%.2f"') + " completions/s (util " + UTIL + " and aqu-sz under-report a stall)",
                    "Look at the device and its path: dmesg, the provider's volume status, a cap of a few IOPS. "
                    "Informational: FioscopeDiskStalled pages for the stall."), "disk"),
        Alert(n.ALERT_DISK_CAUSE_WRITEBACK_CLIFF, "warning", CLIFF_PAGES, "cause",
              "Disk slow: write-back cliff (a write cache filled)", cliff, "disk"),
        Alert(n.ALERT_DISK_CAUSE_WRITEBACK_CLIFF, "info", CLIFF_PAGED_ELSEWHERE, "cause",
              "Disk slow: write-back cliff (a write cache filled)",
              cliff + " Informational here: the cap's or fio's write-cliff alert pages.", "disk"),
        Alert(n.ALERT_DISK_CAUSE_PROVIDER_CAP, "info", _of_cause("provider_cap"), "cause_info",
              "Disk slow: at its provider's cap",
              WHERE + ": slow because of " + burst + "burst credits exhausted (IOPS fell " + TIMES + " to the volume's baseline)"
              "{{ else }}the provider's cap on the volume{{ end }}: " + AWAIT_TEXT + ", " + LOAD_TEXT
              + ". Informational: FioscopeDiskThrottled* page for the cap; raise the cap or resize the volume.", "disk"),
        Alert(n.ALERT_DISK_CAUSE_DEVICE_MAX, "info", _of_cause("device_max"), "cause_info",
              "Disk slow: at the device's own maximum",
              _desc("the device's own maximum (local hardware)", AWAIT_TEXT + ", " + LOAD_TEXT,
                    "Informational: the device delivers what it can; spread the load or add faster devices."), "disk"),
        Alert(n.ALERT_DISK_CAUSE_NOISY_NEIGHBOUR, "warning", _of_cause("noisy_neighbour", SLOW), "cause",
              "Disk slow: a noisy neighbour or the shared backend",
              _desc("a noisy neighbour or the shared backend",
                    "await " + AWAIT + ", {{ $value | printf \"%%.1f\" }}x the device's normal of " + NORMAL + ", " + LOAD_TEXT
                    + ", no more than the "
                    + disk_value(n.DISK_NORMAL_IOPS, around="avg_over_time(%s[%%(cause_demand_lookback)s])")
                    + " IO/s it carried on average at its normal latency in the last %(cause_demand_lookback)s (queue "
                    + disk_value(n.DISK_QUEUE_SIZE) + "); no ceiling",
                    "The device's own load did not grow: find who else uses the backend (other volumes of the host, the hypervisor, "
                    "the array), or move the workload."), "disk"),
        Alert(n.ALERT_DISK_CAUSE_WAIT_ABOVE_DISK, "warning", _of_cause("wait_above_disk"), "cause",
              "Slow I/O, but not the disk: the wait is above it",
              _desc("a wait above the disk",
                    "the device answers in " + AWAIT + " (its normal " + NORMAL + ", util " + UTIL + ")" + fio_clat()
                    + "; CPU pressure " + host_value(n.CPU_PRESSURE_RATIO) + ", steal " + host_value(n.CPU_STEAL_RATIO),
                    "The disk is not the problem: look at the CPU (steal, a busy neighbour VM, CPU limits), the filesystem and "
                    "the application."),
              "disk"),
    ]


def cause_alert_group(s: dict, interval: str | None) -> dict:
    """The cause alerts' group, evaluated as often as the other alerts (``interval``: theirs, None for the default)."""
    p = cause_params(s)
    group: dict = {"name": "fioscope-cause-alerts"}
    if interval:
        group["interval"] = interval
    group["rules"] = [a.render(s, p) for a in cause_alerts() + il.alerts()]
    return group


