"""What the rule modules share: the template parameters taken from alerts/config.yaml
(node-mixin style: PromQL templates with ``%(diskSelector)s``) and the rule builders."""

from __future__ import annotations

import math
from dataclasses import dataclass

from fioscope_mixin.names import DASHBOARD_UIDS
from fioscope_mixin.settings import SettingsError, duration
from fioscope_mixin.units import parse_duration

# the join of two series of one device (a template: the cluster label first where one is set)
ON = "on (%(clusterLabels)sinstance, job, device)"


def fmt(value: float) -> str:
    """A threshold as PromQL prints it: 0.01, 5, 1e-09."""
    return f"{value:g}"


# Prometheus's default lookback: an instant selector sees a series this long after its last sample
LOOKBACK_DELTA = "5m"

# the range of the rates' recorded maxima (recording.MAXIMA), which the step-down's, the stall's and the write-back
# cliff's peaks read: a lookback shorter than it would still see that far back
MAXIMA_RANGE = "2m"


def left_open(seconds: float) -> str:
    """A range of ``seconds`` that holds the same samples on Prometheus 2.x (ranges include both ends) and 3.x (left-open):
    a millisecond short of it, so an alert fires at the same evaluation on both."""
    return f"{round(seconds * 1000) - 1}ms"


def params(s: dict) -> dict[str, str]:
    """Every value a template may use, as text."""
    sel, st, t = s["selectors"], s["stack"], s["thresholds"]
    thr = t["throttle"]
    scrape = duration(s, "stack", "scrape_interval")
    short_burst = duration(s, "thresholds", "throttle", "short_burst")
    # the envelope's windows hold window_scrapes scrapes at most (1m at 15 s scrapes, 20 s at 5 s: fast at any interval)
    # and decide nothing until they hold the scrapes their tests need (after a scrape gap, a restart, a new target).
    # Each is at least as long as those scrapes: fio's 20 s held two 15 s scrapes only on a host scraped less than 5 s
    # before the rules evaluate, a third of the hosts, always the same third (the others never paged under fio)
    def scraped(seconds: float, least: int) -> tuple[int, float]:
        """(the scrapes a window of ``seconds`` must hold, at least ``least``; the window, at least that long)"""
        samples = max(least, int(seconds / scrape + 1e-9))
        return samples, max(seconds, samples * scrape)
    fio_samples, fio_window = scraped(duration(s, "thresholds", "throttle", "fio_window"), 2)
    samples, window = scraped(min(duration(s, "thresholds", "throttle", "window"), thr["window_scrapes"] * scrape), 3)
    held_start = max(samples, thr["window_scrapes"], 4)  # the held test's start band's scrapes (heldStartSamples)
    stall_window = duration(s, "thresholds", "stall", "window")
    cluster = sel["cluster_label"]
    cause_span = duration(s, "thresholds", "throttle", "page_with_cause")
    for keys in (("thresholds", "throttle", "step_down_lookback"), ("thresholds", "write_cliff_window")):
        if duration(s, *keys) < parse_duration(MAXIMA_RANGE):
            raise SettingsError(f"{'.'.join(keys)}: at least {MAXIMA_RANGE} (its peaks are read from the rates' {MAXIMA_RANGE} maxima)")
    for keys in (("thresholds", "throttle", "baseline_median_interval"), ("thresholds", "columns_interval")):
        if duration(s, *keys) >= parse_duration(LOOKBACK_DELTA):
            raise SettingsError(f"{'.'.join(keys)}: under {LOOKBACK_DELTA} (a record read later than Prometheus's "
                                f"{LOOKBACK_DELTA} lookback lapses between two evaluations)")
    # first in every on (...) / by (...) list: "" or "cluster, " (node-mixin's clusterLabel)
    cluster_labels = f"{cluster}, " if cluster else ""
    p = {
        "clusterLabels": cluster_labels,
        # an annotation's lookup of another series of the alert's device: matcher and printf argument
        "clusterMatcher": f"{cluster}='%s'," if cluster else "",
        "clusterArg": f"$labels.{cluster} " if cluster else "",
        "nodeSelector": sel["node"],
        "diskSelector": f"{sel['node']},{sel['device']}",
        "fioSelector": sel["fioscope"],
        "etcdSelector": sel["etcd"],
        # Prometheus's own series of fioscope's rule groups (its rule_group label: "<rule file>;<group name>")
        "fioscopeRuleGroups": f'{sel["prometheus"]},rule_group=~".*;fioscope-.*"',
        "ruleEvaluationBusyRatio": fmt(t["rule_evaluation_busy_ratio"]),
        "ruleEvaluationBusyPercent": fmt(100 * t["rule_evaluation_busy_ratio"]),
        "ruleEvaluationWindow": t["rule_evaluation_window"],
        # what identifies one fio result (docs/contracts.md): the same job on two targets or hosts never collides
        "fioResult": cluster_labels + "host, instance, job, target, device, jobname, hostname",
        "rateWindow": st["rate_window"],
        "fsyncHistogramWindow": t["fsync_histogram_window"],
        "fsyncHistogramInterval": t["fsync_histogram_interval"],
        "etcdWindow": t["etcd_window"],
        "writeCliffWindow": t["write_cliff_window"],
        "baselineWindow": thr["baseline_window"],
        "resultsStaleSeconds": fmt(duration(s, "thresholds", "results_stale_after")),
        "unsaturatedUtil": fmt(thr["util_min_ratio"] / 2),
        "fioWindow": left_open(fio_window),
        "window": left_open(window),
        # a fio job's throttling page covers its device this long after fio's end (its keep_firing_for, at least the window)
        "fioPageSpan": left_open(max(window, duration(s, "thresholds", "disk_keep_firing_for"))),
        # the per-scrape samples a window must hold before its flatness or envelope test decides (two under fio at 15 s)
        "fioWindowSamples": fmt(fio_samples),
        "windowSamples": fmt(samples),
        # the range those scrapes are counted over: the window and half a scrape. A sample is stamped with its
        # scrape's start and stored at its end, so a group that evaluates while a scrape is in flight does not see
        # its newest sample yet; over the window alone it then counted one scrape short, on every evaluation of a
        # host whose scrapes end after the group's turn (a lab disk capped at 700 IOPS was never flagged)
        "fioWindowScrapesRange": f"{round((fio_window + scrape / 2) * 1000)}ms",
        "windowScrapesRange": f"{round((window + scrape / 2) * 1000)}ms",
        # the held test's spread: between these quantiles of the lookback's busy IOPS once it holds held_spread_windows windows
        "heldSpreadSamples": fmt(thr["held_spread_windows"] * samples),
        # ... before that, every one within the start's band from a window's scrapes (window_scrapes, at least four:
        # the 30 s window's three are too few to tell a cap from demand noise), within the held band from two more
        "heldStartSamples": fmt(held_start),
        "heldWideSamples": fmt(held_start + 2),
        "heldUpperQuantile": fmt(1 - thr["held_quantile"]),
        # the page that follows the cause record: provider_cap in every evaluation of page_with_cause (a range a
        # millisecond short: the same evaluations on 2.x and 3.x)
        "causePageSpan": left_open(max(cause_span, 0.002)),
        "causePageSamples": fmt(max(1, int(cause_span / duration(s, "stack", "evaluation_interval") + 1e-9))),
        "baselineInterval": thr["baseline_interval"],
        "baselineMedianInterval": thr["baseline_median_interval"],
        # "" (0s): every evaluation, as the other groups
        "columnsInterval": t["columns_interval"] if duration(s, "thresholds", "columns_interval") else "",
        # the span a baseline sample's util is judged over: its averaged interval (the one before the last) of
        # rate-window averages (each reaching rateWindow back), and every scrape since
        "baselineUtilLookback":
            f"{2 * duration(s, 'thresholds', 'throttle', 'baseline_interval') + duration(s, 'stack', 'rate_window'):g}s",
        "stepDownLookback": thr["step_down_lookback"],
        "peakLookback": thr["peak_lookback"],
        # the lookback's peak is of a level held this long: a short burst's scrapes (at most ceil(burst / scrape) + 1 of
        # them, partly) and one scrape each side; at least three scrapes
        "peakHold": left_open(max(3 * scrape, short_burst + 2 * scrape)),
        "shortBurstScrapes": fmt(math.ceil(short_burst / scrape) + 1),
        # the step of the subqueries over recorded series: one point an evaluation
        "evaluationStep": f"{duration(s, 'stack', 'evaluation_interval'):g}s",
        "queueWindow": t["queue_window"],
        "virtualModels": thr["virtual_models"],
        "localModels": thr["local_models"],
        "remoteModels": thr["remote_models"],
        "remoteTransports": thr["remote_transports"],
        "cloudMachines": thr["cloud_machines"],
        "stallWindow": t["stall"]["window"],
        # a stall is judged on a window that holds its scrapes, one missed at most (counted over the window and half a
        # scrape, as windowScrapesRange): in a scrape gap the completions' rate is extrapolated from the few scrapes
        # before it, a fraction of the true one (a capped volume read as stalled: random families, bandwidth seed 10)
        "stallWindowSamples": fmt(max(2, int(stall_window / scrape + 1e-9) - 1)),
        "stallScrapesRange": f"{round((stall_window + scrape / 2) * 1000)}ms",
    }
    for key, value in (list(t.items()) + [(f"throttle_{k}", v) for k, v in thr.items()]
                       + [(f"stall_{k}", v) for k, v in t["stall"].items()]):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            p[key] = fmt(value)
    return p


