"""The PromQL that the alerts, the cause records and the machine's-limit rules share: a disk alert's annotation helpers
(its device's other series, its host), the ceiling tests (at the recent peak, held, after a step-down) and the selectors
of local hardware and fio's load. Above the recording rules, below every module that builds alerts or causes on them:
``alerts``, ``cause`` and ``instance_limit`` import it, and it imports none of them."""

from __future__ import annotations

from fioscope_mixin import names as n
from fioscope_mixin.recording import BUSY, PAIRS
from fioscope_mixin.rule import ON


def device_series(metric: str) -> str:
    """``metric`` of the alert's device, its instance and device left as '%%s' for the template's printf."""
    return metric + "{%(clusterMatcher)sinstance='%%s',device='%%s'}"


def device_query(series: str) -> str:
    """Opens ``{{ with <series of the alert's device> | query }}`` (``series`` from device_series)."""
    return "{{ with printf \"" + series + "\" %(clusterArg)s$labels.instance $labels.device | query }}"


def disk_value(metric: str, humanize: str = "humanize", around: str = "%s") -> str:
    """A value of another series of the alert's device, inside an annotation template (``around``: a function of it)."""
    return device_query(around % device_series(metric)) + "{{ . | first | value | " + humanize + " }}{{ else }}unknown{{ end }}"


# where a disk alert was measured: the host (both scrape jobs' shared identity), else the scrape address
HOST = "{{ with $labels.host }}{{ . }}{{ else }}{{ $labels.instance }}{{ end }}"
FSYNC_RUN = 'fio_run_latency_seconds{%(fioSelector)s,ddir="sync",stage="lat",quantile="0.99"}'


def ceilings_text(window: str) -> str:
    """'reads flat at ~700/s, writes flat at ~300/s (at 98 % of the declared 1000 IOPS)' or, where both caps bind in
    turn, 'reads at ~3k/s, read throughput at ~125MiB/s (...)' from the recorded ceilings."""
    each = ("{{ if $i }}, {{ end }}{{ $c.Labels.dimension }} {{ if eq $c.Labels.shape \"flat\" }}flat {{ end }}at ~"
            "{{ if eq $c.Labels.unit \"B/s\" }}{{ $c.Value | humanize1024 }}{{ else }}{{ $c.Value | humanize }}{{ end }}{{ $c.Labels.unit }}")
    series = "fioscope:disk_ceiling{window='%s',%%(clusterMatcher)sinstance='%%%%s',device='%%%%s'}"
    args = "%(clusterArg)s$labels.instance $labels.device"
    query, query_args = series % window, args
    if window == "short":  # the any-workload window's ceilings where it has them: a short window may hold one phase
        query, query_args = f"{series % 'long'} or on (instance, device) {query}", f"{args} {args}"
    ceilings = ("{{ range $i, $c := printf \"" + query + "\" " + query_args + " | query | sortByLabel \"dimension\" }}"
                + each + "{{ end }}")
    declared = ("{{ with printf \"fioscope:disk_declared_limit_ratio{%(clusterMatcher)sinstance='%%s',device='%%s'}\" %(clusterArg)s$labels.instance $labels.device"
                " | query }}{{ range $i, $d := . }}{{ if $i }}, {{ end }}at {{ $d.Value | humanizePercentage }} of the declared "
                "{{ $d.Labels.limit }}{{ end }}{{ else }}no limit declared{{ end }}")
    return ceilings + " (" + declared + ")"


def direction_awaits() -> str:
    """'; r_await 61ms against a normal of 170us' for each direction with requests: the figures the slow test judged."""
    text = ""
    for column, await_metric, normal in (("r_await", n.DISK_READ_AWAIT_SECONDS, n.DISK_READ_AWAIT_BASELINE_SECONDS),
                                         ("w_await", n.DISK_WRITE_AWAIT_SECONDS, n.DISK_WRITE_AWAIT_BASELINE_SECONDS)):
        text += (device_query(device_series(await_metric) + " > 0") + "; " + column
                 + " {{ . | first | value | humanizeDuration }}"
                 + device_query(device_series(normal))
                 + " against a normal of {{ . | first | value | humanizeDuration }}{{ else }}, no normal known yet{{ end }}{{ end }}")
    return text


