"""Comparison report: baseline against candidate, workload by workload, queue depth by depth.

Workloads are matched on what the job did (rw, block size, direction), not on where it ran,
so two targets or two tags of one results directory compare as well as two directories. A
delta is *significant* only where it exceeds ``SIGNIFICANCE`` times the combined run-to-run
spread of the two points (the error bars of the performance report).
"""

from __future__ import annotations

import math

from ..thresholds import Thresholds
from . import humanize
from .charts import response_chart, uses_bandwidth
from .fsync import fsync_verdicts
from .html import Report, Section, Table, Verdict
from .results import Point, Sample, curves, skipped_lines

SIGNIFICANCE = 2.0
METRICS = (  # attribute, spread attribute, label, higher is better
    ("iops", "iops_sd", "IOPS", True),
    ("lat_p99", "p99_sd", "p99 latency", False),
    ("bw", "bw_sd", "bandwidth", True),
)


def _fmt(attr: str, value: float) -> str:
    if attr == "iops":
        return humanize.count(value)
    return humanize.latency(value) if attr == "lat_p99" else humanize.mib_per_s(value)


def judgement(attr: str, change: float, significant: bool) -> str:
    """better / worse for the candidate, or "same" where the change is within the run-to-run spread."""
    if not significant:
        return "same"
    higher_better = next(h for a, _, _, h in METRICS if a == attr)
    return "better" if (change > 0) == higher_better else "worse"


def delta(base: Point, cand: Point, attr: str, spread: str) -> tuple[float, bool]:
    """Relative change of ``attr`` and whether it exceeds the run-to-run spread."""
    b, c = getattr(base, attr), getattr(cand, attr)
    noise = SIGNIFICANCE * math.hypot(getattr(base, spread), getattr(cand, spread))
    change = (c - b) / b if b else (math.inf if c > b else 0.0)  # from nothing: no finite ratio, but a direction
    return change, abs(c - b) > noise and c != b


def _where(depths: list[int], tested: list[int]) -> str:
    """``qd 4–64`` for a run of consecutive tested depths, else each depth: a range must not claim a depth it skips."""
    if len(depths) == 1:
        return f"at qd {depths[0]}"
    first, last = tested.index(depths[0]), tested.index(depths[-1])
    if tested[first:last + 1] == depths:
        return f"at qd {depths[0]}–{depths[-1]}"
    return "at qd " + ", ".join(map(str, depths))


def _percent(value: float) -> str:
    """Whole percent, one decimal below 1 % (a significant change never reads "0 %"), ∞ from a zero baseline."""
    return "∞" if math.isinf(value) else f"{value:.1f}" if value < 1 else f"{value:.0f}"


def _span(changes: list[float]) -> str:
    lo, hi = _percent(min(abs(x) for x in changes) * 100), _percent(max(abs(x) for x in changes) * 100)
    return f"{lo} %" if lo == hi else f"{lo}–{hi} %"


def conclusion(rows: list[tuple[int, dict[str, tuple[float, bool]]]]) -> str:
    """One phrase per metric and direction, e.g. ``150–1500 % higher p99 latency at qd 4–64, 18 % lower at qd 1``.

    A metric that rose at some depths and fell at others says both, each with its own depths and
    the worse direction first: a reader must see where the candidate is worse, not a blended "changed".
    """
    tested = [depth for depth, _ in rows]
    parts = []
    for attr, _, label, higher_better in METRICS:
        phrases: list[str] = []
        worse_first = (("lower", False), ("higher", True)) if higher_better else (("higher", True), ("lower", False))
        for (word, rose), judged in zip(worse_first, ("worse", "better")):
            sig = [(depth, d[attr][0]) for depth, d in rows if d[attr][1] and (d[attr][0] > 0) == rose]
            if sig:
                named = f"{word} {label}" if not phrases else word
                phrases.append(f"{_span([x for _, x in sig])} {named} {_where([d for d, _ in sig], tested)} ({judged})")
        if phrases:
            parts.append(", ".join(phrases))
    return "candidate " + "; ".join(parts) if parts else "no significant difference"


