"""fioscope's rules evaluated over the temporary TSDB, on the evaluation grid: recording rules as range queries of
their ``expr`` (one dependency level at a time), alerts fired where their condition held for their ``for:``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass

from fioscope_mixin.prometheus import rule_groups
from fioscope_mixin.settings import SettingsError
from fioscope_mixin.units import UnitError, parse_duration

from ...thresholds import Thresholds
from .. import ReportError
from ..diagnosis import Firing, rule_summaries
from ..prometheus_api import Prometheus, spans
from .counters import MIN_GRID_STEP, Family, Grid, _labels

RULE_BUDGET = 80_000  # samples one recording rule may produce over the captures (all its series)


MATCHER = re.compile(r'(\w+)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')


def _may_match(expr: str, name: str, labels: dict) -> bool:
    """Whether a selector of ``name`` in ``expr`` may select a rule's output with these static labels."""
    for m in re.finditer(rf"(?<![\w:]){re.escape(name)}(?![\w:])(\{{[^}}]*\}})?", expr):
        ok = True
        for key, op, value in MATCHER.findall(m.group(1) or ""):
            if key in labels:
                hit = re.fullmatch(value, str(labels[key])) is not None if "~" in op else str(labels[key]) == value
                ok = ok and hit == (op in ("=", "=~"))
        if ok:
            return True
    return False


def rule_levels(groups: list[dict]) -> list[list[dict]]:
    """Recording rules ordered so that each level reads only raw series and lower levels. A rule reading its own record
    name (the causes ``unless`` a higher cause; a two-dimension ceiling ``unless`` a one-dimension one) reads what the rules
    before it in its group recorded in the same evaluation: it comes after those its selector may match."""
    rules = [r for g in groups for r in g.get("rules", []) if "record" in r]
    by_name: dict[str, list[int]] = {}
    for i, r in enumerate(rules):
        by_name.setdefault(r["record"], []).append(i)
    level: dict[int, int] = {}

    def depth(i: int, seen: frozenset = frozenset()) -> int:
        if i in level:
            return level[i]
        expr, record = rules[i]["expr"], rules[i]["record"]
        deps = [j for name, ids in by_name.items() if re.search(rf"(?<![\w:]){re.escape(name)}(?![\w:])", expr)
                for j in ids if name != record or (j < i and _may_match(expr, name, rules[j].get("labels") or {}))]
        level[i] = 1 + max((depth(j, seen | {i}) for j in deps if j not in seen), default=-1)
        return level[i]

    for i in range(len(rules)):
        depth(i)
    out: list[list[dict]] = [[] for _ in range(max(level.values(), default=-1) + 1)]
    for i, r in enumerate(rules):
        out[level[i]].append(r)
    return out


def evaluate_recording(prom: Prometheus, rule: dict, start: float, end: float,
                       step: float) -> dict[str, dict[str, list[tuple[float, float]]]]:
    """A recording rule's output over the window, as the rule manager would have recorded it."""
    out: dict[str, list[tuple[float, float]]] = {}
    for series in prom.range(rule["expr"], start, end, step):
        labels = {k: v for k, v in series.labels.items() if k != "__name__"} | {k: str(v) for k, v in (rule.get("labels") or {}).items()}
        out[_labels(**labels)] = list(zip(series.times, series.values))
    return {rule["record"]: out}


@dataclass
class Rules:
    """The rule files as the mixin generates them from the command's settings, generated once per report: the recording
    rules backfilled, the alert rules evaluated, and each alert's summary the page shows."""

    thresholds: Thresholds
    recording: list[dict]
    alerting: list[dict]
    summaries: dict[str, str]


def generate_rules(thresholds: Thresholds) -> Rules:
    """Every rule file from the command's settings, once; every alert's ``for:`` checked up front."""
    try:
        files = rule_groups(thresholds.settings)
    except SettingsError as exc:
        raise ReportError(f"cannot generate the rules: {exc}") from None
    recording, alerting = files["alerts/recording.rules.yaml"], files["alerts/alerts.rules.yaml"]
    for name, groups in (("recording.rules.yaml", recording), ("alerts.rules.yaml", alerting)):
        for rule in (r for g in groups for r in g.get("rules", []) if "alert" in r):
            rule_hold(rule, f"alerts/{name}")
    return Rules(thresholds, recording, alerting, rule_summaries(alerting))


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
