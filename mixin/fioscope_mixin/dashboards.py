"""fioscope's Grafana dashboards as code (grafana-foundation-sdk, pinned to the 11.3 build that
matches compose.yaml's grafana/grafana:11.3.0; the ``generate`` extra installs it). Thresholds drawn
on panels come from alerts/config.yaml, the one place they live; with selectors.cluster_label set,
every dashboard gets a cluster variable (multi-cluster).
"""

from __future__ import annotations

import json

from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import heatmap, prometheus, stat, table, timeseries, xychart
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm

from fioscope_mixin.names import DASHBOARD_UIDS as UIDS
from fioscope_mixin.settings import load_settings

DS = dm.DataSourceRef(type_val="prometheus", uid="${datasource}")
# Set by configure() from the settings before the dashboards are built. Every series carries the host its
# scrape job's relabelling named (README "Fleet"); with selectors.cluster_label, also its cluster.
SETTINGS: dict = {}
T: dict = {}
CLUSTER = ""  # the cluster label's name, "" for one cluster per Prometheus
IN_CLUSTER = HOST = DISK = JOB = ""


def configure(settings: dict) -> None:
    global SETTINGS, T, CLUSTER, IN_CLUSTER, HOST, DISK, JOB
    SETTINGS, T, CLUSTER = settings, settings["thresholds"], settings["selectors"]["cluster_label"]
    IN_CLUSTER = f'{CLUSTER}=~"$cluster",' if CLUSTER else ""
    HOST = IN_CLUSTER + 'host=~"$host"'
    DISK = f'{HOST},device=~"$device"'
    JOB = f'{HOST},jobname=~"$jobname"'


# ---------------------------------------------------------------------------- helpers
def query(expr: str, legend: str = "", ref: str = "A", instant: bool = False, fmt: str | None = None) -> prometheus.Dataquery:
    q = prometheus.Dataquery().expr(expr).legend_format(legend or "__auto").ref_id(ref).datasource(DS)
    if instant:
        q = q.instant()
    if fmt:
        q = q.format(fmt)
    return q


def thresholds(*steps: tuple[float | None, str]) -> db.ThresholdsConfig:
    return db.ThresholdsConfig().mode(dm.ThresholdsMode.ABSOLUTE).steps([dm.Threshold(value=v, color=c) for v, c in steps])


def ts(title: str, unit: str, queries: list[prometheus.Dataquery], w: int = 12, h: int = 8, line: list | None = None,
       description: str = "", stack: bool = False) -> timeseries.Panel:
    panel = (timeseries.Panel().title(title).unit(unit).datasource(DS).height(h).span(w).fill_opacity(10)
             .legend(cb.VizLegendOptions().display_mode(cm.LegendDisplayMode.TABLE).placement(cm.LegendPlacement.BOTTOM)
                     .show_legend(True).calcs(["mean", "max", "lastNotNull"])))
    if description:
        panel = panel.description(description)
    for q in queries:
        panel = panel.with_target(q)
    if line:  # alert / SLA lines drawn on the graph
        panel = panel.thresholds(thresholds((None, "transparent"), *line)).thresholds_style(
            cb.GraphThresholdsStyleConfig().mode(cm.GraphThresholdsStyleMode.DASHED))
    if stack:
        panel = panel.stacking(cb.StackingConfig().mode(cm.StackingMode.NORMAL))
    return panel


def stat_panel(title: str, unit: str, q: prometheus.Dataquery, steps: list, w: int = 6, h: int = 5,
               mappings: list | None = None, description: str = "") -> stat.Panel:
    panel = (stat.Panel().title(title).unit(unit).datasource(DS).height(h).span(w).with_target(q)
             .thresholds(thresholds(*steps)).color_mode(cm.BigValueColorMode.BACKGROUND).graph_mode(cm.BigValueGraphMode.NONE)
             .reduce_options(cb.ReduceDataOptions().calcs(["lastNotNull"]).values(False)))
    if mappings:
        panel = panel.mappings(mappings)
    if description:
        panel = panel.description(description)
    return panel


def value_map(mapping: dict[str, tuple[str, str]]) -> list:
    return [dm.ValueMap(options={k: dm.ValueMappingResult(text=text, color=color, index=i)
                                 for i, (k, (text, color)) in enumerate(mapping.items())})]


PROVISIONED_DATASOURCE = "fioscope-prometheus"  # uid in provisioning/grafana/datasources/prometheus.yaml