def throttle_desc(window: str, what: str = "is throttled at its provider's cap") -> str:
    return ("{{ $labels.device }} on " + HOST + f" {what}: " + ceilings_text(window)
            + "; util " + disk_value(n.DISK_UTIL_RATIO, "humanizePercentage")
            + ", queue " + disk_value(n.DISK_QUEUE_SIZE) + ", await {{ $value | humanizeDuration }}"
            " (the device's normal is " + disk_value(n.DISK_AWAIT_BASELINE_SECONDS, "humanizeDuration") + direction_awaits() + ").")


# a stalled device is the stall alert's page, not a ceiling's (it is "flat" at next to nothing)
NOT_STALLED = f"unless {ON} {n.DISK_STALLED_IN_FLIGHT}"


def at_envelope(window: str) -> str:
    """The device sits at its envelope in ``window`` and is the lowest layer that does (one page per cap). Its await is
    read where the device is saturated, which every ceiling requires: the alerts evaluate every 5 s, and the await of
    every device was most of their cost."""
    return (f'max without (ddir) ({n.DISK_SATURATED_AWAIT_SECONDS}{{ddir="all"}})\nand {ON} fioscope:disk_ceiling{{window="{window}"}}\n'
            f'unless on (%(clusterLabels)shost, device) fioscope:disk_ceiling_below{{window="{window}"}}\n{NOT_STALLED}')


# local hardware (fioscope:disk_physical_device): its envelope is its own maximum, not a provider's cap
LOCAL = "on (%(clusterLabels)shost, device) fioscope:disk_physical_device"


def throttled(window: str) -> str:
    """At the envelope, on a provider's volume."""
    return at_envelope(window) + "\nunless " + LOCAL


# a running fio job loads this device (its target's device, or a layer below it): joined on host and device
FIO_ON_DEVICE = "on (%(clusterLabels)shost, device) fioscope:disk_fio_load"
# ... or loaded it within disk_keep_firing_for (at least the any-workload window, which still holds fio's load): the fio
# alert, bridged that long after fio's end, pages the episode. A write test's page-cache backlog drains at the cap after
# fio stopped (the lab's 2 MiB/s volume: ~110 s), and past the window alone that paged FioscopeDiskThrottled as well
FIO_PAGE_SPAN = "on (%(clusterLabels)shost, device) max_over_time(fioscope:disk_fio_load[%(fioPageSpan)s])"


def _at_recent_peak(ddir: str, iops: str, bytes_: str, window: str = "%(window)s") -> str:
    """A ceiling is the most the device has done lately: the window's peak within the envelope's tolerance of the peak
    over peakLookback, of the IOPS or of the bytes/s (per scrape). A plateau under an earlier, higher rate is demand
    that fell, a neighbour that took a share of a backend, or a step-down (the burst alert's page). The window's peak
    is of the busy per-scrape rates (a ceiling holds only where every scrape of its window was busy); the lookback's
    is of every scrape, busy or not: a victim that did 1,000 IOPS at 30 % util before a neighbour came and now sits at
    420 at full util is held under no cap of 420 (read over the busy scrapes only, that plateau was its peak, and a
    capture named the provider's cap for a minute of the neighbour's episode). The lookback's peak is recorded once
    (fioscope:disk_recent_peak, the guards group): the cause and alert rules read it 18 times."""
    return "\n  or ".join(
        f"max_over_time({BUSY[rate]}[{window}]) >= {ON} (1 - %(throttle_envelope_tolerance)s) * "
        f'{n.DISK_RECENT_PEAK}{{ddir="{ddir}",rate="{name}"}}'
        for name, rate in (("iops", iops), ("bytes", bytes_)))


def _direction_ceiling(iops_dim: str, bytes_dim: str, window_name: str = "long") -> str:
    return f'{n.DISK_CEILING}{{window="{window_name}",dimension=~"{iops_dim}|{bytes_dim}"}}'


def _stepped_down(ddir: str) -> str:
    return f'{n.DISK_STEP_DOWN_RATIO}{{ddir="{ddir}"}}'


