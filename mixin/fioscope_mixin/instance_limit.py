"""The machine's own disk limit, and the provider's own word (issue 55 items 1 and 3; docs/runbook.md
"FioscopeInstanceDiskLimit").

Every cloud caps a machine's total disk traffic as well as each volume (EC2's per-instance EBS IOPS and bandwidth,
Azure's VM uncached IOPS and MB/s, GCP's per-VM persistent-disk limits). Its signature: a host's busy provider volumes
whose *summed* per-scrape IOPS or bytes/s hold at one level while the share moves between them, each queueing above
its normal, none at a ceiling of its own. Each such volume's slow episode is ``cause="instance_limit"`` in
``fioscope:disk_slow_cause`` (ahead of provider_cap: the volume's own cap is not the story), one alert per host names
the machine's limit, and the per-volume throttling page stays silent for it.

Where the provider's own counters exist (the exporter's ``fioscope_ebs_*`` from the NVMe log page, the EBS CSI
driver's ``aws_ebs_csi_*``), they decide: the volume's time over its own limit growing is its cap, confirmed; the
instance's, the machine's limit; a device with counters and neither growing is no provider cap at all (a neighbour,
the backend or a wait above the disk, as the later causes say). The signature decides only where no counters exist.
Thresholds: ``thresholds.instance_limit`` in alerts/config.yaml.
"""

from __future__ import annotations

from fioscope_mixin import columns
from fioscope_mixin import names as n
from fioscope_mixin.promql import HOST, LOCAL
from fioscope_mixin.rule import ON, Alert, Record, fmt

SUM = n.HOST_VOLUMES_RATE_IRATE
HELD = n.HOST_VOLUMES_HELD_SUM
VOLUME_RATE = n.DISK_VOLUME_RATE_IRATE
HELD_SUM_BOUND = n.HOST_VOLUMES_HELD_RATE_BOUND
HELD_VOLUME_BOUND = n.DISK_VOLUME_HELD_RATE_BOUND
SHARE = n.DISK_VOLUME_SHARE_RANGE_RATIO
OVER = n.DISK_PROVIDER_OVER_LIMIT
BY_HOST = "(%(clusterLabels)shost, instance, job)"
ON_HOST_DEVICE = "on (%(clusterLabels)shost, device)"


def limit_params(s: dict) -> dict[str, str]:
    """thresholds.instance_limit as ``instance_limit_<key>`` (numbers as PromQL prints them), for params()."""
    p = {}
    for key, value in s["thresholds"]["instance_limit"].items():
        p[f"instance_limit_{key}"] = fmt(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)
    return p


def _volumes(series: str) -> str:
    """``series`` of the provider's volumes only: not local hardware, not a layer above another device (dm, md: its
    traffic is its parents' and would count twice)."""
    return f"({series}\n  unless {LOCAL}\n  unless {ON_HOST_DEVICE} fioscope_disk_parent_info{{%(fioSelector)s}})"


def _host_sum(rate: str) -> str:
    volumes = f'{VOLUME_RATE}{{rate="{rate}"}}'
    return (f"sum by {BY_HOST} ({volumes})\n"
            f"and on {BY_HOST} count by {BY_HOST} ({volumes}) >= %(instance_limit_min_volumes)s")


# the provider's counters of time over a limit, per device (the exporter's, joined on host and device; the CSI driver's,
# whose volume_id vol-0abc is node_exporter's serial vol0abc of the NVMe device): 1 while one grows by at least
# exceeded_min_ratio of the time, 0 while none does, absent where the guest reads no such counter
_EXPORTER = {"volume": "fioscope_ebs_exceeded_(iops|tp)_seconds_total",
             "instance": "fioscope_(ebs|ec2_instance_store)_ec2_exceeded_(iops|tp)_seconds_total"}
_CSI = {"volume": "aws_ebs_csi_exceeded_(iops|tp)_seconds_total",
        "instance": "aws_(ebs|ec2_instance_store)_csi_ec2_exceeded_(iops|tp)_seconds_total"}


def _over_limit(limit: str) -> Record:
    exporter = f'rate({{__name__=~"{_EXPORTER[limit]}",%(fioSelector)s}}[%(rateWindow)s])'
    csi = (f'max by (%(clusterLabels)sserial) (label_replace(rate({{__name__=~"{_CSI[limit]}"}}[%(rateWindow)s]), '
           '"serial", "vol$1", "volume_id", "vol-(.+)"))\n'
           f"  * on (%(clusterLabels)sserial) group_right () {columns.INFO_SERIES}{{%(nodeSelector)s}}")
    return Record(OVER, f"max by (%(clusterLabels)shost, device) (\n  {exporter}\n  or\n  {csi}\n)"
                        " > bool %(instance_limit_exceeded_min_ratio)s", labels=(("limit", limit),))