def datasource_var() -> db.DatasourceVariable:
    return (db.DatasourceVariable("datasource").label("Data source").type("prometheus")
            .current(dm.VariableOption(selected=True, text="Prometheus", value=PROVISIONED_DATASOURCE)))


def per_device(*columns: tuple[str, str]) -> list[prometheus.Dataquery]:
    """One query per iostat column (recorded series, legend prefix) on the selected devices, refs A, B, ..."""
    return [query(f"{series}{{{DISK}}}", f"{legend} {{{{device}}}}", ref=chr(65 + i)) for i, (series, legend) in enumerate(columns)]


def query_var(name: str, label: str, expr: str, multi: bool = True) -> db.QueryVariable:
    var = (db.QueryVariable(name).label(label).datasource(DS).query({"query": expr, "refId": name})
           .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED).sort(dm.VariableSort.ALPHABETICAL_ASC))
    if multi:
        var = var.multi(True).include_all(True).all_value(".*")
    return var


def scope_vars(metric: str) -> list:
    """The data source, the cluster (when selectors.cluster_label is set; one at a time, as node-mixin's) and the host."""
    if not CLUSTER:
        return [datasource_var(), query_var("host", "Host", f"label_values({metric}, host)")]
    return [datasource_var(), query_var("cluster", "Cluster", f"label_values({metric}, {CLUSTER})", multi=False),
            query_var("host", "Host", f'label_values({metric}{{{CLUSTER}=~"$cluster"}}, host)')]


def with_scope(d: db.Dashboard, metric: str) -> db.Dashboard:
    for var in scope_vars(metric):
        d = d.with_variable(var)
    return d


def run_annotation() -> db.AnnotationQuery:
    # fio runs as regions: idle and loaded periods told apart at a glance
    return (db.AnnotationQuery().name("fio runs").datasource(DS).enable(True).icon_color("rgba(255, 152, 48, 0.6)")
            .expr(f"fio_run_running{{{JOB}}} == 1"))


def base(uid: str, title: str, tags: list[str]) -> db.Dashboard:
    return (db.Dashboard(title).uid(uid).tags(["fioscope", *tags]).refresh("10s").time("now-30m", "now")
            .timezone("browser").editable().tooltip(dm.DashboardCursorSync.CROSSHAIR)
            .link(db.DashboardLink("fioscope").type(dm.DashboardLinkType.DASHBOARDS).tags(["fioscope"]).as_dropdown(True)))


def ceiling_panel() -> table.Panel:
    """The inferred ceiling (fioscope:disk_ceiling): which rate the device is pinned at, and at what level."""
    return (table.Panel().title("Inferred ceiling").datasource(DS).height(5).span(12).unit("short")
            .description("Rates that sit flat while the device is saturated and slow, as the throttling alerts name them "
                         "(window: fio = while a fio job loads the device, long = any workload); empty while no ceiling binds. "
                         "Bytes per second for the throughput rows.")
            .with_target(query(f'fioscope:disk_ceiling{{{DISK}}}', instant=True, fmt="table"))
            .with_transformation(dm.DataTransformerConfig(id_val="organize", options={
                "excludeByName": {"Time": True, "__name__": True, "job": True},
                "renameByName": {"Value": "flat at"}})))


