"""The alerts, as data: name, severity, PromQL template, `for:` key, summary, description, dashboard.
Templates take their thresholds, windows and selectors from alerts/config.yaml (see mixin.params)."""

from __future__ import annotations

from mixin import Alert, fmt, params


def disk_value(metric: str, humanize: str = "humanize") -> str:
    """A value of another series of the alert's device, inside an annotation template."""
    return ("{{ with printf \"%s{instance='%%%%s',device='%%%%s'}\" $labels.instance $labels.device | query }}"
            "{{ . | first | value | %s }}{{ else }}unknown{{ end }}") % (metric, humanize)


def signature(window: str) -> str:
    """The throttling signature over a flatness window; await first: it is the alert's $value."""
    return (
        "(fioscope:disk_await_seconds >= %(throttle_await_min_seconds)s)\n"
        "and on (instance, job, device) (\n"
        "  fioscope:disk_await_seconds >= on (instance, job, device) %(throttle_await_baseline_factor)s * fioscope:disk_await_baseline_seconds\n"
        "  or (fioscope:disk_await_seconds unless on (instance, job, device) fioscope:disk_await_baseline_seconds)\n"
        ")\n"
        "and on (instance, job, device) fioscope:disk_util_ratio >= %(throttle_util_min_ratio)s\n"
        "and on (instance, job, device) fioscope:disk_queue_size >= %(throttle_queue_min)s\n"
        "and on (instance, job, device) avg_over_time(fioscope:disk_iops:irate[" + window + "]) >= %(throttle_min_iops)s\n"
        "and on (instance, job, device)\n"
        "  stddev_over_time(fioscope:disk_iops:irate[" + window + "]) / avg_over_time(fioscope:disk_iops:irate[" + window + "])"
        " <= %(throttle_flatness_max_cv)s"
    )


FSYNC_RUN = 'fio_run_latency_seconds{%(fioSelector)s,ddir="sync",stage="lat",quantile="0.99"}'
FSYNC_HIST = ('histogram_quantile(0.99, sum by (instance, job, jobname, le) '
              '(rate(fio_latency_seconds_bucket{%(fioSelector)s,ddir="sync",stage="lat"}[%(fsyncHistogramWindow)s])))')
THROTTLE_DESC = ("{{ $labels.device }} on {{ $labels.instance }} looks throttled: IOPS flat at "
                 + disk_value("fioscope:disk_iops") + "/s, util " + disk_value("fioscope:disk_util_ratio", "humanizePercentage")
                 + ", queue " + disk_value("fioscope:disk_queue_size") + ", await {{ $value | humanizeDuration }}"
                 " (the device's normal is " + disk_value("fioscope:disk_await_baseline_seconds", "humanizeDuration") + ").")
ETCD_HIST = ("histogram_quantile(0.99, sum by (instance, job, le) "
             "(rate(etcd_disk_%s_duration_seconds_bucket{%%(etcdSelector)s}[%%(etcdWindow)s])))")


def sla_expr(t: dict) -> str:
    sla = t["disk_latency_sla_per_device"] or {}
    exprs = [f'fioscope:disk_await_seconds{{device="{dev}"}} > {fmt(value)}' for dev, value in sorted(sla.items())]
    others = f'{{device!~"{"|".join(sorted(sla))}"}}' if sla else ""
    exprs.append(f"fioscope:disk_await_seconds{others} > %(disk_latency_sla_seconds)s")
    return " or ".join(exprs)


def limit_expr(t: dict) -> str:
    exprs = []
    for dev, lim in sorted((t["disk_limits"] or {}).items()):
        if lim.get("iops"):
            exprs.append(f'fioscope:disk_iops{{device="{dev}"}} >= {fmt(t["at_limit_ratio"] * lim["iops"])}')
        if lim.get("bandwidth_bytes"):
            exprs.append(f'(fioscope:disk_read_bytes_per_second{{device="{dev}"}} + fioscope:disk_write_bytes_per_second{{device="{dev}"}})'
                         f' >= {fmt(t["at_limit_ratio"] * lim["bandwidth_bytes"])}')
    return " or ".join(exprs)


