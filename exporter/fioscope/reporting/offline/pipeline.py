"""The offline diagnosis in one pass: load, counters, backfill, rules evaluated, one ``DiagnosisInput`` (``offline_input``);
``offline_diagnosis`` hands it to the pure ``diagnose`` and renders the page.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

from fioscope_mixin.columns import CPU_MODES

from ...thresholds import Thresholds
from ..cause_episodes import cause_findings
from ..diagnosis import DiagnosisInput, diagnose
from ..diagnosis_page import diagnosis_report
from ..html import Report
from ..live import cause_settings, device_names, fio_figures
from ..prometheus_api import Prometheus
from ..timeline import CpuTimeline, from_iostat_samples
from .counters import Family, counter_points, fio_rate_series, fio_series, merged
from .load import (
    FioRun,
    IostatCapture,
    KernelSamples,
    bundle_counters,
    bundle_fio_rates,
    check_bounds,
    coverage,
    input_notes,
    load_fio_runs,
    load_iostat,
)
from .rules import Rules, evaluate_alerts, evaluate_recording_over, evaluation_grid, generate_rules, on_grid, rule_levels
from .tsdb import TemporaryPrometheus, backfill, write_openmetrics


@contextlib.contextmanager
def backfilled(captures: list[IostatCapture], runs: list[FioRun], work: Path, rules: Rules, extra: Family | None = None,
               kernel: dict[str, KernelSamples] | None = None) -> Iterator[TemporaryPrometheus]:
    """A temporary Prometheus serving the captures as node_exporter counters, the fio runs, ``extra``
    series, and the recording rules' output on the evaluation grid (``server.grid``); ``rules``: generated from the command's
    settings (``generate_rules``); ``kernel``: iostat file -> its host's kernel counters where a capture has them (``counter_points``)."""
    check_bounds(captures)
    end = max(c.samples[-1].timestamp for c in captures)
    hosts = sorted({c.host for c in captures})
    devices = len({(c.host, d) for c in captures for s in c.samples for d in s.disks}) + len(hosts)
    spans = coverage(captures)
    grid = evaluation_grid(spans, devices, rules.thresholds.evaluation_interval)
    work.mkdir(parents=True, exist_ok=True)
    data, om = work / "data", work / "series.om"
    fine = min(5.0, grid.step / 3)  # fio runs: when one starts and ends, finer than the grid
    times = [t for a, b in on_grid(spans, grid, fine) for t in _range(a, b, fine)]
    raw = merged([fio_series(runs, hosts[0], grid.start, end, times), *([extra] if extra else [])])
    write_openmetrics(om, [raw], (p for c in captures for p in counter_points(c, grid, (kernel or {}).get(c.path))))
    backfill(om, data, "backfilling the iostat samples")
    om.unlink()
    server = TemporaryPrometheus(data, work)
    server.grid = grid
    try:
        server.start()
        prom = Prometheus(server.url, flag="temporary Prometheus")
        for i, level in enumerate(rule_levels(rules.recording)):
            recorded = work / f"level{i}.om"
            write_openmetrics(recorded, (evaluate_recording_over(prom, rule, spans, grid) for rule in level))
            blocks = work / f"blocks{i}"
            backfill(recorded, blocks, f"backfilling recording rules (level {i})")
            recorded.unlink()
            server.stop()
            for block in blocks.iterdir():
                block.rename(data / block.name)
            server.start()
        yield server
    finally:
        server.stop()


def _range(a: float, b: float, step: float) -> Iterator[float]:
    t = a
    while t <= b:
        yield t
        t += step


def offline_diagnosis(paths: list[str], results: str | None, devices: list[str] | None, thresholds: Thresholds,
                      title: str = "", lead: list[str] | None = None,
                      failed_loads: list[tuple[float, float, str, str]] | None = None,
                      kernel: dict[str, KernelSamples] | None = None) -> Report:
    """The diagnosis of iostat files (+ fio results) as a page (``offline_input``, ``diagnose``, ``diagnosis_report``)."""
    return diagnosis_report(diagnose(offline_input(paths, results, devices, thresholds, title, lead, failed_loads, kernel)))


def offline_input(paths: list[str], results: str | None, devices: list[str] | None, thresholds: Thresholds,
                  title: str = "", lead: list[str] | None = None,
                  failed_loads: list[tuple[float, float, str, str]] | None = None,
                  kernel: dict[str, KernelSamples] | None = None) -> DiagnosisInput:
    """What the diagnosis of iostat files (+ fio results) judges: ``title`` and ``lead`` (summary lines first) where a caller has its
    own (``fioscope capture``), so the report is whole when it is made. ``failed_loads``: (start, end, reason, device)
    of loads that failed (capture's phases); a run within one counts as failed, and the device's verdict is inconclusive.
    ``kernel``: iostat file -> the counters a capture of its one host read (``fioscope capture`` hands its samples over:
    the rules read them as counted, not rebuilt from iostat.json's rates); without it, a capture bundle's own
    (``bundle_counters``). A bundle's fio status reports (``bundle_fio_rates``) give fio's live write rate, as the exporter
    does: what the write-back cliff reads."""
    captures = [c for p in paths for c in load_iostat(p, devices)]
    check_bounds(captures)
    kernel = kernel if kernel is not None else bundle_counters(paths, captures)
    start = min(c.samples[0].timestamp for c in captures)
    end = max(c.samples[-1].timestamp for c in captures)
    runs = [r for r in load_fio_runs(results) if r.end >= start and r.start <= end]
    for run in runs:
        run.failed = run.failed or next((why for a, b, why, _ in failed_loads or [] if a - 1 <= run.start and run.end <= b + 1), "")
    hosts = sorted({c.host for c in captures})
    rules = generate_rules(thresholds)  # once: the recording rules backfilled, the alerts evaluated, their summaries
    with tempfile.TemporaryDirectory(prefix="fioscope-report-") as tmp, \
            backfilled(captures, runs, Path(tmp), rules, fio_rate_series(bundle_fio_rates(paths, captures), hosts[0]),
                       kernel=kernel) as server:
        prom = Prometheus(server.url, flag="temporary Prometheus")
        declared = {r.device: ", ".join(f"{k} {v}" for k, v in r.limits.items() if v) for r in runs if r.device and r.limits}
        source = ", ".join(paths) + (f" + fio results {results}" if results else "")
        timelines = [t for c in captures for t in from_iostat_samples(c.host, [(s.timestamp, s.disks) for s in c.samples])]
        cpus = [CpuTimeline(c.host, {m: [(s.timestamp, s.cpu.get(m, 0.0)) for s in c.samples] for m in CPU_MODES}) for c in captures]
        step = server.grid.step
        offline = (f"Offline: {sum(len(c.samples) for c in captures)} iostat samples from host(s) {', '.join(hosts)}; "
                   "verdicts by fioscope's alert rules evaluated over them in a temporary Prometheus.")
        return DiagnosisInput(start=start, end=end, step=step, timelines=timelines, cpus=cpus,
                              runs=[r.window(hosts[0]) for r in runs], fired=evaluate_alerts(prom, rules.alerting, start, end, step),
                              names=device_names(prom, end, ""), declared=declared, fio=fio_figures(prom, start, end, ""),
                              thresholds=thresholds, summaries=rules.summaries, devices=devices, resolution="every iostat sample",
                              title=title or f"Disk diagnosis — offline from {source}", lead=[*(lead or []), offline],
                              notes=input_notes(captures), failed_loads=list(failed_loads or []),
                              causes=cause_findings(prom, start, end, step, "", "", *cause_settings(thresholds)))