# ---------------------------------------------------------------------------- 1. disk under load
def disk_dashboard() -> db.Dashboard:
    sla = T["disk_latency_sla_seconds"]
    th = T["throttle"]
    d = (with_scope(base(UIDS["disk"], "fioscope / Disk under load", ["disk", "iostat"]), "fioscope:disk_util_ratio")
         .with_variable(query_var("device", "Device", f"label_values(fioscope:disk_util_ratio{{{HOST}}}, device)"))
         .with_variable(query_var("jobname", "fio job", f"label_values(fio_run_running{{{HOST}}}, jobname)"))
         .annotation(run_annotation()))
    d = (d.with_row(db.Row("Verdict"))
         .with_panel(stat_panel(
             "Throttling verdict", "none",
             query(f'max by (host, device) (ALERTS{{alertname=~"FioscopeDiskThrottled.*",alertstate="firing",{DISK}}})'
                   f' or max by (host, device) (0 * fioscope:disk_util_ratio{{{DISK}}})', "{{host}} {{device}}", instant=True),
             [(None, "green"), (1, "red")], w=8,
             mappings=value_map({"0": ("not throttled", "green"), "1": ("THROTTLED", "red")}),
             description="A throttling alert fires: a rate (reads, writes, read/write throughput, IOPS or throughput) sits flat at a ceiling "
                         "while util is saturated, the queue full and await far above the device's normal (docs/runbook.md)."))
         .with_panel(stat_panel("fio job running", "none", query(f"max(fio_run_running{{{JOB}}})", instant=True),
                                [(None, "text"), (1, "orange")], w=4, mappings=value_map({"0": ("idle", "text"), "1": ("LOAD", "orange")})))
         .with_panel(ceiling_panel())
         .with_panel(table.Panel().title("Firing alerts").datasource(DS).height(5).span(12).unit("none")
                     .with_target(query(f'ALERTS{{{IN_CLUSTER}alertstate="firing"}}', instant=True, fmt="table"))
                     .with_transformation(dm.DataTransformerConfig(id_val="organize", options={
                         "excludeByName": {"Time": True, "Value": True, "__name__": True, "alertstate": True}})))
         # the device stack as the exporter reads it from sysfs: vg0-data (dm-3) on md0 on vda+vdb
         .with_panel(table.Panel().title("Disk stack (what each device is built on, which targets it holds)").datasource(DS)
                     .height(6).span(24).unit("none")
                     .with_target(query(f"fioscope_disk_info{{{HOST}}}", instant=True, fmt="table"))
                     .with_transformation(dm.DataTransformerConfig(id_val="organize", options={
                         "excludeByName": {"Time": True, "Value": True, "__name__": True, "job": True, "instance": True},
                         "indexByName": {"host": 0, "device": 1, "name": 2, "kind": 3, "parents": 4, "targets": 5}}))))
    d = (d.with_row(db.Row("CPU (iostat avg-cpu)"))
         .with_panel(ts("CPU", "percentunit", [
             query(f"fioscope:cpu_{m}_ratio{{{HOST}}}", f"%{m} {{{{host}}}}", ref=chr(65 + i))
             for i, m in enumerate(("user", "system", "iowait", "steal", "idle", "nice"))], w=24, stack=True,
             description="iostat's %user, %system (with irq and softirq), %iowait, %steal, %idle.")))
    d = (d.with_row(db.Row("Utilisation and merges"))
         .with_panel(ts("Utilisation (%util)", "percentunit", [query(f"fioscope:disk_util_ratio{{{DISK}}}", "{{host}} {{device}}")],
                        line=[(th["util_min_ratio"], "orange"), (T["util_saturated_ratio"], "red")],
                        description="Share of time with a request in flight. Meaningless on NVMe-style parallel devices (runbook)."))
         .with_panel(ts("Merged requests (rrqm/s, wrqm/s)", "reqps", per_device(
             ("fioscope:disk_read_merges_per_second", "rrqm/s"), ("fioscope:disk_write_merges_per_second", "wrqm/s")))))
    d = (d.with_row(db.Row("IOPS"))
         .with_panel(ts("IOPS (r/s, w/s, d/s, f/s)", "iops", per_device(
             ("fioscope:disk_read_iops", "r/s"), ("fioscope:disk_write_iops", "w/s"),
             ("fioscope:disk_discard_iops", "d/s"), ("fioscope:disk_flush_iops", "f/s"))))
         .with_panel(ts("IOPS per scrape (flatness)", "iops", [query(f"fioscope:disk_iops:irate{{{DISK}}}", "{{host}} {{device}}")],
                        description="A capped disk shows a flat line at the cap; a healthy busy disk is noisy.")))
    d = (d.with_row(db.Row("Latency"))
         .with_panel(ts("Latency (r_await, w_await, d_await, f_await)", "s", per_device(
             ("fioscope:disk_read_await_seconds", "r_await"), ("fioscope:disk_write_await_seconds", "w_await"),
             ("fioscope:disk_discard_await_seconds", "d_await"), ("fioscope:disk_flush_await_seconds", "f_await")),
             line=[(th["await_min_seconds"], "orange"), (sla, "red")], description=f"Dashed: the throttling floor and the {sla * 1000:g} ms SLA."))
         .with_panel(ts("Await against the device's normal", "s", per_device(
             ("fioscope:disk_await_seconds", "await"), ("fioscope:disk_await_baseline_seconds", "normal")))))
    d = (d.with_row(db.Row("Queue and request sizes"))
         .with_panel(ts("Queue (aqu-sz)", "short", [query(f"fioscope:disk_queue_size{{{DISK}}}", "{{host}} {{device}}")],
                        line=[(th["queue_min"], "orange"), (T["queue_size_exploding"], "red")]))
         .with_panel(ts("Request sizes (rareq-sz, wareq-sz)", "bytes", per_device(
             ("fioscope:disk_read_request_size_bytes", "rareq-sz"), ("fioscope:disk_write_request_size_bytes", "wareq-sz")))))
    d = (d.with_row(db.Row("Traffic"))
         .with_panel(ts("Throughput (rkB/s, wkB/s, dkB/s)", "Bps", per_device(
             ("fioscope:disk_read_bytes_per_second", "read"), ("fioscope:disk_write_bytes_per_second", "write"),
             ("fioscope:disk_discard_bytes_per_second", "discard")), w=24)))
    return d


