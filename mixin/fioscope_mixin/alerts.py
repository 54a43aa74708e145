"""The alerts, as data: name, severity, PromQL template, `for:` key, summary, description, dashboard.
Templates take their thresholds, windows and selectors from alerts/config.yaml (see mixin.params)."""

from __future__ import annotations

from dataclasses import replace

from fioscope_mixin import instance_limit as il
from fioscope_mixin import names as n
from fioscope_mixin.cause import cause_alert_group
from fioscope_mixin.promql import (
    BANDWIDTH_DIMENSIONS,
    CAUSE_HELD,
    CEILING_AFTER_STEP_DOWN,
    CEILING_AT_PEAK,
    ETCD_HIST,
    FIO_CEILING_AT_PEAK,
    FIO_CEILING_HELD,
    FIO_ON_DEVICE,
    FIO_PAGE_SPAN,
    FSYNC_RUN,
    HOST,
    LOCAL,
    NOT_STALLED,
    at_envelope,
    ceilings_text,
    disk_value,
    throttle_desc,
    throttled,
)
from fioscope_mixin.recording import FSYNC_P99, held_at_level
from fioscope_mixin.rule import ON, Alert, fmt, params
from fioscope_mixin.settings import duration


def sla_expr(t: dict) -> str:
    sla = t["disk_latency_sla_per_device"] or {}
    exprs = [f'fioscope:disk_await_seconds{{device="{dev}"}} > {fmt(value)}' for dev, value in sorted(sla.items())]
    others = f'{{device!~"{"|".join(sorted(sla))}"}}' if sla else ""
    exprs.append(f"fioscope:disk_await_seconds{others} > %(disk_latency_sla_seconds)s")
    return " or ".join(exprs)


