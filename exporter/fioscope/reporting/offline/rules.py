"""fioscope's rules evaluated over the temporary TSDB, on the evaluation grid: recording rules as range queries of
their ``expr`` (one dependency level at a time), alerts fired where their condition held for their ``for:``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator

from fioscope_mixin.prometheus import rule_groups
from fioscope_mixin.settings import SettingsError
from fioscope_mixin.units import UnitError, parse_duration

from ...thresholds import Thresholds
from .. import ReportError
from ..diagnosis import Firing, spans
from ..prometheus import Prometheus
from .counters import MIN_GRID_STEP, Family, Grid, _labels

RULE_BUDGET = 80_000  # samples one recording rule may produce over the captures (all its series)


def rule_levels(groups: list[dict]) -> list[list[dict]]:
    """Recording rules ordered so that each level reads only raw series and lower levels."""
    rules = [r for g in groups for r in g.get("rules", []) if "record" in r]
    names = {r["record"] for r in rules}
    level: dict[str, int] = {}

    def depth(rule: dict, seen: frozenset = frozenset()) -> int:
        if rule["record"] in level:
            return level[rule["record"]]
        deps = [n for n in names if n != rule["record"] and re.search(rf"(?<![\w:]){re.escape(n)}(?![\w:])", rule["expr"])]
        by_name = {r["record"]: r for r in rules}
        level[rule["record"]] = 1 + max((depth(by_name[d], seen | {rule["record"]}) for d in deps if d not in seen), default=-1)
        return level[rule["record"]]

    for r in rules:
        depth(r)
    out: list[list[dict]] = [[] for _ in range(max(level.values(), default=-1) + 1)]
    for r in rules:
        out[level[r["record"]]].append(r)
    return out


def evaluate_recording(prom: Prometheus, rule: dict, start: float, end: float,
                       step: float) -> dict[str, dict[str, list[tuple[float, float]]]]:
    """A recording rule's output over the window, as the rule manager would have recorded it."""
    out: dict[str, list[tuple[float, float]]] = {}
    for series in prom.range(rule["expr"], start, end, step):
        labels = {k: v for k, v in series.labels.items() if k != "__name__"} | {k: str(v) for k, v in (rule.get("labels") or {}).items()}
        out[_labels(**labels)] = list(zip(series.times, series.values))
    return {rule["record"]: out}


def load_rules(name: str, thresholds: Thresholds) -> list[dict]:
    """The groups of alerts/<name> as the mixin generates them from the command's settings; every alert's ``for:`` checked up front."""
    try:
        groups = rule_groups(thresholds.settings)[f"alerts/{name}"]
    except SettingsError as exc:
        raise ReportError(f"cannot generate the rules: {exc}") from None
    for rule in (r for g in groups for r in g.get("rules", []) if "alert" in r):
        rule_hold(rule, f"alerts/{name}")
    return groups


def rule_hold(rule: dict, source: str = "the alert rules") -> float:
    """An alert's ``for:`` in seconds (the one duration parser: Prometheus's ``1h30m``, ``1d``); a mistyped one is an
    error naming the alert, never 0 s (the alert would count as fired at once)."""
    try:
        return parse_duration(rule.get("for", "0s"))
    except UnitError as exc:
        raise ReportError(f"{source}: alert {rule.get('alert')!r}: for: {exc}") from None


def evaluate_alerts(prom: Prometheus, groups: list[dict], start: float, end: float, step: float) -> list[Firing]:
    """Each alert's expr over the window; fired where it held for its ``for:`` duration."""
    fired = []
    for rule in (r for g in groups for r in g.get("rules", []) if "alert" in r):
        hold = rule_hold(rule)
        for series in prom.range(rule["expr"], start, end, step):
            labels = {**series.labels, **(rule.get("labels") or {}), "alertname": rule["alert"]}
            for a, b in spans(series.times, step):
                if b - a >= hold:
                    fired.append(Firing(rule["alert"], labels, a + hold, b))
    return fired


def evaluation_grid(spans: list[tuple[float, float]], series: int, interval: float = MIN_GRID_STEP) -> Grid:
    """The stack's evaluation interval, coarser (a multiple of it) where the captures cover a long time or
    many devices: a recording rule's output stays within RULE_BUDGET samples (gaps cost nothing)."""
    covered = sum(b - a for a, b in spans)
    points = max(100, RULE_BUDGET // max(1, series))
    step = max(interval, math.ceil(covered / points / interval) * interval)
    return Grid(spans[0][0], step)


def on_grid(spans: list[tuple[float, float]], grid: Grid, step: float) -> Iterator[tuple[float, float]]:
    """Each span from its first grid instant, so every piece of the evaluation lines up."""
    for a, b in spans:
        yield grid.start + math.ceil((a - grid.start) / step) * step, b


def evaluate_recording_over(prom: Prometheus, rule: dict, spans: list[tuple[float, float]], grid: Grid) -> Family:
    """``evaluate_recording`` over each covered span (nothing is evaluated in a gap), one family."""
    out: dict[str, list[tuple[float, float]]] = {}
    for a, b in on_grid(spans, grid, grid.step):
        for labels, points in evaluate_recording(prom, rule, a, b, grid.step)[rule["record"]].items():
            out.setdefault(labels, []).extend(points)
    return {rule["record"]: out}
