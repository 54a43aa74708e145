"""``fioscope report``: which report the flags ask for, and writing it."""

from __future__ import annotations

from pathlib import Path

from ..thresholds import Thresholds
from . import ReportError, duration_flag
from .results import Sample, load_results, select


def _side(value: str, flag: str, results: str | None) -> tuple[list[Sample], str]:
    if Path(value).is_dir():
        return load_results(value, flag), value
    if "=" in value:
        if not results:
            raise ReportError(f"{flag} {value!r}: a selector needs --results DIR")
        return select(load_results(results), value, flag), value
    raise ReportError(f"{flag} {value}: not a directory")


def run_report(args, thresholds: Thresholds) -> Path:
    """``thresholds``: the command's settings (alerts/config.yaml with its --set), loaded once by the CLI."""
    if args.baseline or args.candidate:
        from .comparison import comparison_report

        if not (args.baseline and args.candidate):
            raise ReportError("--baseline and --candidate go together")
        base, base_name = _side(args.baseline, "--baseline", args.results)
        cand, cand_name = _side(args.candidate, "--candidate", args.results)
        report = comparison_report(base, cand, (base_name, cand_name), thresholds)
    elif args.iostat:
        from .offline.pipeline import offline_diagnosis

        report = offline_diagnosis(args.iostat, args.results, args.device, thresholds)
    elif args.prometheus_url:
        from .diagnosis import diagnose
        from .diagnosis_page import diagnosis_report
        from .live import live_input
        from .prometheus_api import Prometheus, window

        start, end = window(args.start, args.end, args.last)
        report = diagnosis_report(diagnose(live_input(Prometheus(args.prometheus_url), start, end, args.host, args.device, thresholds)))
    elif args.results:
        from .performance import performance_report

        target = duration_flag(args.latency_target, "--latency-target") if args.latency_target else None
        report = performance_report(load_results(args.results), args.results, target, thresholds)
    else:
        raise ReportError("say what to report on: --prometheus.url, --iostat FILE..., --results DIR, or --baseline/--candidate")
    from .html import write_report  # matplotlib: imported once the input is known to be good

    return write_report(report, args.output, args.pdf)