def alerts(s: dict) -> list[Alert]:
    t = s["thresholds"]
    fsync_ms = f"{t['etcd_fsync_p99_seconds'] * 1000:g} ms"
    commit_ms = f"{t['etcd_backend_commit_p99_seconds'] * 1000:g} ms"
    # throttle.held_at_level (on by default): a flat IOPS ceiling pages only once the direction's IOPS over the last five
    # minutes sit within held_tolerance of each other (recording.held_at_level: demand noise of one request size is flat
    # by chance in one window: noisy-neighbour controls paged on 6-9 of 20 seeds without it); the envelope and a
    # bandwidth ceiling (request sizes vary, every scrape on it) are no chance of a random rate, and a bandwidth cap's
    # bytes/s dip at each change of size (on lab disks, held paged late or never). Or the cause record has named the
    # provider's cap for page_with_cause (CAUSE_HELD): the page and the cause agree.
    held = (f'\nand {ON} (\n  fioscope:disk_ceiling{{window="long",shape="envelope"}}'
            f'\n  or fioscope:disk_ceiling{{window="long",dimension=~"{BANDWIDTH_DIMENSIONS}"}}\n  or {held_at_level("long")}\n)'
            if t["throttle"].get("held_at_level") else "")
    result = [
        Alert(n.ALERT_FSYNC_TOO_SLOW_FOR_ETCD, "critical", FSYNC_RUN + " > %(etcd_fsync_p99_seconds)s", "fsync",
              f"fio fdatasync p99 above etcd's {fsync_ms} line",
              "Job {{ $labels.jobname }}{{ with $labels.target }} on {{ . }}{{ end }}: fdatasync p99 {{ $value | humanizeDuration }} in the last run; "
              f"etcd needs below {fsync_ms}. Storage this slow makes etcd miss heartbeats and elections.", "fio"),
        Alert(n.ALERT_FSYNC_NEAR_ETCD_LIMIT, "warning",
              f"{FSYNC_RUN} > {fmt(t['etcd_fsync_p99_seconds'] * t['etcd_fsync_warning_ratio'])}"
              f" and {FSYNC_RUN} <= %(etcd_fsync_p99_seconds)s",
              "fsync", f"fio fdatasync p99 close to etcd's {fsync_ms} line",
              "Job {{ $labels.jobname }}{{ with $labels.target }} on {{ . }}{{ end }}: fdatasync p99 {{ $value | humanizeDuration }} in the last run, "
              f"within {100 - 100 * t['etcd_fsync_warning_ratio']:g} %% of etcd's {fsync_ms} line.", "fio"),
        Alert(n.ALERT_FSYNC_HISTOGRAM_TOO_SLOW_FOR_ETCD, "critical", FSYNC_P99 + " > %(etcd_fsync_p99_seconds)s", "fsync",
              f"fdatasync p99 across fio runs above etcd's {fsync_ms} line",
              "Job {{ $labels.jobname }}{{ with $labels.target }} on {{ . }}{{ end }}: fdatasync p99 over the last %(fsyncHistogramWindow)s of runs is "
              "{{ $value | humanizeDuration }}; " + f"etcd needs below {fsync_ms}.", "fio"),
        Alert(n.ALERT_ETCD_WAL_FSYNC_SLOW, "critical", ETCD_HIST % "wal_fsync" + " > %(etcd_fsync_p99_seconds)s", "etcd_fsync",
              f"etcd WAL fsync p99 above {fsync_ms}",
              "etcd {{ $labels.instance }}: WAL fsync p99 {{ $value | humanizeDuration }} (etcd's guidance: below "
              + fsync_ms + ").", "fio"),
        Alert(n.ALERT_ETCD_BACKEND_COMMIT_SLOW, "warning", ETCD_HIST % "backend_commit" + " > %(etcd_backend_commit_p99_seconds)s",
              "etcd_fsync", f"etcd backend commit p99 above {commit_ms}",
              "etcd {{ $labels.instance }}: backend commit p99 {{ $value | humanizeDuration }} (etcd's guidance: below " + commit_ms + ").",
              "fio"),
        Alert(n.ALERT_DISK_THROTTLED_UNDER_FIO_LOAD, "critical",
              # where the provider's counters exist they decide; the machine's limit is the host's alert (il.page)
              il.page(throttled("short") + "\nand " + FIO_ON_DEVICE + f"\nand {ON} (\n{FIO_CEILING_AT_PEAK}\nor {CEILING_AFTER_STEP_DOWN}\n)"
                      + f"\nand on (%(clusterLabels)shost, device) (\n  {FIO_CEILING_HELD}\n)", "\nand " + FIO_ON_DEVICE),
              "throttled_fio", "Disk throttled while fio loads it", throttle_desc("short"), "disk"),
        Alert(n.ALERT_DISK_THROTTLED, "warning",
              # a step-down in the ceiling's direction is the burst alert's page
              "(\n" + il.page(throttled("long") + f"\nand {ON} (\n{CEILING_AT_PEAK}\n)" + held
                               + (f"\nor\n{CAUSE_HELD}" if duration(s, "thresholds", "throttle", "page_with_cause") else ""))
              + "\n)\nunless " + FIO_PAGE_SPAN,
              "throttled", "Disk sits at a ceiling (throttled)", throttle_desc("long"), "disk"),
        Alert(n.ALERT_DISK_THROTTLED_AFTER_BURST, "warning",
              CEILING_AFTER_STEP_DOWN + "\n"
              'unless on (%(clusterLabels)shost, device) fioscope:disk_ceiling_below{window="long"}\nunless ' + LOCAL + "\n" + NOT_STALLED
              + "\n" + il.NO_COUNTERS,
              "throttled_after_burst", "Disk throttled after a burst (burst credits exhausted)",
              "{{ $labels.device }} on " + HOST + ": burst credits exhausted: IOPS fell from ~"
              + disk_value(n.DISK_IOPS, around="max_over_time(%s[%%(stepDownLookback)s])") + " to ~"
              + disk_value(n.DISK_IOPS) + "/s ({{ $value | humanize }}x less) and stay at the new ceiling: " + ceilings_text("long") + ".",
              "disk"),
        Alert(n.ALERT_DISK_AT_PHYSICAL_MAXIMUM, "info", at_envelope("long") + "\nand " + LOCAL, "at_physical_maximum",
              "Local disk at its own physical maximum",
              throttle_desc("long", "runs at its own physical maximum (local hardware, not a provider's cap)")
              + " Informational: the device delivers what it can; more needs more or faster devices.", "disk"),
        Alert(n.ALERT_DISK_SATURATED, "info", "fioscope:disk_util_ratio >= %(util_saturated_ratio)s", "saturated",
              "Disk busy all the time",
              "{{ $labels.device }} on " + HOST + ": util {{ $value | humanizePercentage }}. "
              "Informational: on devices that serve requests in parallel (NVMe, cloud volumes) util says little; see the throttling alert.",
              "disk"),
        # a layer above a capped disk (LVM on md on it) is as slow as the disk: the lowest layer pages
        Alert(n.ALERT_DISK_LATENCY_ABOVE_SLA, "warning",
              f"({sla_expr(t)})\nunless on (%(clusterLabels)shost, device) fioscope:disk_ceiling_below{{window=\"long\"}}", "latency_sla",
              "Disk latency above its SLA",
              "{{ $labels.device }} on " + HOST + ": await {{ $value | humanizeDuration }}, above the SLA in alerts/config.yaml.",
              "disk"),
        Alert(n.ALERT_DISK_QUEUE_EXPLODING, "warning",
              # a long queue alone is demand: page only with its cost, await far above normal and no more throughput
              # (recorded in a 15 s group: n.DISK_COSTLY_QUEUE_SIZE)
              f"{n.DISK_COSTLY_QUEUE_SIZE}\n"
              # a queue at a ceiling is the throttling alerts' story
              + f"unless {ON} fioscope:disk_ceiling{{window=\"long\"}}\n" + NOT_STALLED,
              "queue", "Disk queue long and costly",
              "{{ $labels.device }} on " + HOST + ": {{ $value | humanize }} requests in flight on average (aqu-sz), await "
              + disk_value(n.DISK_AWAIT_SECONDS, "humanizeDuration") + " against a normal of "
              + disk_value(n.DISK_AWAIT_BASELINE_SECONDS, "humanizeDuration") + ", and no more IOPS than %(queueWindow)s ago.",
              "disk"),
        # a stall is no ceiling: requests in flight and (almost) none completing. Not util or aqu-sz: the kernel updates
        # busy time only when a request starts or completes, so both under-report a stall (util 25 %% with 32 in flight)
        Alert(n.ALERT_DISK_STALLED, "critical", n.DISK_STALLED_IN_FLIGHT, "stalled", "Disk stalled: requests in flight, (almost) none completing",
              "{{ $labels.device }} on " + HOST + " is stalled: {{ $value | humanize }} requests in flight on average over the last "
              "%(stallWindow)s, " + disk_value(n.DISK_IOPS) + " completed per second (at most "
              + disk_value(n.DISK_IOPS, around="max_over_time(%s[%%(stepDownLookback)s])") + "/s in the last %(stepDownLookback)s), await "
              + disk_value(n.DISK_AWAIT_SECONDS, "humanizeDuration") + ". util reads "
              + disk_value(n.DISK_UTIL_RATIO, "humanizePercentage") + " and aqu-sz " + disk_value(n.DISK_QUEUE_SIZE)
              + ": the kernel updates them only when a request starts or completes, so they under-report a stall.", "disk"),
        Alert(n.ALERT_HIGH_IOWAIT_IDLE_CPU, "warning",
              "fioscope:cpu_iowait_ratio > %(iowait_ratio)s\n"
              "and on (%(clusterLabels)sinstance, job) (fioscope:cpu_user_ratio + fioscope:cpu_system_ratio) < %(iowait_busy_cpu_ratio)s",
              "iowait", "CPUs waiting on storage",
              HOST + ": iowait {{ $value | humanizePercentage }} while user+system stay low: "
              "the workload is bound by storage.",
              "disk"),
        Alert(n.ALERT_WRITE_THROUGHPUT_CLIFF, "warning", n.FIO_WRITE_CLIFF_BYTES_PER_SECOND,
              "write_cliff", "Write throughput fell off a cliff during a sustained write",
              "Job {{ $labels.jobname }}{{ with $labels.target }} on {{ . }}{{ end }}: write bandwidth dropped to {{ $value | humanize1024 }}B/s, below "
              f"{100 * t['write_cliff_ratio']:g} %% of its peak in the last %(writeCliffWindow)s: "
              "a write cache is probably exhausted.", "fio"),
        Alert(n.ALERT_FIO_AT_PROMISED_IOPS, "info",
              'sum by (%(fioResult)s) (fio_iops{%(fioSelector)s,ddir=~"read|write|trim"})\n'
              "  >= on (%(fioResult)s) %(at_limit_ratio)s * fio_promised_iops{%(fioSelector)s}",
              "at_limit", "fio job at the disk's provisioned IOPS",
              "Job {{ $labels.jobname }}{{ with $labels.target }} on {{ . }}{{ end }} delivers {{ $value | humanize }} IOPS, "
              "at the ceiling its target's declared limits promise.", "fio"),
        Alert(n.ALERT_FIO_RUN_FAILED, "warning", "increase(fio_run_failures_total{%(fioSelector)s}[1h]) > 0", "run_failed",
              "fio run failed",
              "Job {{ $labels.jobname }}{{ with $labels.target }} on {{ . }}{{ end }}: {{ $value | humanize }} failed run(s) in the last hour; see the exporter's log.",
              "fio"),
        Alert(n.ALERT_FIO_RESULTS_STALE, "warning",
              "time() - fio_run_end_timestamp_seconds{%(fioSelector)s} > %(resultsStaleSeconds)s\n"
              "unless on (%(fioResult)s) fio_run_running{%(fioSelector)s} == 1",
              "stale", "fio results are stale",
              "Job {{ $labels.jobname }}{{ with $labels.target }} on {{ . }}{{ end }}: the last result is {{ $value | humanizeDuration }} old.", "fio"),
        Alert(n.ALERT_EXPORTER_DOWN, "critical", "up{%(fioSelector)s} == 0 or absent(up{%(fioSelector)s})", "target_down",
              "fioscope exporter down", "fioscope exporter {{ $labels.instance }} cannot be scraped.", "fio"),
        Alert(n.ALERT_RESULT_SCAN_STALLED, "critical",
              "time() - fioscope_last_scan_timestamp_seconds{%(fioSelector)s}\n"
              "  > on (%(clusterLabels)shost, instance, job) clamp_min(3 * fioscope_scan_interval_seconds{%(fioSelector)s}, 60)",
              "scan_stalled", "fioscope stopped scanning its results",
              "fioscope {{ $labels.instance }}: the last scan of the results directory was {{ $value | humanizeDuration }} ago: "
              "new results are not published and the figures are going stale.", "fio"),
        Alert(n.ALERT_SCHEDULER_STOPPED, "critical", "fioscope_scheduler_running{%(fioSelector)s} == 0", "scheduler_stopped",
              "fioscope's fio schedule stopped",
              "fioscope {{ $labels.instance }}: the schedule thread is not running: no fio job will run.",
              "fio"),
        Alert(n.ALERT_WEB_CONFIG_RELOAD_FAILED, "warning", "fioscope_web_config_last_reload_successful{%(fioSelector)s} == 0",
              "web_config_reload_failed", "fioscope refused its changed web config",
              "fioscope {{ $labels.instance }}: the changed --web.config.file was refused (see the exporter's log); "
              "the previous TLS and basic-auth settings still serve, so a rotated password or certificate is not in force.",
              "fio"),
        Alert(n.ALERT_NODE_EXPORTER_DOWN, "critical", "up{%(nodeSelector)s} == 0 or absent(up{%(nodeSelector)s})", "target_down",
              "node_exporter down", "node_exporter {{ $labels.instance }} cannot be scraped: no kernel view of the disks.", "disk"),
        # the Prometheus evaluating these rules, too busy for its hosts (README "Fleet": when to move): a group's mean
        # over a window, not its worst evaluation (the garbage collector's mark phases stretch single ones 2-3x)
        Alert(n.ALERT_RULE_EVALUATION_SLOW, "warning",
              "avg_over_time(prometheus_rule_group_last_duration_seconds{%(fioscopeRuleGroups)s}[%(ruleEvaluationWindow)s])\n"
              "  > on (%(clusterLabels)sinstance, job, rule_group) %(ruleEvaluationBusyRatio)s\n"
              "    * prometheus_rule_group_interval_seconds{%(fioscopeRuleGroups)s}",
              "rule_evaluation_slow", "Prometheus too busy for its hosts' rules",
              "Prometheus {{ $labels.instance }}: the rule group {{ $labels.rule_group }} took {{ $value | humanizeDuration }} "
              "an evaluation on average over %(ruleEvaluationWindow)s, more than %(ruleEvaluationBusyPercent)s%% of its interval: "
              "its alerts come later and, past the interval, evaluations are skipped. Move hosts to another shard "
              "(README \"Fleet\").", "disk"),
    ]
    if t["disk_limits"]:
        result.append(Alert(n.ALERT_DISK_AT_PROVISIONED_LIMIT, "info", "fioscope:disk_declared_limit_ratio >= %(at_limit_ratio)s",
                            "at_limit", "Disk at its provisioned limit",
                            "{{ $labels.device }} on " + HOST + ": at {{ $value | humanizePercentage }} "
                            "of the declared {{ $labels.limit }} (alerts/config.yaml).", "disk"))
    return [replace(a, keep_firing=True) if a.name in EPISODE_ALERTS else a for a in result]