# ---------------------------------------------------------------------------- 2. fio results
def fio_dashboard() -> db.Dashboard:
    fsync = T["etcd_fsync_p99_seconds"]
    d = (with_scope(base(UIDS["fio"], "fioscope / fio results", ["fio", "etcd"]), "fio_run_info")
         .with_variable(query_var("jobname", "fio job", f"label_values(fio_run_info{{{HOST}}}, jobname)"))
         .annotation(run_annotation()))
    sync_p99 = f'fio_run_latency_seconds{{{JOB},ddir="sync",stage="lat",quantile="0.99"}}'
    d = (d.with_row(db.Row("etcd WAL test"))
         .with_panel(stat_panel(f"fdatasync p99 (etcd needs < {fsync * 1000:g} ms)", "s", query(sync_p99, "{{jobname}}", instant=True),
                                [(None, "green"), (fsync * T["etcd_fsync_warning_ratio"], "orange"), (fsync, "red")], w=8))
         .with_panel(stat_panel("fdatasync verdict", "none",
                                query(f"max by (host, target, jobname) ({sync_p99} > bool {fsync:g})", "{{host}} {{target}} {{jobname}}", instant=True),
                                [(None, "green"), (1, "red")], w=4, mappings=value_map({"0": ("PASS", "green"), "1": ("FAIL", "red")})))
         .with_panel(ts("fdatasync p99: last run and across runs", "s", [
             query(sync_p99, "last run {{jobname}}"),
             query(f'histogram_quantile(0.99, sum by (host, target, jobname, le) (rate(fio_latency_seconds_bucket{{{JOB},ddir="sync",stage="lat"}}[{T["fsync_histogram_window"]}])))',
                   "all runs, {{jobname}}", ref="B")], line=[(fsync, "red")])))
    d = (d.with_row(db.Row("Throughput"))
         .with_panel(ts("IOPS (live while running)", "iops", [query(f"fio_iops{{{JOB}}}", "{{jobname}} {{ddir}}"),
                                                               query(f"fio_promised_iops{{{JOB}}}", "promised {{jobname}}", ref="B")]))
         .with_panel(ts("Bandwidth (live while running)", "Bps", [query(f"fio_bandwidth_bytes_per_second{{{JOB}}}", "{{jobname}} {{ddir}}")])))
    d = (d.with_row(db.Row("Completion latency"))
         .with_panel(ts("clat percentiles", "s", [
             query(f'fio_run_latency_seconds{{{JOB},stage="clat",quantile="{q}"}}', f"p{float(q) * 100:g} {{{{jobname}}}} {{{{ddir}}}}", ref=chr(65 + i))
             for i, q in enumerate(("0.5", "0.9", "0.99", "0.999", "0.9999"))], line=[(T["disk_latency_sla_seconds"], "red")]))
         .with_panel(heatmap.Panel().title("Latency heatmap (every I/O, fio_latency_seconds)").datasource(DS).height(8).span(12).unit("s")
                     .with_target(query(f'sum by (le) (increase(fio_latency_seconds_bucket{{{JOB}}}[$__rate_interval]))', "{{le}}", fmt="heatmap"))
                     .calculate(False).y_axis(heatmap.YAxisConfig().unit("s"))))
    d = (d.with_row(db.Row("History"))
         .with_panel(ts("Runs and failures", "short", [
             query(f"sum by (host, target, jobname) (increase(fio_runs_total{{{JOB}}}[$__rate_interval]))", "runs {{host}} {{target}} {{jobname}}"),
             query(f"sum by (host, target, jobname) (increase(fio_run_failures_total{{{JOB}}}[$__rate_interval]))", "failures {{host}} {{target}} {{jobname}}", ref="B")]))
         .with_panel(table.Panel().title("Last run per job").datasource(DS).height(8).span(12).unit("s")
                     .with_target(query(f"fio_run_info{{{JOB}}}", instant=True, fmt="table"))
                     .with_target(query(f"time() - fio_run_end_timestamp_seconds{{{JOB}}}", instant=True, fmt="table", ref="B"))
                     .with_transformation(dm.DataTransformerConfig(id_val="merge", options={}))))
    return d