GROWING = {limit: f'{OVER}{{limit="{limit}"}} == 1' for limit in ("volume", "instance")}


def _held(rate: str) -> str:
    """The host's summed rate held over the any-workload window: enough scrapes, their spread within tolerance of the
    mean, and at the most the sum did lately (a plateau under an earlier, higher sum is demand that fell)."""
    s = f'{SUM}{{rate="{rate}"}}'
    mean = f"avg_over_time({s}[%(window)s])"
    return (f"{mean}\nand count_over_time({s}[%(window)s]) >= %(windowSamples)s\n"
            f"and max_over_time({s}[%(window)s]) - min_over_time({s}[%(window)s]) <= %(instance_limit_tolerance)s * {mean}\n"
            f"and {mean} >= (1 - %(instance_limit_tolerance)s) * max_over_time({s}[%(peakLookback)s])")


def _held_bound(series: str, rate: str, bound: str) -> str:
    """The most (or least) ``series`` was over the window its host's summed ``rate`` held (a sample where it held)."""
    return f'{bound}_over_time({series}{{rate="{rate}"}}[%(window)s])\n  and on {BY_HOST} {HELD}{{rate="{rate}"}}'


def _moved(bounds: str, rate: str) -> str:
    """How far a rate moved over the scrapes of every window within share_window where its host's sum held."""
    window = "%(instance_limit_share_window)s"
    return (f'(max_over_time({bounds}{{rate="{rate}",bound="max"}}[{window}])\n'
            f'   - ignoring (bound) min_over_time({bounds}{{rate="{rate}",bound="min"}}[{window}]))')


def _share_range(rate: str) -> str:
    """How far the volume's own rate moved while its host's sum held, as a share of the held sum, where it moved
    share_move_factor times as far as the sum did: the split moving, the moves cancelling in the total (volumes each at
    a cap of its own jitter independently, and their sum moves about as much as each). Not before the sum held: a
    load's first scrape (part of an interval) or the step up to the plateau is no move of the split."""
    moved = _moved(HELD_VOLUME_BOUND, rate)
    return (f"{moved}\n  / on {BY_HOST} group_left () {HELD}{{rate=\"{rate}\"}}\n"
            f"and {moved}\n  > on {BY_HOST} group_left () %(instance_limit_share_move_factor)s * "
            f"{_moved(HELD_SUM_BOUND, rate)}")


RATES = (("iops", n.DISK_BUSY_IOPS_IRATE), ("bytes", n.DISK_BUSY_BYTES_PER_SECOND_IRATE))

# recorded in the cause inputs' group, in this order (each reads the one before in the same evaluation)
INPUTS = [
    *(Record(VOLUME_RATE, _volumes(busy), labels=(("rate", rate),)) for rate, busy in RATES),
    *(Record(SUM, _host_sum(rate), labels=(("rate", rate),)) for rate, _ in RATES),
    *(Record(HELD, _held(rate), labels=(("rate", rate),)) for rate, _ in RATES),
    *(Record(bounds, _held_bound(series, rate, bound), labels=(("rate", rate), ("bound", bound)))
      for bounds, series in ((HELD_SUM_BOUND, SUM), (HELD_VOLUME_BOUND, VOLUME_RATE)) for rate, _ in RATES for bound in ("max", "min")),
    *(Record(SHARE, _share_range(rate), labels=(("rate", rate),)) for rate, _ in RATES),
    _over_limit("volume"),
    _over_limit("instance"),
]

# the cause's condition over every device (fioscope:disk_cause_condition{cause="instance_limit"}): a busy provider volume
# of a host whose sum held while the shares of at least min_volumes of its volumes moved by share_move_ratio of it, in
# the same rate (a volume whose own share has not moved that far yet is at the same limit: the machine's, all of them)
MOVED = f"{SHARE} >= %(instance_limit_share_move_ratio)s"
CONDITION = (_volumes(n.DISK_BUSY_IOPS_IRATE) + f"\nand on {BY_HOST} (count by {BY_HOST[:-1]}, rate) ({MOVED}) "
             ">= %(instance_limit_min_volumes)s)")