# a disk's condition comes and goes with its load (an application's pause, a window that misses a cap by a scrape):
# these keep firing thresholds.disk_keep_firing_for after it lapses, one alert per episode
EPISODE_ALERTS = {n.ALERT_DISK_THROTTLED_UNDER_FIO_LOAD, n.ALERT_DISK_THROTTLED, n.ALERT_DISK_THROTTLED_AFTER_BURST,
                  n.ALERT_DISK_AT_PHYSICAL_MAXIMUM, n.ALERT_DISK_SATURATED, n.ALERT_DISK_LATENCY_ABOVE_SLA,
                  n.ALERT_DISK_QUEUE_EXPLODING, n.ALERT_DISK_STALLED, n.ALERT_DISK_AT_PROVISIONED_LIMIT,
                  n.ALERT_HIGH_IOWAIT_IDLE_CPU}


def alert_rules(s: dict) -> dict:
    p = params(s) | il.limit_params(s)
    group: dict = {"name": "fioscope-alerts"}
    # Prometheus starts each group at an offset of its own within the interval (a hash of its name and file), so an
    # alert reading another group's records saw them up to a whole interval late (a throttling page at 125 s, not 110,
    # on a 15 s stack). Evaluated three times an interval, the pages follow their records within a third (5 s at 15 s);
    # they read records, cheap to evaluate, and their `for:` are durations, not evaluation counts.
    interval = duration(s, "stack", "evaluation_interval")
    if (every := max(1, round(interval / 3))) < interval:
        group["interval"] = f"{every}s"
    # the rest hold for minutes (a symptom waits 5m for its page) or watch inputs that move over minutes (fio's results,
    # the scrapes, the exporter's scans): at the stack's interval. Their selectors are over every device, host and fio
    # result: three times an interval, they cost 2,000 hosts 1.1-1.4 s of a core every 15 s (bench/bench_rule_cost.py)
    pages: list[dict] = []
    sustained: list[dict] = []
    for a in alerts(s):
        (pages if a.name in n.EPISODE_PAGES else sustained).append(a.render(s, p))
    group["rules"] = pages
    return {"groups": [group, {"name": "fioscope-alerts-sustained", "rules": sustained}, cause_alert_group(s, group.get("interval"))]}