def comparison_report(baseline: list[Sample], candidate: list[Sample], names: tuple[str, str],
                      thresholds: Thresholds) -> Report:
    def by_pattern(samples: list[Sample]) -> dict[tuple[str, str, str], list[Point]]:
        out: dict[tuple[str, str, str], list[Point]] = {}
        for w, points in curves(samples).items():
            key = (w.rw, w.bs, w.ddir)
            out[key] = sorted(out.get(key, []) + points, key=lambda p: p.depth)
        return out

    base, cand = by_pattern(baseline), by_pattern(candidate)
    report = Report("comparison", f"fio comparison — baseline {names[0]} vs candidate {names[1]}")
    summary = Table(["workload"] + [label for _, _, label, _ in METRICS], [])
    report.summary.append(f"A delta is marked significant where it exceeds {SIGNIFICANCE:g}× the combined run-to-run spread "
                          "(standard deviation across repeats, else fio's own).")
    report.summary += skipped_lines(baseline, candidate)
    common = sorted(set(base) & set(cand))
    for only, label in ((set(base) - set(cand), "baseline"), (set(cand) - set(base), "candidate")):
        if only:
            report.summary.append(f"Only in the {label}: " + ", ".join(" ".join(k) for k in sorted(only)))
    for key in common:
        b_points, c_points = {p.depth: p for p in base[key]}, {p.depth: p for p in cand[key]}
        depths = sorted(set(b_points) & set(c_points))
        title = " ".join(key)
        table = Table(["queue depth"] + [f"{label} {n}" for _, _, label, _ in METRICS for n in ("baseline", "candidate", "Δ")], [])
        per_metric: dict[str, dict[str, list[int]]] = {attr: {} for attr, _, _, _ in METRICS}
        rows = []
        for depth in depths:
            b, c = b_points[depth], c_points[depth]
            deltas = {attr: delta(b, c, attr, spread) for attr, spread, _, _ in METRICS}
            rows.append((depth, deltas))
            cells = [str(depth)]
            for attr, _, _label, _ in METRICS:
                judged = judgement(attr, *deltas[attr])
                per_metric[attr].setdefault(judged, []).append(depth)
                cells += [_fmt(attr, getattr(b, attr)), _fmt(attr, getattr(c, attr)), f"{deltas[attr][0] * 100:+.1f} % {judged}"]
                if deltas[attr][1]:
                    table.marked.add((len(table.rows), len(cells) - 1))
            table.rows.append(cells)
        line = conclusion(rows) if rows else "no queue depth in common"
        significant = any(d[1] for _, ds in rows for d in ds.values())
        chart = response_chart(f"compare-{'-'.join(key)}", title,
                               [(f"baseline {names[0]}", [b_points[d] for d in sorted(b_points)]),
                                (f"candidate {names[1]}", [c_points[d] for d in sorted(c_points)])],
                               uses_bandwidth(key[1]))
        summary.rows.append([title] + ["; ".join(f"{word} at qd {', '.join(map(str, qds))}" for word, qds in sorted(
            per_metric[attr].items(), key=lambda kv: ("worse", "better", "same").index(kv[0]))) for attr, _, _, _ in METRICS])
        report.verdicts.append(Verdict("comparison", None, f"{title}: {line}", {"significant": str(significant).lower()}))
        report.sections.append(Section(title, charts=[chart], lines=[line], tables=[table]))
    if summary.rows:  # up front: one line per workload, each metric better / worse / same by depth
        report.sections.insert(0, Section("Summary: candidate against baseline", tables=[summary]))
    report.verdicts += (fsync_verdicts([x.source for x in baseline], thresholds, "baseline")
                        + fsync_verdicts([x.source for x in candidate], thresholds, "candidate"))
    if not common:
        report.verdicts.append(Verdict("comparison", None, "no workload in common between baseline and candidate",
                                       {"significant": "false"}))
    return report
