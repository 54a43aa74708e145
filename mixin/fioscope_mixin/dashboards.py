"""fioscope's Grafana dashboards as code (grafana-foundation-sdk, pinned to the 11.3 build that
matches compose.yaml's grafana/grafana:11.3.0; the ``generate`` extra installs it). Thresholds drawn
on panels come from alerts/config.yaml, the one place they live; with selectors.cluster_label set,
every dashboard gets a cluster variable (multi-cluster).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import (
    heatmap,
    prometheus,
    stat,
    statetimeline,
    table,
    timeseries,
    xychart,
)
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models import prometheus as pm

from fioscope_mixin import names as n
from fioscope_mixin.names import DASHBOARD_UIDS as UIDS
from fioscope_mixin.settings import load_settings

DS = dm.DataSourceRef(type_val="prometheus", uid="${datasource}")
@dataclass(frozen=True)
class Scope:
    """What every panel reads of the settings, passed to each builder (no module state): the thresholds, and the
    selectors of the dashboards' variables. Every series carries the host its scrape job's relabelling named
    (docs/fleet.md); with selectors.cluster_label, also its cluster."""

    settings: dict
    t: dict  # thresholds
    cluster: str  # the cluster label's name, "" for one cluster per Prometheus
    in_cluster: str
    host: str
    disk: str
    job: str


def scope(settings: dict) -> Scope:
    cluster = settings["selectors"]["cluster_label"]
    in_cluster = f'{cluster}=~"$cluster",' if cluster else ""
    host = in_cluster + 'host=~"$host"'
    return Scope(settings, settings["thresholds"], cluster, in_cluster, host, f'{host},device=~"$device"', f'{host},jobname=~"$jobname"')


# ---------------------------------------------------------------------------- helpers
TABLE, HEATMAP = pm.PromQueryFormat.TABLE, pm.PromQueryFormat.HEATMAP


def query(expr: str, legend: str = "", ref: str = "A", instant: bool = False,
          fmt: pm.PromQueryFormat | None = None) -> prometheus.Dataquery:
    q = prometheus.Dataquery().expr(expr).legend_format(legend or "__auto").ref_id(ref).datasource(DS)
    if instant:
        q = q.instant()
    if fmt:
        q = q.format(fmt)
    return q


def thresholds(*steps: tuple[float | None, str]) -> db.ThresholdsConfig:
    return db.ThresholdsConfig().mode(dm.ThresholdsMode.ABSOLUTE).steps([dm.Threshold(value=v, color=c) for v, c in steps])


def ts(title: str, unit: str, queries: list[prometheus.Dataquery], description: str, w: int = 12, h: int = 8,
       line: list | None = None, stack: bool = False) -> timeseries.Panel:
    panel = (timeseries.Panel().title(title).description(description).unit(unit).datasource(DS).height(h).span(w).fill_opacity(10)
             .legend(cb.VizLegendOptions().display_mode(cm.LegendDisplayMode.TABLE).placement(cm.LegendPlacement.BOTTOM)
                     .show_legend(True).calcs(["mean", "max", "lastNotNull"])))
    for q in queries:
        panel = panel.with_target(q)
    if line:  # alert / SLA lines drawn on the graph
        panel = panel.thresholds(thresholds((None, "transparent"), *line)).thresholds_style(
            cb.GraphThresholdsStyleConfig().mode(cm.GraphThresholdsStyleMode.DASHED))
    if stack:
        panel = panel.stacking(cb.StackingConfig().mode(cm.StackingMode.NORMAL))
    return panel


def stat_panel(title: str, unit: str, q: prometheus.Dataquery, steps: list, description: str, w: int = 6, h: int = 5,
               mappings: list | None = None) -> stat.Panel:
    panel = (stat.Panel().title(title).description(description).unit(unit).datasource(DS).height(h).span(w).with_target(q)
             .thresholds(thresholds(*steps)).color_mode(cm.BigValueColorMode.BACKGROUND).graph_mode(cm.BigValueGraphMode.NONE)
             .reduce_options(cb.ReduceDataOptions().calcs(["lastNotNull"]).values(False)))
    if mappings:
        panel = panel.mappings(mappings)
    return panel


def value_map(mapping: dict[str, tuple[str, str]]) -> list:
    return [dm.ValueMap(options={k: dm.ValueMappingResult(text=text, color=color, index=i)
                                 for i, (k, (text, color)) in enumerate(mapping.items())})]


PROVISIONED_DATASOURCE = n.DATASOURCE_UID


def datasource_var() -> db.DatasourceVariable:
    return (db.DatasourceVariable("datasource").label("Data source").type("prometheus")
            .current(dm.VariableOption(selected=True, text="Prometheus", value=PROVISIONED_DATASOURCE)))


def per_device(sc: Scope, *columns: tuple[str, str]) -> list[prometheus.Dataquery]:
    """One query per iostat column (recorded series, legend prefix) on the selected devices, refs A, B, ..."""
    return [query(f"{series}{{{sc.disk}}}", f"{legend} {{{{device}}}}", ref=chr(65 + i)) for i, (series, legend) in enumerate(columns)]


def query_var(name: str, label: str, expr: str, multi: bool = True) -> db.QueryVariable:
    var = (db.QueryVariable(name).label(label).datasource(DS).query({"query": expr, "refId": name})
           .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED).sort(dm.VariableSort.ALPHABETICAL_ASC))
    if multi:
        var = var.multi(True).include_all(True).all_value(".*")
    return var


def scope_vars(sc: Scope, metric: str) -> list:
    """The data source, the cluster (when selectors.cluster_label is set; one at a time, as node-mixin's) and the host."""
    if not sc.cluster:
        return [datasource_var(), query_var("host", "Host", f"label_values({metric}, host)")]
    return [datasource_var(), query_var("cluster", "Cluster", f"label_values({metric}, {sc.cluster})", multi=False),
            query_var("host", "Host", f'label_values({metric}{{{sc.cluster}=~"$cluster"}}, host)')]


def with_scope(sc: Scope, d: db.Dashboard, metric: str) -> db.Dashboard:
    for var in scope_vars(sc, metric):
        d = d.with_variable(var)
    return d


def run_annotation(sc: Scope) -> db.AnnotationQuery:
    # fio runs as regions: idle and loaded periods told apart at a glance
    return (db.AnnotationQuery().name("fio runs").datasource(DS).enable(True).icon_color("rgba(255, 152, 48, 0.6)")
            .expr(f"fio_run_running{{{sc.job}}} == 1"))


def base(uid: str, title: str, tags: list[str]) -> db.Dashboard:
    return (db.Dashboard(title).uid(uid).tags(["fioscope", *tags]).refresh("10s").time("now-30m", "now")
            # provisioned from this code: an edit in Grafana would be lost at the next generate (the linter's uneditable rule)
            .timezone("browser").readonly().tooltip(dm.DashboardCursorSync.CROSSHAIR)
            .link(db.DashboardLink("fioscope").type(dm.DashboardLinkType.DASHBOARDS).tags(["fioscope"]).as_dropdown(True)))


def table_panel(title: str, description: str, unit: str, w: int, h: int, *queries: prometheus.Dataquery) -> table.Panel:
    panel = table.Panel().title(title).description(description).datasource(DS).height(h).span(w).unit(unit)
    for q in queries:
        panel = panel.with_target(q)
    return panel


def organize(exclude: list[str], **options: dict) -> dm.DataTransformerConfig:
    """Grafana's organize transformation: hide ``exclude`` columns (plus renames/order in ``options``)."""
    return dm.DataTransformerConfig(id_val="organize", options={"excludeByName": {c: True for c in exclude}, **options})


MERGE = dm.DataTransformerConfig(id_val="merge", options={})


# ---------------------------------------------------------------------------- 1. disk under load
def throttling_verdict(sc: Scope) -> stat.Panel:
    firing = f'ALERTS{{alertname=~"{"|".join(n.THROTTLING_ALERTS)}",alertstate="firing",{sc.disk}}}'
    return stat_panel(
        "Throttling verdict", "none",
        query(f"max by (host, device) ({firing}) or max by (host, device) (0 * {n.DISK_UTIL_RATIO}{{{sc.disk}}})",
              "{{host}} {{device}}", instant=True),
        [(None, "green"), (1, "red")],
        "A throttling alert fires: a rate (reads, writes, read/write throughput, IOPS or throughput) sits flat at a ceiling "
        "while util is saturated, the queue full and await far above the device's normal (docs/runbook.md).",
        w=8, mappings=value_map({"0": ("not throttled", "green"), "1": ("THROTTLED", "red")}))


def fio_running(sc: Scope) -> stat.Panel:
    return stat_panel("fio job running", "none", query(f"max(fio_run_running{{{sc.job}}})", instant=True), [(None, "text"), (1, "orange")],
                      "LOAD while one of the selected fio jobs runs on the selected hosts: the load on the disks is then fioscope's own.",
                      w=4, mappings=value_map({"0": ("idle", "text"), "1": ("LOAD", "orange")}))


def inferred_ceiling(sc: Scope) -> table.Panel:
    """The inferred ceiling (fioscope:disk_ceiling): which rate the device is pinned at, and at what level."""
    return (table_panel("Inferred ceiling",
                        "Rates that sit flat while the device is saturated and slow, as the throttling alerts name them "
                        "(window: fio = while a fio job loads the device, long = any workload); empty while no ceiling binds. "
                        "Bytes per second for the throughput rows.",
                        "short", 12, 5, query(f'{n.DISK_CEILING}{{{sc.disk}}}', instant=True, fmt=TABLE))
            .with_transformation(organize(["Time", "__name__", "job"], renameByName={"Value": "flat at"})))


def firing_alerts(sc: Scope) -> table.Panel:
    return (table_panel("Firing alerts", "Every alert firing now, one row each with the labels that say where (docs/runbook.md has "
                        "a section per alert).", "none", 12, 5,
                        query(f'ALERTS{{{sc.in_cluster}alertstate="firing"}}', instant=True, fmt=TABLE))
            .with_transformation(organize(["Time", "Value", "__name__", "alertstate"])))


def disk_stack(sc: Scope) -> table.Panel:
    # the device stack as the exporter reads it from sysfs: vg0-data (dm-3) on md0 on vda+vdb
    return (table_panel("Disk stack (what each device is built on, which targets it holds)",
                        "Each device as the exporter reads it from sysfs: its kind, the devices it is built on (parents) and the "
                        "fio targets on it. A throttling alert pages the lowest layer at a ceiling, not the layers above it.",
                        "none", 24, 6, query(f"fioscope_disk_info{{{sc.host}}}", instant=True, fmt=TABLE))
            .with_transformation(organize(["Time", "Value", "__name__", "job", "instance"],
                                          indexByName={"host": 0, "device": 1, "name": 2, "kind": 3, "parents": 4, "targets": 5})))


def cpu(sc: Scope) -> timeseries.Panel:
    modes = (("user", n.CPU_USER_RATIO), ("system", n.CPU_SYSTEM_RATIO), ("iowait", n.CPU_IOWAIT_RATIO),
             ("steal", n.CPU_STEAL_RATIO), ("idle", n.CPU_IDLE_RATIO), ("nice", n.CPU_NICE_RATIO))
    queries = [query(f"{record}{{{sc.host}}}", f"%{m} {{{{host}}}}", ref=chr(65 + i)) for i, (m, record) in enumerate(modes)]
    return ts("CPU", "percentunit", queries,
              "iostat's %user, %system (with irq and softirq), %iowait, %steal, %idle.", w=24, stack=True)


def utilisation(sc: Scope) -> timeseries.Panel:
    return ts("Utilisation (%util)", "percentunit", [query(f"{n.DISK_UTIL_RATIO}{{{sc.disk}}}", "{{host}} {{device}}")],
              "Share of time with a request in flight. Meaningless on NVMe-style parallel devices (runbook).",
              line=[(sc.t["throttle"]["util_min_ratio"], "orange"), (sc.t["util_saturated_ratio"], "red")])


def merges(sc: Scope) -> timeseries.Panel:
    return ts("Merged requests (rrqm/s, wrqm/s)", "reqps",
              per_device(sc, (n.DISK_READ_MERGES_PER_SECOND, "rrqm/s"), (n.DISK_WRITE_MERGES_PER_SECOND, "wrqm/s")),
              "iostat's rrqm/s and wrqm/s: requests merged with a neighbour in the queue before they reached the device.")


def merged_share(sc: Scope) -> timeseries.Panel:
    return ts("Share of requests merged (%rrqm, %wrqm)", "percentunit",
              per_device(sc, (n.DISK_READ_MERGES_RATIO, "%rrqm"), (n.DISK_WRITE_MERGES_RATIO, "%wrqm")),
              "iostat's %rrqm and %wrqm: the share of requests merged before they reached the device. A sequential "
              "stream through the page cache merges most of its requests; random I/O and O_DIRECT fio jobs almost none.")


def iops(sc: Scope) -> timeseries.Panel:
    return ts("IOPS (r/s, w/s, d/s, f/s)", "iops",
              per_device(sc, (n.DISK_READ_IOPS, "r/s"), (n.DISK_WRITE_IOPS, "w/s"), (n.DISK_DISCARD_IOPS, "d/s"),
                         (n.DISK_FLUSH_IOPS, "f/s")),
              "Reads, writes, discards and flushes completed per second (iostat r/s, w/s, d/s, f/s).")


def iops_per_scrape(sc: Scope) -> timeseries.Panel:
    return ts("IOPS per scrape (flatness)", "iops", [query(f"{n.DISK_IOPS_IRATE}{{{sc.disk}}}", "{{host}} {{device}}")],
              "A capped disk shows a flat line at the cap; a healthy busy disk is noisy.")


def latency(sc: Scope) -> timeseries.Panel:
    sla = sc.t["disk_latency_sla_seconds"]
    return ts("Latency (r_await, w_await, d_await, f_await)", "s",
              per_device(sc, (n.DISK_READ_AWAIT_SECONDS, "r_await"), (n.DISK_WRITE_AWAIT_SECONDS, "w_await"),
                         (n.DISK_DISCARD_AWAIT_SECONDS, "d_await"), (n.DISK_FLUSH_AWAIT_SECONDS, "f_await")),
              f"Dashed: the throttling floor and the {sla * 1000:g} ms SLA.",
              line=[(sc.t["throttle"]["await_min_seconds"], "orange"), (sla, "red")])


def await_against_normal(sc: Scope) -> timeseries.Panel:
    return ts("Await against the device's normal", "s",
              per_device(sc, (n.DISK_AWAIT_SECONDS, "await"), (n.DISK_AWAIT_BASELINE_SECONDS, "normal"),
                         (n.DISK_READ_AWAIT_BASELINE_SECONDS, "reads' normal"), (n.DISK_WRITE_AWAIT_BASELINE_SECONDS, "writes' normal")),
              "Mean time per request over all directions, and the device's normal: the median await of its unsaturated periods; "
              "each direction's own normal, which its r_await or w_await (the latency panel) is judged against. "
              "A throttled disk sits far above its normal.")


def queue(sc: Scope) -> timeseries.Panel:
    return ts("Queue (aqu-sz)", "short", [query(f"{n.DISK_QUEUE_SIZE}{{{sc.disk}}}", "{{host}} {{device}}")],
              "Requests in flight on average (iostat aqu-sz). Dashed: the queue the throttling test needs, and the queue alert's line.",
              line=[(sc.t["throttle"]["queue_min"], "orange"), (sc.t["queue_size_exploding"], "red")])


def request_sizes(sc: Scope) -> timeseries.Panel:
    return ts("Request sizes (rareq-sz, wareq-sz)", "bytes",
              per_device(sc, (n.DISK_READ_REQUEST_SIZE_BYTES, "rareq-sz"), (n.DISK_WRITE_REQUEST_SIZE_BYTES, "wareq-sz")),
              "Average size of a read and of a write request (iostat rareq-sz, wareq-sz), in bytes.")


def throughput(sc: Scope) -> timeseries.Panel:
    return ts("Throughput (rkB/s, wkB/s, dkB/s)", "Bps",
              per_device(sc, (n.DISK_READ_BYTES_PER_SECOND, "read"), (n.DISK_WRITE_BYTES_PER_SECOND, "write"),
                         (n.DISK_DISCARD_BYTES_PER_SECOND, "discard")),
              "Bytes read, written and discarded per second (iostat rkB/s, wkB/s, dkB/s, in bytes).", w=24)


# the cause of a slow episode as a state: 0 not slow, then the causes in the rules' precedence (fioscope_mixin.cause)
CAUSE_STATES = [("stall", "STALL", "dark-red"), ("writeback_cliff", "write-back cliff", "orange"),
                ("instance_limit", "the machine's limit", "dark-orange"),
                ("provider_cap", "provider cap", "red"), ("device_max", "device maximum", "purple"),
                ("noisy_neighbour", "noisy neighbour", "yellow"), ("wait_above_disk", "wait above the disk", "blue")]


def slow_cause(sc: Scope) -> statetimeline.Panel:
    """The cause of each device's slow episodes over time (fioscope:disk_slow_cause), one lane per device."""
    causes = " or ".join(f'{n.DISK_SLOW_CAUSE}{{{sc.disk},cause="{cause}"}} * {i}' for i, (cause, _, _) in enumerate(CAUSE_STATES, 1))
    expr = f"max by (host, device) ({causes}) or max by (host, device) (0 * {n.DISK_UTIL_RATIO}{{{sc.disk}}})"
    mapping = {"0": ("not slow", "green")} | {str(i): (text, color) for i, (_, text, color) in enumerate(CAUSE_STATES, 1)}
    return (statetimeline.Panel().title("Why is it slow: the cause per device").unit("none").datasource(DS).height(7).span(24)
            .description("Each device's slow episodes named by their one cause (docs/runbook.md, \"Why is this disk slow\"): "
                         "a stall, a write-back cliff, the machine's own limit shared by its volumes, the provider's cap, the "
                         "device's own maximum, a noisy neighbour or the shared backend, or a wait above the disk (CPU, "
                         "filesystem, application). Green: not slow. The FioscopeDiskCause* and FioscopeInstanceDiskLimit "
                         "alerts give the evidence.")
            .with_target(query(expr, "{{host}} {{device}}")).mappings(value_map(mapping))
            .thresholds(thresholds((None, "green"))).show_value(cm.VisibilityMode.NEVER).merge_values(True).fill_opacity(80))


def slow_await_ratio(sc: Scope) -> timeseries.Panel:
    return ts("Await against the device's normal (slow episodes)", "none",
              [query(f"{n.DISK_SLOW_AWAIT_RATIO}{{{sc.disk}}}", "{{host}} {{device}}")],
              "The device's mean await divided by its normal, while at least "
              f"{sc.t['cause']['slow_await_factor']:g}x (a slow episode); absent otherwise.",
              line=[(sc.t["cause"]["slow_await_factor"], "orange")])


def load_against_asked(sc: Scope) -> timeseries.Panel:
    lookback = sc.t["cause"]["demand_lookback"]
    return ts("Load against the load carried at normal latency", "iops",
              [query(f"{n.DISK_IOPS}{{{sc.disk}}}", "IOPS {{host}} {{device}}"),
               query(f"avg_over_time({n.DISK_NORMAL_IOPS}{{{sc.disk}}}[{lookback}])", "carried at normal latency {{host}} {{device}}",
                     ref="B")],
              "The device's IOPS, and what it carried on average (its busy minutes) at its normal latency in the last "
              f"{lookback}: a slow device at no more than that load has a noisy neighbour or a slower shared backend; "
              "above it, the slowness is the load's own.")


def cpu_and_io_pressure(sc: Scope) -> timeseries.Panel:
    return ts("CPU and I/O pressure (PSI), steal", "percentunit",
              [query(f"{n.CPU_PRESSURE_RATIO}{{{sc.host}}}", "CPU pressure {{host}}"),
               query(f"{n.IO_PRESSURE_RATIO}{{{sc.host}}}", "I/O pressure {{host}}", ref="B"),
               query(f"{n.CPU_STEAL_RATIO}{{{sc.host}}}", "steal {{host}}", ref="C")],
              "Share of time at least one task waited for a CPU or for I/O (node_exporter's pressure collector, kernels with "
              "/proc/pressure), and the CPU time the hypervisor gave to others (steal). CPU pressure or steal high while the "
              "disk idles at its normal latency: the wait is above the disk.",
              line=[(sc.t["cause"]["steal_ratio"], "orange"), (sc.t["cause"]["cpu_pressure_ratio"], "red")])


def disk_dashboard(sc: Scope) -> db.Dashboard:
    d = (with_scope(sc, base(UIDS["disk"], "fioscope / Disk under load", ["disk", "iostat"]), n.DISK_UTIL_RATIO)
         .with_variable(query_var("device", "Device", f"label_values({n.DISK_UTIL_RATIO}{{{sc.host}}}, device)"))
         .with_variable(query_var("jobname", "fio job", f"label_values(fio_run_running{{{sc.host}}}, jobname)"))
         .annotation(run_annotation(sc)))
    return rows(sc, d, ("Verdict", [throttling_verdict, fio_running, inferred_ceiling, firing_alerts, disk_stack]),
                ("Why is it slow (cause)", [slow_cause, slow_await_ratio, load_against_asked, cpu_and_io_pressure]),
                ("CPU (iostat avg-cpu)", [cpu]),
                ("Utilisation and merges", [utilisation, merges, merged_share]),
                ("IOPS", [iops, iops_per_scrape]),
                ("Latency", [latency, await_against_normal]),
                ("Queue and request sizes", [queue, request_sizes]),
                ("Traffic", [throughput]))


def rows(sc: Scope, d: db.Dashboard, *sections: tuple[str, list]) -> db.Dashboard:
    """A row per section, then its panels (each built by its own function)."""
    for title, panels in sections:
        d = d.with_row(db.Row(title))
        for panel in panels:
            d = d.with_panel(panel(sc))
    return d


# ---------------------------------------------------------------------------- 2. fio results
def sync_p99(sc: Scope) -> str:
    return f'fio_run_latency_seconds{{{sc.job},ddir="sync",stage="lat",quantile="0.99"}}'


def fsync_p99(sc: Scope) -> stat.Panel:
    fsync = sc.t["etcd_fsync_p99_seconds"]
    return stat_panel(f"fdatasync p99 (etcd needs < {fsync * 1000:g} ms)", "s", query(sync_p99(sc), "{{jobname}}", instant=True),
                      [(None, "green"), (fsync * sc.t["etcd_fsync_warning_ratio"], "orange"), (fsync, "red")],
                      "p99 of fdatasync latency in each job's last run (the etcd-wal profile); orange near etcd's line, red above it.", w=8)


def fsync_verdict(sc: Scope) -> stat.Panel:
    fsync = sc.t["etcd_fsync_p99_seconds"]
    return stat_panel("fdatasync verdict", "none",
                      query(f"max by (host, target, jobname) ({sync_p99(sc)} > bool {fsync:g})", "{{host}} {{target}} {{jobname}}",
                            instant=True),
                      [(None, "green"), (1, "red")],
                      f"FAIL when a last run's fdatasync p99 is above etcd's {fsync * 1000:g} ms line, "
                      f"as {n.ALERT_FSYNC_TOO_SLOW_FOR_ETCD} says.",
                      w=4, mappings=value_map({"0": ("PASS", "green"), "1": ("FAIL", "red")}))


def fsync_history(sc: Scope) -> timeseries.Panel:
    window = sc.t["fsync_histogram_window"]
    # the classic buckets, or the native histogram where Prometheus 3 converts them (stack.convert_classic_histograms_to_nhcb)
    latency = f'{{{sc.job},ddir="sync",stage="lat"}}[{window}]'
    across = (f"histogram_quantile(0.99, sum by (host, target, jobname, le) (rate(fio_latency_seconds_bucket{latency})))\n"
              f"or histogram_quantile(0.99, sum by (host, target, jobname) (rate(fio_latency_seconds{latency})))")
    return ts("fdatasync p99: last run and across runs", "s", [query(sync_p99(sc), "last run {{jobname}}"),
                                                                 query(across, "all runs, {{jobname}}", ref="B")],
              f"The last run's fdatasync p99, and the p99 of every fdatasync of the runs in the last {window} "
              f"({n.ALERT_FSYNC_HISTOGRAM_TOO_SLOW_FOR_ETCD}). Red: etcd's line.", line=[(sc.t["etcd_fsync_p99_seconds"], "red")])


def fio_iops(sc: Scope) -> timeseries.Panel:
    return ts("IOPS (live while running)", "iops", [query(f"fio_iops{{{sc.job}}}", "{{jobname}} {{ddir}}"),
                                                   query(f"fio_promised_iops{{{sc.job}}}", "promised {{jobname}}", ref="B")],
              "IOPS per job and direction, live while fio runs, and the IOPS its target's declared limits promise.")


def fio_bandwidth(sc: Scope) -> timeseries.Panel:
    return ts("Bandwidth (live while running)", "Bps", [query(f"fio_bandwidth_bytes_per_second{{{sc.job}}}", "{{jobname}} {{ddir}}")],
              "Bytes per second per job and direction, live while fio runs.")


def clat_percentiles(sc: Scope) -> timeseries.Panel:
    quantiles = ("0.5", "0.9", "0.99", "0.999", "0.9999")
    return ts("clat percentiles", "s",
              [query(f'fio_run_latency_seconds{{{sc.job},stage="clat",quantile="{q}"}}',
                     f"p{float(q) * 100:g} {{{{jobname}}}} {{{{ddir}}}}",
                     ref=chr(65 + i)) for i, q in enumerate(quantiles)],
              "Completion latency percentiles of each job's last run (fio's clat). Red: the disk latency SLA.",
              line=[(sc.t["disk_latency_sla_seconds"], "red")])


def latency_heatmap(sc: Scope) -> heatmap.Panel:
    return (heatmap.Panel().title("Latency heatmap (every I/O, fio_latency_seconds)")
            .description("Every I/O of the selected jobs' runs by latency bucket: a second mode or a long tail shows here first.")
            .datasource(DS).height(8).span(12).unit("s")
            .with_target(query(f'sum by (le) (increase(fio_latency_seconds_bucket{{{sc.job}}}[$__rate_interval]))', "{{le}}", fmt=HEATMAP))
            .calculate(False).y_axis(heatmap.YAxisConfig().unit("s")))


def runs_and_failures(sc: Scope) -> timeseries.Panel:
    by = "sum by (host, target, jobname)"
    return ts("Runs and failures", "short", [
        query(f"{by} (increase(fio_runs_total{{{sc.job}}}[$__rate_interval]))", "runs {{host}} {{target}} {{jobname}}"),
        query(f"{by} (increase(fio_run_failures_total{{{sc.job}}}[$__rate_interval]))", "failures {{host}} {{target}} {{jobname}}",
              ref="B")],
        "fio runs finished and failed per interval, per host, target and job (a failure's reason is in the exporter's log).")


def last_runs(sc: Scope) -> table.Panel:
    return (table_panel("Last run per job", "One row per job: its last run's labels and how long ago it ended.",
                        "s", 12, 8, query(f"fio_run_info{{{sc.job}}}", instant=True, fmt=TABLE),
                        query(f"time() - fio_run_end_timestamp_seconds{{{sc.job}}}", instant=True, fmt=TABLE, ref="B"))
            .with_transformation(MERGE))


def fio_dashboard(sc: Scope) -> db.Dashboard:
    d = (with_scope(sc, base(UIDS["fio"], "fioscope / fio results", ["fio", "etcd"]), "fio_run_info")
         .with_variable(query_var("jobname", "fio job", f"label_values(fio_run_info{{{sc.host}}}, jobname)"))
         .annotation(run_annotation(sc)))
    return rows(sc, d, ("etcd WAL test", [fsync_p99, fsync_verdict, fsync_history]),
                ("Throughput", [fio_iops, fio_bandwidth]),
                ("Completion latency", [clat_percentiles, latency_heatmap]),
                ("History", [runs_and_failures, last_runs]))


# ---------------------------------------------------------------------------- 3. response curve and comparison
USABLE_SHARE = 0.7  # of the curve's peak IOPS: the usual rule of thumb for a load the disk serves without latency climbing


def sweep_iops(sc: Scope) -> str:
    return f'sum by (host, target, jobname) (fio_iops{{{sc.host},jobname=~"sweep-qd.*",ddir=~"read|write|trim"}})'


def sweep_p99(sc: Scope) -> str:
    return f'max by (host, target, jobname) (fio_run_latency_seconds{{{sc.host},jobname=~"sweep-qd.*",stage="clat",quantile="0.99"}})'


def response_curve(sc: Scope) -> xychart.Panel:
    return (xychart.Panel().title("IOPS against p99 latency per queue depth").datasource(DS).height(10).span(16).unit("s")
            .description("The hockey stick: where latency starts to climb is the usable maximum. Run the iodepth-sweep profile.")
            .with_target(query(sweep_iops(sc), "{{target}} {{jobname}}", instant=True, fmt=TABLE))
            .with_target(query(sweep_p99(sc), "{{target}} {{jobname}}", ref="B", instant=True, fmt=TABLE))
            .with_transformation(dm.DataTransformerConfig(id_val="joinByField", options={"byField": "jobname", "mode": "inner"})))


def usable_maximum(sc: Scope) -> stat.Panel:
    return stat_panel(f"Usable maximum: {USABLE_SHARE * 100:g} % of the curve's peak IOPS", "iops",
                      query(f"{USABLE_SHARE:g} * max({sweep_iops(sc)})", instant=True), [(None, "blue")],
                      "A rule of thumb for the load the disk serves without its latency climbing; the curve shows where it climbs.",
                      w=8, h=10)


def per_queue_depth(sc: Scope) -> table.Panel:
    return (table_panel("Per queue depth", "Each sweep step's IOPS and p99 completion latency, for every target swept.", "short", 24, 8,
                        query(sweep_iops(sc), instant=True, fmt=TABLE), query(sweep_p99(sc), ref="B", instant=True, fmt=TABLE))
            .with_transformation(MERGE))


def candidate_vs_baseline(name: str, expr: str) -> stat.Panel:
    """``expr``: a last-run figure of one target (``%s``), compared as candidate / baseline - 1."""
    change = query(f"{expr % '$candidate'} / {expr % '$baseline'} - 1", instant=True)
    return stat_panel(f"{name}: candidate vs baseline", "percentunit", change,
                      [(None, "text")], "Change of the candidate's last run against the baseline's.", w=6)


def curve_dashboard(sc: Scope) -> db.Dashboard:
    # the same job on two targets (disks, or a disk before and after a change), on any host
    d = (with_scope(sc, base(UIDS["curve"], "fioscope / Response curve and comparison", ["fio", "comparison"]), "fio_run_info")
         .with_variable(query_var("jobname", "fio job", f"label_values(fio_run_info{{{sc.host}}}, jobname)", multi=False))
         .with_variable(query_var("baseline", "Baseline target", f"label_values(fio_run_info{{{sc.host}}}, target)", multi=False))
         .with_variable(query_var("candidate", "Candidate target", f"label_values(fio_run_info{{{sc.host}}}, target)", multi=False)))
    d = rows(sc, d, ("Response curve (iodepth sweep)", [response_curve, usable_maximum]), ("Baseline against candidate", [per_queue_depth]))
    one = sc.job + ',target="%s"'
    for name, expr in [("IOPS", 'sum(fio_iops{' + one + ',ddir=~"read|write|trim"})'),
                       ("Bandwidth", "sum(fio_bandwidth_bytes_per_second{" + one + "})"),
                       ("clat p99", 'max(fio_run_latency_seconds{' + one + ',stage="clat",quantile="0.99"})'),
                       ("fdatasync p99", 'max(fio_run_latency_seconds{' + one + ',ddir="sync",quantile="0.99"})')]:
        d = d.with_panel(candidate_vs_baseline(name, expr))
    return d


def render(settings: dict | None = None) -> dict[str, str]:
    """The dashboards' JSON by path relative to the repository, for ``settings`` (default: alerts/config.yaml as it is)."""
    sc = scope(settings or load_settings())
    out = {}
    for name, builder in (("disk-under-load", disk_dashboard), ("fio-results", fio_dashboard), ("response-curve", curve_dashboard)):
        out[f"dashboards/{name}.json"] = json.dumps(builder(sc).build(), cls=JSONEncoder, indent=2, sort_keys=True) + "\n"
    return out