# a volume whose own rate moves twice as far as its host's held sum: a share of a limit, not a cap of its own (while the
# cause's test waits for the share to move share_move_ratio of the sum)
SHARE_OF_LIMIT = f"unless {ON} ({MOVED})"


def cause(slow: str, condition: str) -> str:
    """The chain's instance_limit: the signature where the device has no provider counters (and is slow), else the
    instance's counter growing while the device carries a load and its own volume's does not."""
    return (f'{slow}\nand {ON} {condition}{{cause="instance_limit"}}\nunless {ON_HOST_DEVICE} {OVER}\n'
            f"or {n.DISK_IOPS} >= %(throttle_min_iops)s\n  and {ON_HOST_DEVICE} {GROWING['instance']}\n"
            f"  unless {ON_HOST_DEVICE} {GROWING['volume']}")


def provider_cap(signature: str) -> str:
    """The chain's provider_cap: the ceiling's signature where the device has no provider counters, else its own
    volume's counter growing while it carries a load (whatever the ceiling's jitter)."""
    return (f"({signature})\nunless {ON_HOST_DEVICE} {OVER}\n{SHARE_OF_LIMIT}\n"
            f"or {n.DISK_IOPS} >= %(throttle_min_iops)s and {ON_HOST_DEVICE} {GROWING['volume']}")


# ---- the throttling pages (alerts.py): where counters exist they decide; the machine's limit is the host's alert
NO_COUNTERS = f"unless {ON_HOST_DEVICE} {OVER}"
# a volume of a host at its machine's limit (named within the page's span): the host's alert, not a page per volume
# (or whose share of its host's held sum moves)
AT_INSTANCE_LIMIT = (f'unless {ON} max_over_time({n.DISK_SLOW_CAUSE}{{cause="instance_limit"}}[%(fioPageSpan)s])\n'
                     + SHARE_OF_LIMIT)
# the volume's own counter growing: its cap, confirmed (value: its await, as the signature's page)
CONFIRMED = f"{n.DISK_AWAIT_SECONDS}\nand {ON_HOST_DEVICE} {GROWING['volume']}\nunless {LOCAL}"


def page(signature: str, confirmed_also: str = "") -> str:
    """A per-volume throttling page: ``signature`` where no counters exist and the host is not at its limit, or the
    volume's own counter growing (``confirmed_also``: a further condition of that)."""
    return f"(\n{signature}\n)\n{NO_COUNTERS}\n{AT_INSTANCE_LIMIT}\nor\n{CONFIRMED}{confirmed_also}"


# ---- the alert: one per host, the volumes named by the cause record and the summed figure its value
_VOLUMES = ("{{ range $i, $v := printf \"" + n.DISK_SLOW_CAUSE + "{%(clusterMatcher)sinstance='%%s',cause='instance_limit'}\" "
            "%(clusterArg)s$labels.instance | query | sortByLabel \"device\" }}{{ if $i }}, {{ end }}{{ $v.Labels.device }}{{ end }}")
NAMED = f'{n.DISK_SLOW_CAUSE}{{cause="instance_limit"}}'
_BYTES = ("{{ with printf \"sum(" + n.DISK_BYTES_PER_SECOND + " and on (instance, job, device) " + n.DISK_SLOW_CAUSE
          + "{%(clusterMatcher)sinstance='%%s',cause='instance_limit'})\" %(clusterArg)s$labels.instance | query }}"
          "{{ . | first | value | humanize1024 }}B/s{{ else }}unknown{{ end }}")
# the summed 1m rates of the volumes named (a held sum: its mean)
ALERT_EXPR = f"sum by {BY_HOST} ({n.DISK_IOPS} and {ON} {NAMED})"


def alerts() -> list[Alert]:
    return [Alert(
        n.ALERT_INSTANCE_DISK_LIMIT, "warning", ALERT_EXPR, "instance_limit",
        "Disks slow: the machine's own disk limit, shared by its volumes",
        "Volumes " + _VOLUMES + " on " + HOST + " are held at the machine's limit: together {{ $value | humanize }} IO/s and "
        + _BYTES + " (their sum held within %(instance_limit_tolerance)s while the "
        "share moves between them; each queueing above its normal; or the provider's counter of time over the instance's "
        "limit growing). Raising a volume's IOPS will not help: a larger instance, fewer busy volumes on this machine, or "
        "the load spread over machines.", "disk", keep_firing=True)]