def alerts(s: dict) -> list[Alert]:
    t = s["thresholds"]
    fsync_ms = f"{t['etcd_fsync_p99_seconds'] * 1000:g} ms"
    commit_ms = f"{t['etcd_backend_commit_p99_seconds'] * 1000:g} ms"
    thr = t["throttle"]
    result = [
        Alert("FioscopeFsyncTooSlowForEtcd", "critical", FSYNC_RUN + " > %(etcd_fsync_p99_seconds)s", "fsync",
              f"fio fdatasync p99 above etcd's {fsync_ms} line",
              "Job {{ $labels.jobname }}: fdatasync p99 {{ $value | humanizeDuration }} in the last run; "
              f"etcd needs below {fsync_ms}. Storage this slow makes etcd miss heartbeats and elections.", "fio"),
        Alert("FioscopeFsyncNearEtcdLimit", "warning",
              f"{FSYNC_RUN} > {fmt(t['etcd_fsync_p99_seconds'] * t['etcd_fsync_warning_ratio'])} and {FSYNC_RUN} <= %(etcd_fsync_p99_seconds)s",
              "fsync", f"fio fdatasync p99 close to etcd's {fsync_ms} line",
              "Job {{ $labels.jobname }}: fdatasync p99 {{ $value | humanizeDuration }} in the last run, "
              f"within {100 - 100 * t['etcd_fsync_warning_ratio']:g} %% of etcd's {fsync_ms} line.", "fio"),
        Alert("FioscopeFsyncHistogramTooSlowForEtcd", "critical", FSYNC_HIST + " > %(etcd_fsync_p99_seconds)s", "fsync",
              f"fdatasync p99 across fio runs above etcd's {fsync_ms} line",
              "Job {{ $labels.jobname }}: fdatasync p99 over the last %(fsyncHistogramWindow)s of runs is "
              "{{ $value | humanizeDuration }}; " + f"etcd needs below {fsync_ms}.", "fio"),
        Alert("FioscopeEtcdWalFsyncSlow", "critical", ETCD_HIST % "wal_fsync" + " > %(etcd_fsync_p99_seconds)s", "etcd_fsync",
              f"etcd WAL fsync p99 above {fsync_ms}",
              "etcd {{ $labels.instance }}: WAL fsync p99 {{ $value | humanizeDuration }} (etcd's guidance: below " + fsync_ms + ").", "fio"),
        Alert("FioscopeEtcdBackendCommitSlow", "warning", ETCD_HIST % "backend_commit" + " > %(etcd_backend_commit_p99_seconds)s",
              "etcd_fsync", f"etcd backend commit p99 above {commit_ms}",
              "etcd {{ $labels.instance }}: backend commit p99 {{ $value | humanizeDuration }} (etcd's guidance: below " + commit_ms + ").",
              "fio"),
        Alert("FioscopeDiskThrottledUnderFioLoad", "critical",
              signature(thr["fio_window"]) + "\nand on () (max(fio_run_running{%(fioSelector)s}) > 0)",
              "throttled_fio", "Disk throttled while fio loads it", THROTTLE_DESC, "disk"),
        Alert("FioscopeDiskThrottled", "warning", signature(thr["window"]), "throttled",
              "Disk shows the throttling signature", THROTTLE_DESC, "disk"),
        Alert("FioscopeDiskSaturated", "info", "fioscope:disk_util_ratio >= %(util_saturated_ratio)s", "saturated",
              "Disk busy all the time",
              "{{ $labels.device }} on {{ $labels.instance }}: util {{ $value | humanizePercentage }}. "
              "Informational: on devices that serve requests in parallel (NVMe, cloud volumes) util says little; see the throttling alert.",
              "disk"),
        Alert("FioscopeDiskLatencyAboveSla", "warning", sla_expr(t), "latency_sla", "Disk latency above its SLA",
              "{{ $labels.device }} on {{ $labels.instance }}: await {{ $value | humanizeDuration }}, above the SLA in alerts/config.yaml.",
              "disk"),
        Alert("FioscopeDiskQueueExploding", "warning", "fioscope:disk_queue_size > %(queue_size_exploding)s", "queue",
              "Disk queue growing",
              "{{ $labels.device }} on {{ $labels.instance }}: {{ $value | humanize }} requests in flight on average (aqu-sz); "
              "await is " + disk_value("fioscope:disk_await_seconds", "humanizeDuration") + ".", "disk"),
        Alert("FioscopeHighIowaitIdleCpu", "warning",
              "fioscope:cpu_iowait_ratio > %(iowait_ratio)s\n"
              "and on (instance, job) (fioscope:cpu_user_ratio + fioscope:cpu_system_ratio) < %(iowait_busy_cpu_ratio)s",
              "iowait", "CPUs waiting on storage",
              "{{ $labels.instance }}: iowait {{ $value | humanizePercentage }} while user+system stay low: the workload is bound by storage.",
              "disk"),
        Alert("FioscopeWriteThroughputCliff", "warning",
              'fio_bandwidth_bytes_per_second{%(fioSelector)s,ddir="write"}\n'
              '  < %(write_cliff_ratio)s * max_over_time(fio_bandwidth_bytes_per_second{%(fioSelector)s,ddir="write"}[%(writeCliffWindow)s])\n'
              "and on (instance, job, jobname) fio_run_running{%(fioSelector)s} == 1",
              "write_cliff", "Write throughput fell off a cliff during a sustained write",
              "Job {{ $labels.jobname }}: write bandwidth dropped to {{ $value | humanize1024 }}B/s, below "
              f"{100 * t['write_cliff_ratio']:g} %% of its peak in the last %(writeCliffWindow)s: a write cache is probably exhausted.", "fio"),
        Alert("FioscopeFioAtPromisedIops", "info",
              'sum by (instance, job, jobname) (fio_iops{%(fioSelector)s,ddir=~"read|write|trim"})\n'
              "  >= on (instance, job, jobname) %(at_limit_ratio)s * fio_promised_iops{%(fioSelector)s}",
              "at_limit", "fio job at the disk's provisioned IOPS",
              "Job {{ $labels.jobname }} delivers {{ $value | humanize }} IOPS, at the ceiling its target's declared limits promise.", "fio"),
        Alert("FioscopeFioRunFailed", "warning", "increase(fio_run_failures_total{%(fioSelector)s}[1h]) > 0", "run_failed",
              "fio run failed", "Job {{ $labels.jobname }}: {{ $value | humanize }} failed run(s) in the last hour; see the exporter's log.",
              "fio"),
        Alert("FioscopeFioResultsStale", "warning",
              "time() - fio_run_end_timestamp_seconds{%(fioSelector)s} > %(resultsStaleSeconds)s\n"
              "unless on (instance, job, jobname) fio_run_running{%(fioSelector)s} == 1",
              "stale", "fio results are stale", "Job {{ $labels.jobname }}: the last result is {{ $value | humanizeDuration }} old.", "fio"),
        Alert("FioscopeExporterDown", "critical", "up{%(fioSelector)s} == 0 or absent(up{%(fioSelector)s})", "target_down",
              "fioscope exporter down", "fioscope exporter {{ $labels.instance }} cannot be scraped.", "fio"),
        Alert("FioscopeNodeExporterDown", "critical", "up{%(nodeSelector)s} == 0 or absent(up{%(nodeSelector)s})", "target_down",
              "node_exporter down", "node_exporter {{ $labels.instance }} cannot be scraped: no kernel view of the disks.", "disk"),
    ]
    if limit_expr(t):
        result.append(Alert("FioscopeDiskAtProvisionedLimit", "info", limit_expr(t), "at_limit", "Disk at its provisioned limit",
                            "{{ $labels.device }} on {{ $labels.instance }}: {{ $value | humanize }}, at the limit declared in alerts/config.yaml.",
                            "disk"))
    return result


def alert_rules(s: dict) -> dict:
    p = params(s)
    return {"groups": [{"name": "fioscope-alerts", "rules": [a.render(s, p) for a in alerts(s)]}]}