# Each ceiling judged in its own direction (reads, writes, or all of them: as it is named): at its direction's recent
# peak and not stepped down there. The other direction's rates do not enter: an independent client's reads that
# fall 4x for a minute are neither a plateau under an earlier peak nor a step-down of a flat write cap.
def ceiling_at_peak(window_name: str = "long", window: str = "%(window)s", ceiling: str = "%s") -> str:
    """Some direction's ceiling of ``window_name`` (``ceiling``: a function of its series) at its recent peak, or the
    device's total at its own, and not stepped down there. The total: under one r+w cap whose read share drifts, the
    reads fall below the most they did a few minutes ago while the total holds the cap (a read ceiling named, the
    total's not, since a direction explains it): the page resolved minutes into such caps (issue 53, the shared and
    paused families: 35 % of the episode in one firing)."""
    _, _, _, all_iops, all_bytes = PAIRS[-1]
    total = _at_recent_peak("all", all_iops, all_bytes, window)
    return "\nor ".join(
        f"(\n  {ceiling % _direction_ceiling(iops_dim, bytes_dim, window_name)}\n  and {ON} (\n  {_at_recent_peak(ddir, iops, bytes_, window)}"
        + ("" if ddir == "all" else f"\n  or {total}") + "\n  )\n"
        f"  unless {ON} {_stepped_down(ddir)}\n)"
        for ddir, iops_dim, bytes_dim, iops, bytes_ in PAIRS)


CEILING_AT_PEAK = ceiling_at_peak()

# the page agrees with the cause record: a provider's volume named provider_cap in every evaluation of page_with_cause
# pages (the cause's ceiling needs no held test: the page's, tighter against demand noise, must not leave a cap the
# cause names unpaged). Not a layer above a capped disk, a stepped-down device (the burst alert's page), a stall, nor
# local hardware (the cause is then device_max)
CAUSE_HELD = (f'max without (ddir) ({n.DISK_SATURATED_AWAIT_SECONDS}{{ddir="all"}})\n'
              f'and {ON} count_over_time({n.DISK_SLOW_CAUSE}{{cause="provider_cap"}}[%(causePageSpan)s]) >= %(causePageSamples)s\n'
              'unless on (%(clusterLabels)shost, device) fioscope:disk_ceiling_below{window="long"}\n'
              f"unless {ON} {n.DISK_STEP_DOWN_RATIO}\n{NOT_STALLED}\nunless {LOCAL}")
# a bandwidth ceiling's dimensions (bytes/s flat while the IOPS swing)
BANDWIDTH_DIMENSIONS = "|".join(bytes_dim for _, _, bytes_dim, _, _ in PAIRS)


# one series per device of node_exporter's labels (a device's ceilings are one per dimension)
BY_DEVICE = "max by (%(clusterLabels)shost, instance, job, device)"


def ceiling_held(window_name: str, span: str = "%(cause_hold)s", samples: str = "%(cause_min_samples)s") -> str:
    """Some ceiling of ``window_name`` (whichever its dimension) recorded in at least ``samples`` evaluations within
    ``span``."""
    return f"{BY_DEVICE} (count_over_time({n.DISK_CEILING_COUNT}{{window=\"{window_name}\"}}[{span}]) >= {samples})"


# Under fio the same tests in fio's window, which holds two scrapes at 15 s: a victim's share of a backend that a
# neighbour took drifts, and two of its scrapes are flat now and then (the lab's noisy-neighbour capture paged
# "throttled at ~320 reads/s" and named the neighbour in one report). So the ceiling is at the most the device did
# lately; and once fio has loaded the device for all of peak_lookback (the plateau is then its own peak), held in
# every evaluation of the any-workload window, as the provider-cap cause judges it. A fio job's first minutes page on
# fio's window (flagged within 60 s); a cap held since then never lapses at that switch.
FIO_CEILING_AT_PEAK = ceiling_at_peak("short", "%(fioWindow)s")
FIO_CEILING_HELD = (f"{ceiling_held('short', '%(window)s', '%(windowSamples)s')}\n"
                    f"  or {n.DISK_FIO_LOAD} unless on (%(clusterLabels)shost, device) {n.DISK_FIO_LOAD} offset %(peakLookback)s")

# a ceiling whose own direction stepped down (IOPS and bytes/s both fell: a request size that changes is none); one
# alert per device whichever directions did, value the largest IOPS ratio
CEILING_AFTER_STEP_DOWN = "max without (ddir) (\n  " + "\n  or ".join(
    f"{_stepped_down(ddir)} and {ON} {_direction_ceiling(iops_dim, bytes_dim)}"
    for ddir, iops_dim, bytes_dim, _, _ in PAIRS) + "\n)"

ETCD_HIST = ("histogram_quantile(0.99, sum by (%%(clusterLabels)sinstance, job, le) "
             "(rate(etcd_disk_%s_duration_seconds_bucket{%%(etcdSelector)s}[%%(etcdWindow)s])))")