# ---------------------------------------------------------------------------- 3. response curve and comparison
def curve_dashboard() -> db.Dashboard:
    sweep = f'{HOST},jobname=~"sweep-qd.*"'
    # the same job on two targets (disks, or a disk before and after a change), on any host
    d = (with_scope(base(UIDS["curve"], "fioscope / Response curve and comparison", ["fio", "comparison"]), "fio_run_info")
         .with_variable(query_var("jobname", "fio job", f"label_values(fio_run_info{{{HOST}}}, jobname)", multi=False))
         .with_variable(query_var("baseline", "Baseline target", f"label_values(fio_run_info{{{HOST}}}, target)", multi=False))
         .with_variable(query_var("candidate", "Candidate target", f"label_values(fio_run_info{{{HOST}}}, target)", multi=False)))
    iops = f"sum by (host, target, jobname) (fio_iops{{{sweep},ddir=~\"read|write|trim\"}})"
    p99 = f'max by (host, target, jobname) (fio_run_latency_seconds{{{sweep},stage="clat",quantile="0.99"}})'
    d = (d.with_row(db.Row("Response curve (iodepth sweep)"))
         .with_panel(xychart.Panel().title("IOPS against p99 latency per queue depth").datasource(DS).height(10).span(16).unit("s")
                     .description("The hockey stick: where latency starts to climb is the usable maximum. Run the iodepth-sweep profile.")
                     .with_target(query(iops, "{{target}} {{jobname}}", instant=True, fmt="table"))
                     .with_target(query(p99, "{{target}} {{jobname}}", ref="B", instant=True, fmt="table"))
                     .with_transformation(dm.DataTransformerConfig(id_val="joinByField", options={"byField": "jobname", "mode": "inner"})))
         .with_panel(stat_panel("Usable maximum: 70 % of the curve's peak IOPS", "iops", query(f"0.7 * max({iops})", instant=True),
                                [(None, "blue")], w=8, h=10)))
    d = (d.with_row(db.Row("Baseline against candidate"))
         .with_panel(table.Panel().title("Per queue depth").datasource(DS).height(8).span(24).unit("short")
                     .with_target(query(iops, instant=True, fmt="table"))
                     .with_target(query(p99, ref="B", instant=True, fmt="table"))
                     .with_transformation(dm.DataTransformerConfig(id_val="merge", options={}))))
    one = f'{JOB},target="%s"'
    compare = [
        ("IOPS", "sum(fio_iops{%s,ddir=~\"read|write|trim\"})" % one),
        ("Bandwidth", "sum(fio_bandwidth_bytes_per_second{%s})" % one),
        ("clat p99", "max(fio_run_latency_seconds{%s,stage=\"clat\",quantile=\"0.99\"})" % one),
        ("fdatasync p99", "max(fio_run_latency_seconds{%s,ddir=\"sync\",quantile=\"0.99\"})" % one),
    ]
    for name, expr in compare:
        d = d.with_panel(stat_panel(f"{name}: candidate vs baseline", "percentunit",
                                    query(f"{expr % '$candidate'} / {expr % '$baseline'} - 1", instant=True),
                                    [(None, "text")], w=6, description="Change of the candidate's last run against the baseline's."))
    return d


def render(settings: dict | None = None) -> dict[str, str]:
    """The dashboards' JSON by path relative to the repository, for ``settings`` (default: alerts/config.yaml as it is)."""
    configure(settings or load_settings())
    out = {}
    for name, builder in (("disk-under-load", disk_dashboard), ("fio-results", fio_dashboard), ("response-curve", curve_dashboard)):
        out[f"dashboards/{name}.json"] = json.dumps(builder().build(), cls=JSONEncoder, indent=2, sort_keys=True) + "\n"
    return out