def runbook_base(s: dict) -> str:
    """links.runbook, or the runbook the exporter of this stack serves (fioscope.http's /runbook)."""
    st = s["stack"]
    return s["links"]["runbook"] or f"http://{st['listen_host']}:{st['ports']['fioscope']}/runbook"


@dataclass(frozen=True)
class Record:
    """A recording rule: name, PromQL template, the iostat -x column it reproduces (docs)."""

    record: str
    expr: str
    iostat: str = ""
    labels: tuple[tuple[str, str], ...] = ()

    def render(self, p: dict[str, str]) -> dict:
        rule: dict = {"record": self.record, "expr": self.expr % p}
        if self.labels:
            rule["labels"] = dict(self.labels)
        return rule


@dataclass(frozen=True)
class Alert:
    """An alert as data; ``expr``, ``summary`` and ``description`` are templates filled from the settings."""

    name: str
    severity: str
    expr: str
    duration: str  # key of `durations` in alerts/config.yaml
    summary: str
    description: str
    dashboard: str  # key of DASHBOARD_UIDS
    # one alert per episode: keeps firing thresholds.disk_keep_firing_for after its condition lapses (a disk's condition
    # comes and goes with the load; each resolve and re-fire would be a notification)
    keep_firing: bool = False

    def render(self, s: dict, p: dict[str, str]) -> dict:
        rule: dict = {"alert": self.name, "expr": self.expr % p}
        if duration(s, "durations", self.duration) > 0:
            rule["for"] = s["durations"][self.duration]
        if self.keep_firing and duration(s, "thresholds", "disk_keep_firing_for") > 0:
            rule["keep_firing_for"] = s["thresholds"]["disk_keep_firing_for"]
        rule["labels"] = {"severity": self.severity}
        rule["annotations"] = {
            "summary": self.summary % p,
            "description": self.description % p,
            "runbook_url": f"{runbook_base(s)}#{self.name.lower()}",
            "dashboard_url": f"{s['links']['grafana'].rstrip('/')}/d/{DASHBOARD_UIDS[self.dashboard]}",
        }
        return rule
